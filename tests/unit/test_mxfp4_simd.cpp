// quantize_row_mxfp4_simd == quantize_row_mxfp4_ref and quantize_row_mxfp4_from_fp8_simd ==
// dequantize_row_fp8_e8m0_32 + quantize_row_mxfp4_ref, bit for bit (codes, scale bytes and
// the three fp64 sums), on every SIMD target this CPU supports and the build generated.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/mxfp4.h"
#include "kernels/nvfp4.h"
#include "simd_targets.h"
#include "stages/codec.h"
#include "stages/recipes/recipe.h"

using namespace shardq;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kMax = std::numeric_limits<float>::max();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

float next_up(float x) { return std::nextafter(x, kInf); }
float next_down(float x) { return std::nextafter(x, -kInf); }
float from_bits(uint32_t bits) { return std::bit_cast<float>(bits); }
uint32_t to_bits(float x) { return std::bit_cast<uint32_t>(x); }

// The same bits; a NaN sum (a NaN or inf - inf in the row) only has to be NaN in both.
::testing::AssertionResult same_sum(double got, double want) {
  if (std::bit_cast<uint64_t>(got) == std::bit_cast<uint64_t>(want) || (std::isnan(got) && std::isnan(want)))
    return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << std::hexfloat << got << " vs ref " << want;
}

struct Quantized {
  std::vector<uint8_t> packed, scales;
  Mxfp4RowSums sums;
};

void expect_same(const Quantized& got, const Quantized& want, const std::string& where) {
  ASSERT_EQ(got.scales, want.scales) << where;
  ASSERT_EQ(got.packed, want.packed) << where;
  EXPECT_TRUE(same_sum(got.sums.source_sq, want.sums.source_sq)) << where << ": source_sq";
  EXPECT_TRUE(same_sum(got.sums.dequant_sq, want.sums.dequant_sq)) << where << ": dequant_sq";
  EXPECT_TRUE(same_sum(got.sums.error_sq, want.sums.error_sq)) << where << ": error_sq";
}

// Output buffers start as 0xEE so that a byte the kernel never writes shows.
Quantized empty_for(size_t cols) { return {std::vector<uint8_t>(cols / 2, 0xEE), std::vector<uint8_t>(cols / 32, 0xEE), {}}; }

Quantized ref_of(const std::vector<float>& row) {
  Quantized q = empty_for(row.size());
  q.sums = quantize_row_mxfp4_ref(row.data(), int(row.size()), q.packed.data(), q.scales.data());
  return q;
}

Quantized simd_of(const std::vector<float>& row) {
  Quantized q = empty_for(row.size());
  q.sums = quantize_row_mxfp4_simd(row.data(), int(row.size()), q.packed.data(), q.scales.data());
  return q;
}

void expect_simd_equals_ref(const std::vector<float>& row, const std::string& what) {
  expect_same(simd_of(row), ref_of(row), what);
}

// FP8 source rows: the fused kernel against the scalar decode followed by the ref.
struct Fp8Row {
  std::vector<uint8_t> codes, scales;
};

std::vector<float> decoded(const Fp8Row& row) {
  std::vector<float> x(row.codes.size());
  dequantize_row_fp8_e8m0_32(row.codes.data(), row.scales.data(), int(x.size()), x.data());
  return x;
}

void expect_fused_equals_ref(const Fp8Row& row, const std::string& what) {
  const std::vector<float> x = decoded(row);
  const Quantized want = ref_of(x);
  Quantized got = empty_for(x.size());
  got.sums = quantize_row_mxfp4_from_fp8_simd(row.codes.data(), row.scales.data(), int(x.size()), got.packed.data(),
                                              got.scales.data());
  expect_same(got, want, what + " (fused)");
  expect_same(simd_of(x), want, what + " (decoded row)");
}

// Normal values times 2^u, u uniform in [-spread, spread]: the spread of real weights.
std::vector<float> random_row(std::mt19937& rng, size_t cols, float spread) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> exponent(-spread, spread);
  std::vector<float> row(cols);
  for (float& v : row) v = normal(rng) * std::exp2(exponent(rng));
  return row;
}

// Blocks of every kind the ref has a rule for: wide exponents, exact midpoints, zeros of
// both signs, quotients that underflow, maxima just above 6 * 2^k (test_mxfp4.cpp's).
std::vector<float> mixed_row(std::mt19937& rng, size_t cols) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-140, 120);
  const float midpoints[] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};
  std::vector<float> row(cols, 0.0f);
  for (size_t b = 0; b < cols / 32; ++b) {
    const int kind = int(rng() % 6), k = exponent(rng);
    for (size_t i = 0; i < 32; ++i) {
      float& v = row[b * 32 + i];
      const float sign = rng() & 1 ? 1.0f : -1.0f;
      if (kind == 0) v = normal(rng) * std::ldexp(1.0f, k);
      else if (kind == 1) v = sign * midpoints[rng() % 7] * std::ldexp(1.0f, k);
      else if (kind == 2) v = rng() % 3 ? sign * 0.0f : normal(rng) * std::ldexp(1.0f, k);
      else if (kind == 3) v = normal(rng) * std::ldexp(1.0f, int(rng() % 160) - 140);
      else if (kind == 4) v = sign * from_bits(to_bits(std::ldexp(6.0f, k % 100)) + uint32_t(rng() % 24)) / float(1 + (i > 0));
      else v = normal(rng) * std::ldexp(1.0f, std::clamp(k, -30, 30));
    }
  }
  return row;
}

// Blocks led by `amax` (at a varying position, either sign), the rest of each block
// multiples of it: its scale byte decides the whole block.
std::vector<float> rows_led_by(const std::vector<float>& amaxes, std::mt19937& rng) {
  std::uniform_real_distribution<float> fraction(-1.0f, 1.0f);
  std::vector<float> row;
  for (size_t b = 0; b < amaxes.size(); ++b) {
    const size_t lead = b % 32;
    for (size_t i = 0; i < 32; ++i) {
      const float sign = (b / 32) % 2 ? -1.0f : 1.0f;
      row.push_back(i == lead ? sign * amaxes[b] : amaxes[b] * fraction(rng));
    }
  }
  while (row.size() % 256) row.push_back(0.0f);
  return row;
}

// Quantizes `row` in rows of 256 (the Engram width) and compares each.
void expect_rows_equal_ref(const std::vector<float>& values, const std::string& what) {
  for (size_t at = 0; at < values.size(); at += 256) {
    const std::vector<float> row(values.begin() + long(at), values.begin() + long(std::min(values.size(), at + 256)));
    expect_simd_equals_ref(row, what + ", row " + std::to_string(at / 256));
  }
}

} // namespace

TEST(Mxfp4Simd, RandomRowsEqualRef) {
  test::for_each_simd_target([](const std::string& on) {
    std::mt19937 rng(11);
    // Widths of 1, 2, 8, 9, 15 and 224 blocks: whole groups of 8 blocks and remainders.
    for (int trial = 0; trial < 200; ++trial)
      for (size_t cols : {32, 64, 256, 288, 480, 7168})
        for (float spread : {0.0f, 3.0f, 20.0f})
          expect_simd_equals_ref(random_row(rng, cols, spread), "random " + std::to_string(trial) + on);
  });
}

TEST(Mxfp4Simd, MixedRowsEqualRef) {
  test::for_each_simd_target([](const std::string& on) {
    std::mt19937 rng(2024);
    for (int trial = 0; trial < 2000; ++trial)
      expect_simd_equals_ref(mixed_row(rng, 256), "mixed " + std::to_string(trial) + on);
  });
}

// Quotients exactly on every E2M1 midpoint and code, one ulp either side, both signs, under
// scales from the clamped 2^-127 up to 2^125: each block's leading 6 * 2^k fixes its scale.
TEST(Mxfp4Simd, TiesAtEveryMidpointEqualRef) {
  const float quotients[] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, 0.5f,
                             1.0f,  1.5f,  2.0f,  3.0f,  4.0f, 6.0f, 0.125f};
  test::for_each_simd_target([&](const std::string& on) {
    for (int k : {-140, -130, -127, -126, -100, -20, -5, -4, -1, 0, 1, 3, 4, 20, 100, 124, 125}) {
      const float unit = std::ldexp(1.0f, k);
      std::vector<float> row;
      for (int sign = 0; sign < 2; ++sign) {
        for (float q : quotients) {
          for (float at : {q, next_down(q), next_up(q)}) {
            if (row.size() % 32 == 0) row.push_back(6.0f * unit);
            row.push_back((sign ? -at : at) * unit);
          }
        }
        while (row.size() % 32) row.push_back(sign ? -0.0f : 0.0f);
      }
      while (row.size() % 256) row.push_back(0.0f);
      // The midpoints themselves must be there (not rounded away by a tiny unit).
      ASSERT_NE(std::find(row.begin(), row.end(), 0.25f * unit), row.end()) << k;
      expect_simd_equals_ref(row, "ties, k " + std::to_string(k) + on);
    }
  });
}

// Exact zeros (nibble 8), -0.0, all-zero blocks of either sign, and tiny values whose
// quotient is or is not zero, of either sign, next to a large block maximum.
TEST(Mxfp4Simd, ZerosNegativeZerosAndUnderflowsEqualRef) {
  test::for_each_simd_target([](const std::string& on) {
    std::vector<float> row(256, 0.0f);                       // block 0: all +0
    for (size_t i = 32; i < 64; ++i) row[i] = -0.0f;         // block 1: all -0
    for (size_t i = 64; i < 96; ++i) row[i] = i % 2 ? -0.0f : 0.0f;
    row[96] = 6144.0f, row[97] = 0x1p-140f, row[98] = 0x1p-139f, row[99] = -0x1p-140f, row[100] = -0x1p-139f;
    row[101] = 0x1p-149f, row[102] = -0x1p-149f, row[103] = -0.0f;
    for (size_t i = 128; i < 160; ++i) row[i] = (i % 2 ? -1.0f : 1.0f) * from_bits(uint32_t(i - 127)); // denormals
    for (size_t i = 160; i < 192; ++i) row[i] = (i % 3 ? -1.0f : 1.0f) * from_bits(0x007FFFFFu - uint32_t(i));
    row[192] = kMax, row[193] = 1.0f, row[194] = -1e-30f, row[195] = 1e-30f;      // tiny under scale 2^126
    row[224] = 0x1p-149f;                                                          // amax = the smallest denormal
    row[225] = -0x1p-149f;
    expect_simd_equals_ref(row, "zeros" + on);
    for (float lone : {0x1p-149f, -0x1p-149f, 0x1p-126f, -0x1p-127f, 1e-45f, 3e-39f}) {
      std::vector<float> block(32, 0.0f);
      block[7] = lone;
      expect_simd_equals_ref(block, "lone value" + on);
    }
  });
}

// Block maxima at 6 * 2^k and up to 64 ulps either side for every k (where the fp32 log2
// rounds down to k for k >= 4 and k <= -5, as it does just above 2^k for every k).
TEST(Mxfp4Simd, AmaxNearSixTimesPowersOfTwoEqualsRef) {
  std::vector<float> amaxes;
  for (int k = -150; k <= 125; ++k) {
    const float anchor = std::ldexp(6.0f, k);
    amaxes.push_back(anchor);
    for (uint32_t ulps = 1; ulps <= 64; ++ulps) {
      amaxes.push_back(from_bits(to_bits(anchor) + ulps));
      if (to_bits(anchor) > ulps) amaxes.push_back(from_bits(to_bits(anchor) - ulps));
    }
  }
  test::for_each_simd_target([&](const std::string& on) {
    std::mt19937 rng(3);
    expect_rows_equal_ref(rows_led_by(amaxes, rng), "near 6 * 2^k" + on);
  });
}

// The scale byte's shortcut decides from the bits of amax / 6: every biased exponent with
// fractions at and around the shortcut's bound (2^13 of 2^23) and at both ends.
TEST(Mxfp4Simd, AmaxOverEveryExponentAndTheShortcutBoundEqualsRef) {
  std::vector<float> amaxes;
  // 1..40: where fp32 log2 rounds down to k (up to ~22 ulps for k near 126).
  std::vector<uint32_t> fractions = {0x1000, 0x1FFF, 0x2000, 0x2001, 0x2002, 0x4000, 0x400000, 0x7FFFFE, 0x7FFFFF};
  for (uint32_t f = 0; f <= 40; ++f) fractions.push_back(f);
  for (uint32_t exponent = 0; exponent <= 254; ++exponent) {
    for (uint32_t fraction : fractions) {
      const float descale = from_bits(exponent << 23 | fraction);
      for (float amax : {descale * 6.0f, next_down(descale * 6.0f), next_up(descale * 6.0f), from_bits(exponent << 23 | fraction)})
        if (std::isfinite(amax)) amaxes.push_back(amax);
    }
  }
  test::for_each_simd_target([&](const std::string& on) {
    std::mt19937 rng(5);
    expect_rows_equal_ref(rows_led_by(amaxes, rng), "exponent sweep" + on);
  });
}

// FLT_MAX (byte 253: 4 * 2^126 overflows in the dequantized fp32, inf sums), values near it,
// and infinities (byte 254, outside the ref's precondition but the same bytes).
TEST(Mxfp4Simd, HugeValuesAndInfinitiesEqualRef) {
  test::for_each_simd_target([](const std::string& on) {
    std::vector<float> row(256, 1.0f);
    row[0] = kMax;                                   // block 0
    row[32] = -kMax, row[33] = kMax / 3;             // block 1
    row[64] = std::ldexp(6.0f, 125), row[65] = -next_up(std::ldexp(6.0f, 125)); // block 2: byte 252
    row[96] = next_up(std::ldexp(6.0f, 125));        // block 3
    row[128] = kInf, row[129] = 3.0f;                // block 4
    row[160] = -kInf, row[161] = kInf;               // block 5: inf - inf in the error term
    row[192] = kMax, row[193] = -kMax, row[194] = 0x1p-149f; // block 6
    expect_simd_equals_ref(row, "huge" + on);
    const Quantized q = simd_of(row);
    EXPECT_EQ(q.scales[0], 253);
    EXPECT_TRUE(std::isinf(q.sums.dequant_sq));
  });
}

// NaN is outside the ref's precondition; the SIMD kernel still gives its bytes (amax skips
// NaN, its nibble is 0xF) and NaN sums.
TEST(Mxfp4Simd, NaNValuesGiveTheRefBytes) {
  test::for_each_simd_target([](const std::string& on) {
    std::mt19937 rng(9);
    std::vector<float> row = random_row(rng, 256, 3.0f);
    row[3] = kNaN, row[40] = -kNaN;
    for (size_t i = 64; i < 96; ++i) row[i] = kNaN; // a block of NaN only: byte 0
    row[200] = kNaN, row[201] = kInf;
    expect_simd_equals_ref(row, "NaN" + on);
    EXPECT_TRUE(std::isnan(simd_of(row).sums.error_sq));
  });
}

// Every E4M3 code (NaN codes included) under E8M0 scales from the smallest to NaN: each
// block holds 32 consecutive codes, so every code leads some block and sits under others.
TEST(Mxfp4Simd, EveryFp8CodeTimesScalesEqualsDecodeThenRef) {
  const int source_scales[] = {0, 1, 2, 20, 100, 117, 120, 127, 134, 200, 240, 246, 247, 250, 252, 253, 254, 255};
  test::for_each_simd_target([&](const std::string& on) {
    for (int scale : source_scales) {
      for (int rotation = 0; rotation < 32; rotation += 5) {
        Fp8Row row{std::vector<uint8_t>(256), std::vector<uint8_t>(8, uint8_t(scale))};
        for (int block = 0; block < 8; ++block)
          for (int i = 0; i < 32; ++i) row.codes[size_t(block * 32 + i)] = uint8_t(block * 32 + (i + rotation) % 32);
        expect_fused_equals_ref(row, "scale " + std::to_string(scale) + ", rotation " + std::to_string(rotation) + on);
      }
      // Each code alone in a block of zeros, and with its negation beside it.
      for (int code = 0; code < 256; code += 8) {
        Fp8Row row{std::vector<uint8_t>(256, 0), std::vector<uint8_t>(8, uint8_t(scale))};
        for (int k = 0; k < 8; ++k) {
          row.codes[size_t(k * 32 + k)] = uint8_t(code + k);
          row.codes[size_t(k * 32 + 31 - k)] = uint8_t((code + k) ^ 0x80);
        }
        expect_fused_equals_ref(row, "lone code " + std::to_string(code) + ", scale " + std::to_string(scale) + on);
      }
    }
  });
}

// Realistic source rows: random finite codes of both signs, scales near 2^-7 with a few far
// off (up to 254, past the fp16 decode's range), per block; widths 256 (Engram), 7168 and
// two that end in a partial group of blocks.
TEST(Mxfp4Simd, RandomFp8RowsEqualDecodeThenRef) {
  test::for_each_simd_target([](const std::string& on) {
    std::mt19937 rng(17);
    for (int trial = 0; trial < 300; ++trial) {
      for (size_t cols : {96, 256, 288, 7168}) {
        Fp8Row row{std::vector<uint8_t>(cols), std::vector<uint8_t>(cols / 32)};
        for (auto& c : row.codes) {
          c = uint8_t(rng() % 0x7F) | uint8_t(rng() % 2 ? 0x80 : 0);
          if (rng() % 16 == 0) c &= 0x87; // subnormal codes and zeros
        }
        for (auto& s : row.scales) s = uint8_t(rng() % 64 == 0 ? rng() % 255 : 110 + rng() % 20);
        expect_fused_equals_ref(row, "random fp8 " + std::to_string(trial) + on);
      }
    }
  });
}

// The Engram MXFP4 codec (encode_chunk, which now calls the fused kernel) against what it did
// before: each row decoded by the scalar decoder and quantized by the ref, figures included.
TEST(Mxfp4SimdCodec, EngramMxfp4ChunkEqualsDecodeThenRef) {
  constexpr int kRows = 300, kCols = 256, kScaleCols = kCols / 32;
  Task task;
  task.name = "layers.0.engram.embed";
  task.codec = CodecKind::engram_mxfp4;
  task.inputs = {task.name + ".weight", task.name + ".scale"};
  task.rows = kRows;
  task.cols = kCols;
  task.rows_per_chunk = kRows;
  std::mt19937 rng(23);
  std::vector<uint8_t> codes(size_t(kRows) * kCols), scales(size_t(kRows) * kScaleCols);
  for (auto& c : codes) c = uint8_t(rng() % 0x7F) | uint8_t(rng() % 2 ? 0x80 : 0);
  for (auto& s : scales) s = uint8_t(rng() % 32 == 0 ? rng() % 255 : 112 + rng() % 16);
  for (int r = 0; r < kRows; r += 7) // all-zero blocks (+0 and -0 codes): scale byte 0
    for (int i = 0; i < 32; ++i) codes[size_t(r) * kCols + size_t(i)] = i % 2 ? 0x80 : 0x00;

  Quantized want = empty_for(size_t(kRows) * kCols);
  ChunkStats want_stats;
  std::vector<float> x(kCols);
  for (int r = 0; r < kRows; ++r) {
    dequantize_row_fp8_e8m0_32(codes.data() + size_t(r) * kCols, scales.data() + size_t(r) * kScaleCols, kCols, x.data());
    uint8_t* row_scales = want.scales.data() + size_t(r) * kScaleCols;
    const Mxfp4RowSums sums = quantize_row_mxfp4_ref(x.data(), kCols, want.packed.data() + size_t(r) * kCols / 2, row_scales);
    ++want_stats.rows;
    want_stats.blocks += kScaleCols;
    want_stats.zero_blocks += uint64_t(std::count(row_scales, row_scales + kScaleCols, uint8_t{0}));
    want_stats.reference_sq.add(sums.source_sq);
    want_stats.output_sq.add(sums.dequant_sq);
    want_stats.error_sq.add(sums.error_sq);
  }
  ASSERT_GT(want_stats.zero_blocks, 0u);

  test::for_each_simd_target([&](const std::string& on) {
    const CodecParams params;
    const EncodeContext context{params, 0.0f, nullptr};
    const ChunkInput chunk{task, 0, kRows, {codes, scales}, nullptr};
    EncodedChunk out;
    ASSERT_TRUE(encode_chunk(chunk, context, out, nullptr)) << on;
    ASSERT_EQ(out.buffers.size(), 2u) << on;
    EXPECT_EQ(out.buffers[0], want.packed) << on;
    EXPECT_EQ(out.buffers[1], want.scales) << on;
    EXPECT_EQ(out.stats, want_stats) << on;
  });
}
