// quantize_row_nvfp4_simd == quantize_row_nvfp4_ref, bit for bit (codes, scales, every
// stat), on every SIMD target this CPU supports, for RTN and the MSE search.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "kernels/nvfp4.h"
#include "simd_targets.h"
#include "nvfp4_test_util.h"

using namespace shardq;
using namespace shardq::test;

namespace {

const ScaleSearch kSearches[] = {ScaleSearch{1}, ScaleSearch{8, 0.75}};

void expect_simd_equals_ref(const std::vector<float>& row, float global, const std::string& what) {
  const int cols = int(row.size());
  for (const ScaleSearch& search : kSearches) {
    std::vector<uint8_t> packed_ref(cols / 2), packed_simd(cols / 2, 0xEE);
    std::vector<uint8_t> scales_ref(cols / 16), scales_simd(cols / 16, 0xEE);
    BlockStats ref, simd;
    quantize_row_nvfp4_ref(row.data(), cols, global, search, packed_ref.data(), scales_ref.data(), ref);
    quantize_row_nvfp4_simd(row.data(), cols, global, search, packed_simd.data(), scales_simd.data(), simd);
    const std::string where = what + ", candidates " + std::to_string(search.candidates);
    ASSERT_EQ(packed_simd, packed_ref) << where;
    ASSERT_EQ(scales_simd, scales_ref) << where;
    expect_same_stats(simd, ref, where);
  }
}

// Blocks whose quotients x / (s * global) land exactly on every E2M1 midpoint and code and
// one ulp either side, both signs, for several exact E4M3 scales s (amax = 6 * s fixes the
// scale).
std::vector<float> tie_row() {
  const float quotients[] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  std::vector<float> row;
  for (float scale : {0x1p-9f, 0.1875f, 1.0f, 1.125f, 448.0f}) {
    for (int sign = 0; sign < 2; ++sign) {
      for (float q : quotients) {
        // The midpoint or code itself, then one ulp either side of it.
        for (float at : {q, std::nextafter(q, 0.0f), std::nextafter(q, 8.0f)}) {
          if (row.size() % 16 == 0) row.push_back(6.0f * scale); // each block's amax sets its scale
          row.push_back((sign ? -at : at) * scale);
        }
      }
      while (row.size() % 16) row.push_back(sign ? -0.0f : 0.0f);
    }
  }
  return row;
}

} // namespace

TEST(Nvfp4Simd, RandomRowsEqualRef) {
  test::for_each_simd_target([](const std::string& on) {
    std::mt19937 rng(7);
    for (int cols : {16, 32, 256, 1024, 7168}) {
      const auto row = random_values(rng, size_t(cols), 3.0f);
      expect_simd_equals_ref(row, Nvfp4::global_scale(amax_of(row)), "random" + on);
    }
  });
}

TEST(Nvfp4Simd, ZerosAndNegativeZerosEqualRef) {
  test::for_each_simd_target([](const std::string& on) {
    std::vector<float> row(256, 0.0f);
    expect_simd_equals_ref(row, 1.0f, "zeros" + on);
    for (size_t i = 0; i < row.size(); i += 3) row[i] = -0.0f;
    expect_simd_equals_ref(row, 1.0f, "negative zeros" + on);
    row[40] = 1.0f; // one block with -0.0 beside a real value
    expect_simd_equals_ref(row, 1.0f / 2688.0f, "negative zeros beside a value" + on);
  });
}

TEST(Nvfp4Simd, TinyBlocksWithScaleUnderflowEqualRef) {
  test::for_each_simd_target([](const std::string& on) {
    std::mt19937 rng(11);
    auto row = random_values(rng, 512, 2.0f);
    for (size_t i = 256; i < row.size(); ++i) row[i] *= 1e-7f; // blocks far below 2^-9 * 6 * global
    row[300] = 0x1p-149f;
    const float global = Nvfp4::global_scale(amax_of(row));
    expect_simd_equals_ref(row, global, "tiny blocks" + on);
    std::vector<float> subnormal_block(16, 0.0f);
    subnormal_block[5] = 0x1p-149f;
    expect_simd_equals_ref(subnormal_block, 0x1p20f, "scale zero in fp32" + on);
  });
}

TEST(Nvfp4Simd, HugeDynamicRangeEqualRef) {
  test::for_each_simd_target([](const std::string& on) {
    std::mt19937 rng(13);
    const auto row = random_values(rng, 2048, 60.0f);
    expect_simd_equals_ref(row, Nvfp4::global_scale(amax_of(row)), "huge range" + on);
    expect_simd_equals_ref(row, 1e-30f, "scales clamped at 448" + on);
    // Near fp32's limits: squares of the unscaled values would overflow or flush.
    const auto extreme = random_values(rng, 2048, 124.0f);
    expect_simd_equals_ref(extreme, Nvfp4::global_scale(amax_of(extreme)), "extreme range" + on);
  });
}

TEST(Nvfp4Simd, ExactTiesAtEveryE2M1MidpointEqualRef) {
  test::for_each_simd_target([](const std::string& on) {
    const auto row = tie_row();
    expect_simd_equals_ref(row, 1.0f, "ties" + on);
    expect_simd_equals_ref(row, 0.5f, "ties, global 0.5" + on);
  });
}

namespace {

// Lane-wise blocks (element e of block l at columns[e * lanes + l]) from row-wise ones.
std::vector<float> lane_layout(const std::vector<float>& blocks, int lanes) {
  std::vector<float> columns(blocks.size());
  for (int l = 0; l < lanes; ++l)
    for (int e = 0; e < Nvfp4::block; ++e) columns[size_t(e) * lanes + l] = blocks[size_t(l) * Nvfp4::block + e];
  return columns;
}

// choose_block_scales_nvfp4_lanes == choose_and_quantize_block_nvfp4 on each block: codes
// for every lane, counters for the first `counted` blocks only.
void expect_lanes_equal_scalar(const std::vector<float>& blocks, int counted, float global, const std::string& what) {
  const int lanes = int(blocks.size()) / Nvfp4::block;
  const auto columns = lane_layout(blocks, lanes);
  for (const ScaleSearch& search : kSearches) {
    std::vector<uint8_t> codes_ref(lanes), codes_simd(lanes, 0xEE);
    BlockStats ref, simd;
    uint8_t nibbles[Nvfp4::block];
    for (int l = 0; l < lanes; ++l) {
      BlockStats block_stats;
      codes_ref[l] = choose_and_quantize_block_nvfp4(blocks.data() + size_t(l) * Nvfp4::block, global, search,
                                                     nibbles, block_stats);
      if (l < counted) ref.merge(block_stats);
    }
    choose_block_scales_nvfp4_lanes(columns.data(), size_t(lanes), lanes, counted, global, search,
                                    codes_simd.data(), simd);
    const std::string where = what + ", candidates " + std::to_string(search.candidates);
    ASSERT_EQ(codes_simd, codes_ref) << where;
    EXPECT_EQ(simd.blocks, ref.blocks) << where;
    EXPECT_EQ(simd.zero_blocks, ref.zero_blocks) << where;
    EXPECT_EQ(simd.scale_underflows, ref.scale_underflows) << where;
    EXPECT_EQ(simd.candidate_wins, ref.candidate_wins) << where;
    EXPECT_EQ(simd.error_sq, 0.0) << where;
    EXPECT_EQ(simd.reference_sq, 0.0) << where;
  }
}

} // namespace

TEST(Nvfp4SimdLanes, RandomTilesEqualScalarChooser) {
  test::for_each_simd_target([](const std::string& on) {
    std::mt19937 rng(17);
    for (float spread : {1.0f, 3.0f, 40.0f}) {
      const auto blocks = random_values(rng, size_t(64 * Nvfp4::block), spread);
      const float global = Nvfp4::global_scale(amax_of(blocks));
      expect_lanes_equal_scalar(blocks, 64, global, "random tile" + on);
      expect_lanes_equal_scalar(blocks, 37, global, "random tile, 37 rows counted" + on);
      expect_lanes_equal_scalar(blocks, 64, 1e-30f, "clamped at 448" + on);
    }
  });
}

TEST(Nvfp4SimdLanes, ZeroTinyAndTieBlocksEqualScalarChooser) {
  test::for_each_simd_target([](const std::string& on) {
    std::mt19937 rng(19);
    auto blocks = random_values(rng, size_t(16 * Nvfp4::block), 2.0f);
    for (int e = 0; e < Nvfp4::block; ++e) blocks[size_t(3) * 16 + e] = (e % 2) ? -0.0f : 0.0f; // a zero block
    for (int e = 0; e < Nvfp4::block; ++e) blocks[size_t(5) * 16 + e] *= 1e-9f;                 // underflows
    blocks[size_t(6) * 16 + 4] = 0x1p-149f;
    expect_lanes_equal_scalar(blocks, 16, Nvfp4::global_scale(amax_of(blocks)), "zero and tiny" + on);
    auto ties = tie_row();
    ties.resize(16 * Nvfp4::block, 0.0f); // 10 tie blocks, padded to 16 blocks with zero blocks
    expect_lanes_equal_scalar(ties, int(ties.size() / 16), 1.0f, "ties" + on);
  });
}

TEST(Fp8DequantizeSimd, EveryCodeTimesScalesEqualsScalar) {
  test::for_each_simd_target([](const std::string& on) {
    // 256 codes in every group position, eight groups, then a 17-value tail group.
    const uint8_t scale_codes[] = {0, 1, 100, 127, 130, 200, 254, 0xFF};
    for (uint8_t scale_code : scale_codes) {
      const int cols = 256 * 8 + 17;
      std::vector<uint8_t> codes(cols), scales((cols + 31) / 32, scale_code);
      for (int i = 0; i < cols; ++i) codes[i] = uint8_t(i * 7 + i / 256); // every code in every lane slot
      std::vector<float> ref(cols), simd(cols, -1.0f);
      dequantize_row_fp8_e8m0_32(codes.data(), scales.data(), cols, ref.data());
      dequantize_row_fp8_e8m0_32_simd(codes.data(), scales.data(), cols, simd.data());
      for (int i = 0; i < cols; ++i) {
        const std::string where = "code " + std::to_string(codes[i]) + " scale " + std::to_string(scale_code) + on;
        if (std::isnan(ref[i])) EXPECT_TRUE(std::isnan(simd[i])) << where;
        else ASSERT_TRUE(same_bits(simd[i], ref[i])) << where << ": " << simd[i] << " vs " << ref[i];
      }
    }
  });
}

TEST(Nvfp4DequantizeSimd, EveryByteAndScaleCodeEqualsScalar) {
  test::for_each_simd_target([](const std::string& on) {
    // 256 blocks: block b has scale code b (every E4M3 code, NaN and zero included) and
    // bytes that walk all 256 values over the row, so every nibble pair meets every scale.
    const int blocks = 256, cols = blocks * Nvfp4::block;
    std::vector<uint8_t> packed(size_t(cols) / 2), scales(blocks);
    for (size_t i = 0; i < packed.size(); ++i) packed[i] = uint8_t(i * 37 + i / 256);
    for (int b = 0; b < blocks; ++b) scales[size_t(b)] = uint8_t(b);
    for (const float global : {1.0f, 1.0f / 2688.0f, 3.1e-5f, 7.5e3f}) {
      std::vector<float> ref(cols), simd(cols, -1.0f);
      dequantize_row_nvfp4(packed.data(), scales.data(), cols, global, ref.data());
      dequantize_row_nvfp4_simd(packed.data(), scales.data(), cols, global, simd.data());
      for (int i = 0; i < cols; ++i) {
        const uint8_t byte = packed[size_t(i) / 2];
        const std::string where = "nibble " + std::to_string(i % 2 ? byte >> 4 : byte & 0xF) + " scale code " +
                                  std::to_string(scales[size_t(i) / Nvfp4::block]) + " global " + std::to_string(global) + on;
        if (std::isnan(ref[size_t(i)])) EXPECT_TRUE(std::isnan(simd[size_t(i)])) << where;
        else ASSERT_TRUE(same_bits(simd[size_t(i)], ref[size_t(i)])) << where << ": " << simd[size_t(i)] << " vs " << ref[size_t(i)];
      }
    }
  });
}

TEST(Nvfp4SimdLanes, BlockErrorsEqualScalar) {
  test::for_each_simd_target([](const std::string& on) {
    std::mt19937 rng(23);
    constexpr int lanes = 32;
    auto blocks = random_values(rng, size_t(lanes * Nvfp4::block), 3.0f);
    for (int e = 0; e < Nvfp4::block; ++e) blocks[size_t(2) * 16 + e] = 0.0f; // a zero block
    const float global = Nvfp4::global_scale(amax_of(blocks));
    std::vector<uint8_t> codes(lanes), nibbles(blocks.size()), nibble_columns(blocks.size());
    BlockStats unused;
    for (int l = 0; l < lanes; ++l)
      codes[l] = choose_and_quantize_block_nvfp4(blocks.data() + size_t(l) * 16, global, ScaleSearch{8, 0.75},
                                                 nibbles.data() + size_t(l) * 16, unused);
    for (int l = 0; l < lanes; ++l)
      for (int e = 0; e < Nvfp4::block; ++e) nibble_columns[size_t(e) * lanes + l] = nibbles[size_t(l) * 16 + e];
    const auto columns = lane_layout(blocks, lanes);
    std::vector<double> errors(lanes), references(lanes);
    block_errors_nvfp4_lanes(columns.data(), nibble_columns.data(), lanes, lanes, codes.data(), global, errors.data(),
                             references.data());
    for (int l = 0; l < lanes; ++l) {
      const float* block = blocks.data() + size_t(l) * 16;
      float deq[Nvfp4::block];
      for (int e = 0; e < Nvfp4::block; ++e) deq[e] = dequantize_nvfp4(nibbles[size_t(l) * 16 + e], codes[l], global);
      const BlockSums sums = block_report_sums_nvfp4(block, deq);
      EXPECT_TRUE(same_bits(errors[l], sums.error_sq)) << "lane " << l << on;
      EXPECT_TRUE(same_bits(references[l], sums.reference_sq)) << "lane " << l << on;
    }
  });
}

// The stage's row report sums (GPTQ and verify): the SIMD form against the ref's, on rows
// with tails shorter than a vector of blocks, an extreme range and zero blocks, with the
// row's own NVFP4 values and with arbitrary ones.
TEST(Nvfp4Simd, RowReportSumsEqualRef) {
  test::for_each_simd_target([](const std::string& on) {
    std::mt19937 rng(29);
    for (int cols : {16, 48, 256, 7168}) {
      for (float range : {3.0f, 124.0f}) {
        auto row = random_values(rng, size_t(cols), range);
        for (int e = 0; e < 16 && cols >= 32; ++e) row[size_t(16 + e)] = e % 2 ? -0.0f : 0.0f;
        const float global = Nvfp4::global_scale(amax_of(row));
        std::vector<uint8_t> packed(size_t(cols) / 2), scales(size_t(cols) / 16);
        BlockStats unused;
        quantize_row_nvfp4_ref(row.data(), cols, global, ScaleSearch{1}, packed.data(), scales.data(), unused);
        std::vector<float> deq(static_cast<size_t>(cols));
        dequantize_row_nvfp4(packed.data(), scales.data(), cols, global, deq.data());
        const auto arbitrary = random_values(rng, size_t(cols), range);
        const std::vector<float>* value_rows[] = {&deq, &arbitrary};
        for (const auto* values : value_rows) {
          BlockStats ref, simd;
          add_row_report_sums_nvfp4(row.data(), values->data(), cols, ref);
          add_row_report_sums_nvfp4_simd(row.data(), values->data(), cols, simd);
          const std::string where = "cols " + std::to_string(cols) + ", range " + std::to_string(range) +
                                    (values == &deq ? ", nvfp4 values" : ", arbitrary values") + on;
          EXPECT_TRUE(same_bits(simd.error_sq, ref.error_sq)) << where << ": " << simd.error_sq << " vs " << ref.error_sq;
          EXPECT_TRUE(same_bits(simd.reference_sq, ref.reference_sq)) << where;
          EXPECT_GT(ref.reference_sq, 0.0) << where;
        }
      }
    }
  });
}
