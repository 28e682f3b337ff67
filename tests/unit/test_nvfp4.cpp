// NVFP4 reference kernels against rows whose bytes were worked out by hand (docs/formats.md "NVFP4"
// "NVFP4"), plus the properties of the MSE scale search.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <random>
#include <vector>

#include "kernels/nvfp4.h"

using namespace shardq;

namespace {

const ScaleSearch kRtn{1};
const ScaleSearch kMse{8, 0.75};

struct Quantized {
  std::vector<uint8_t> packed, scales;
  BlockStats stats;
};

Quantized quantize(const std::vector<float>& row, float global, const ScaleSearch& search) {
  Quantized q;
  q.packed.assign(row.size() / 2, 0xEE);
  q.scales.assign(row.size() / 16, 0xEE);
  quantize_row_nvfp4_ref(row.data(), int(row.size()), global, search, q.packed.data(), q.scales.data(), q.stats);
  return q;
}

// Squared error of one quantized block, recomputed here from the bytes.
double block_error_from_bytes(const float* x, const uint8_t* packed, uint8_t scale, float global) {
  double error = 0.0;
  for (int i = 0; i < 16; ++i) {
    const uint8_t nibble = (i & 1) ? packed[i / 2] >> 4 : packed[i / 2] & 0xF;
    const double diff = double(e2m1_to_float(nibble)) * double(e4m3_to_float(scale)) * double(global) - double(x[i]);
    error += diff * diff;
  }
  return error;
}

} // namespace

// Global 1.0 (tensor amax 2688 = 6 * 448), four blocks worked by hand.
TEST(Nvfp4Ref, HandWorkedRowBytes) {
  EXPECT_EQ(Nvfp4::global_scale(2688.0f), 1.0f);
  const std::vector<float> row = {
      // Block 0: amax 2688 -> s = 2688 / 6 = 448 -> E4M3 0x7E; x / 448 below.
      // q:  0    .5   1     1.5   2    3     4     6     -.25   -.75  1.25  1.75  2.5   3.5   5     -6
      // n:  0    1    2     3     4    5     6     7     8      A     2     4     4     6     6     F
      0, 224, 448, 672, 896, 1344, 1792, 2688, -112, -336, 560, 784, 1120, 1568, 2240, -2688,
      // Block 1: amax 3 -> s = 0.5 -> E4M3 0x30 (2^-1: exponent 6, mantissa 0); x / 0.5:
      // q:  6  -6  .25  .75   1.25  1.75  2.25  -2.75  0 ... 0  .5
      // n:  7   F   0    2     2     4     4     D     0 ... 0  1
      3, -3, 0.125f, 0.375f, 0.625f, 0.875f, 1.125f, -1.375f, 0, 0, 0, 0, 0, 0, 0, 0.25f,
      // Block 2: amax 1.1 -> s = 0.18333 -> E4M3 1.5 * 2^-3 = 0.1875 (0x24: exponent 4,
      // mantissa 4; 1.4667 * 8 = 3.73 rounds to 4). x / 0.1875:
      // q: 5.87 -3.2  .5  1.5  .25  1.75  5   -.053  4   2.67  1.07  -1.07  2   3.5  2.5  .75
      // n:  7    D    1   3    0    4     6    8     6   5     2     A      4   6    4    2
      1.1f, -0.6f, 0.09375f, 0.28125f, 0.046875f, 0.328125f, 0.9375f, -0.01f, 0.75f, 0.5f, 0.2f, -0.2f, 0.375f,
      0.65625f, 0.46875f, 0.140625f,
      // Block 3: all zero -> scale 1.0 (0x38), every code 0.
      0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  const Quantized q = quantize(row, 1.0f, kRtn);
  // Packed byte = odd << 4 | even.
  const std::vector<uint8_t> packed = {0x10, 0x32, 0x54, 0x76, 0xA8, 0x42, 0x64, 0xF6,  // block 0
                                       0xF7, 0x20, 0x42, 0xD4, 0x00, 0x00, 0x00, 0x10,  // block 1
                                       0xD7, 0x31, 0x40, 0x86, 0x56, 0xA2, 0x64, 0x24,  // block 2
                                       0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00}; // block 3
  EXPECT_EQ(q.packed, packed);
  EXPECT_EQ(q.scales, (std::vector<uint8_t>{0x7E, 0x30, 0x24, 0x38}));
  EXPECT_EQ(q.stats.blocks, 4u);
  EXPECT_EQ(q.stats.zero_blocks, 1u);
  EXPECT_EQ(q.stats.scale_underflows, 0u);
  EXPECT_EQ(q.stats.candidate_wins[0], 4u);

  std::vector<float> deq(row.size());
  dequantize_row_nvfp4(q.packed.data(), q.scales.data(), int(row.size()), 1.0f, deq.data());
  EXPECT_EQ(deq[7], 2688.0f);
  EXPECT_EQ(deq[8], -0.0f);
  EXPECT_TRUE(std::signbit(deq[8])); // code 0x8 is -0
  EXPECT_EQ(deq[9], -448.0f);        // -0.75 -> -1
  EXPECT_EQ(deq[16], 3.0f);
  EXPECT_EQ(deq[23], -1.5f);         // -2.75 -> -3 times 0.5
  EXPECT_EQ(deq[32], 1.125f);        // 6 * 0.1875
  EXPECT_EQ(deq[33], -0.5625f);      // -3 * 0.1875
}

// The row dequantizer (a 16-value table per block) gives dequantize_nvfp4's bits for every
// nibble under every finite scale code, both nibble positions, at two global scales.
TEST(Nvfp4Ref, RowDequantizeEqualsElementFormula) {
  for (const float global : {1.0f, 3.7e-5f}) {
    for (int code = 0; code < 256; ++code) {
      if ((code & 0x7F) == 0x7F) continue; // E4M3 NaN: never written as a scale
      std::vector<uint8_t> packed(8), scales = {uint8_t(code)};
      for (int i = 0; i < 8; ++i) packed[size_t(i)] = uint8_t((2 * i) | ((2 * i + 1) << 4));
      for (int flip = 0; flip < 2; ++flip) {
        if (flip) for (auto& byte : packed) byte = uint8_t((byte >> 4) | (byte << 4));
        std::vector<float> deq(16);
        dequantize_row_nvfp4(packed.data(), scales.data(), 16, global, deq.data());
        for (int i = 0; i < 16; ++i) {
          const uint8_t nibble = (i & 1) ? uint8_t(packed[size_t(i / 2)] >> 4) : uint8_t(packed[size_t(i / 2)] & 0xF);
          const float expected = E2M1::values[nibble] * e4m3_to_float(uint8_t(code)) * global;
          ASSERT_EQ(std::bit_cast<uint32_t>(deq[size_t(i)]), std::bit_cast<uint32_t>(expected))
              << "code " << code << " element " << i << " global " << global;
        }
      }
    }
  }
}

TEST(Nvfp4Ref, StatsSumsAreErrorAndReference) {
  // Block: {3, 1, 0 ...} global 1: s = 0.5 (0x30), q = 6 and 2 -> exact, error 0.
  // Block: {7, 0 ...}: s = 7/6 = 1.1667 -> E4M3 1.125 (1 + 1/8; nearer than 1.25);
  // 7 / 1.125 = 6.22 -> 6 -> 6.75, error 0.0625.
  std::vector<float> row(32, 0.0f);
  row[0] = 3, row[1] = 1, row[16] = 7;
  const Quantized q = quantize(row, 1.0f, kRtn);
  EXPECT_EQ(q.scales, (std::vector<uint8_t>{0x30, 0x39}));
  EXPECT_EQ(q.stats.error_sq, 0.0625);
  EXPECT_EQ(q.stats.reference_sq, 9.0 + 1.0 + 49.0);
}

TEST(Nvfp4Ref, ScaleUnderflowIsCountedAndClampedTo2PowMinus9) {
  // amax 0.001: s = 1.67e-4 < 2^-9 -> underflow, clamped to 2^-9 (0x01); x * 512:
  // 0.512 -> 1 (0.5), -0.512 -> 9, 0.256 -> 1, 0.0512 -> 0, -0.0512 -> 8.
  std::vector<float> row(16, 0.0f);
  row[0] = 0.001f, row[1] = -0.001f, row[2] = 0.0005f, row[3] = 0.0001f, row[4] = -0.0001f;
  const Quantized q = quantize(row, 1.0f, kRtn);
  EXPECT_EQ(q.scales[0], 0x01);
  EXPECT_EQ(q.packed[0], 0x91);
  EXPECT_EQ(q.packed[1], 0x01);
  EXPECT_EQ(q.packed[2], 0x08);
  EXPECT_EQ(q.stats.scale_underflows, 1u);
  EXPECT_EQ(q.stats.zero_blocks, 0u);
}

TEST(Nvfp4Ref, NonZeroBlockWhoseScaleIsZeroInFp32IsAnUnderflowNotAZeroBlock) {
  // 2^-149 / (6 * 2^20) is 0.0f: still a non-zero block, clamped to 2^-9, codes 0.
  std::vector<float> row(16, 0.0f);
  row[5] = 0x1p-149f;
  const Quantized q = quantize(row, 0x1p20f, kRtn);
  EXPECT_EQ(q.scales[0], 0x01);
  EXPECT_EQ(q.stats.scale_underflows, 1u);
  EXPECT_EQ(q.stats.zero_blocks, 0u);
  for (uint8_t byte : q.packed) EXPECT_EQ(byte, 0x00);
}

TEST(Nvfp4Ref, AllZeroTensorHasGlobalOneAndZeroBlockScales) {
  EXPECT_EQ(Nvfp4::global_scale(0.0f), 1.0f);
  const std::vector<float> row(64, 0.0f);
  for (const ScaleSearch& search : {kRtn, kMse}) {
    const Quantized q = quantize(row, Nvfp4::global_scale(0.0f), search);
    for (uint8_t scale : q.scales) EXPECT_EQ(scale, 0x38);
    for (uint8_t byte : q.packed) EXPECT_EQ(byte, 0x00);
    EXPECT_EQ(q.stats.zero_blocks, 4u);
    EXPECT_EQ(q.stats.error_sq, 0.0);
    EXPECT_EQ(q.stats.candidate_wins[search.candidates - 1], 4u); // ties: largest alpha
  }
  EXPECT_EQ(e4m3_to_float(kNvfp4ZeroBlockScaleCode), 1.0f);
}

TEST(Nvfp4Ref, CandidateAlphasAreFloatOfTheDoubleFormula) {
  const auto alphas = kMse.alphas();
  for (int k = 0; k < 8; ++k) EXPECT_EQ(alphas[k], float(0.75 + k * (0.25 / 7))) << k;
  EXPECT_EQ(alphas[7], 1.0f);
  EXPECT_EQ(kRtn.alphas()[0], 1.0f);
}

TEST(Nvfp4Ref, MseNeverWorseThanRtnOnAnyBlock) {
  std::mt19937 rng(1234);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-40, 40);
  const float midpoints[] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};
  int blocks_where_mse_helps = 0;
  for (int trial = 0; trial < 20000; ++trial) {
    std::vector<float> block(16);
    const int kind = trial % 5;
    for (float& v : block) {
      if (kind == 0) v = normal(rng);
      else if (kind == 1) v = normal(rng) * std::ldexp(1.0f, exponent(rng)); // huge dynamic range
      else if (kind == 2) v = uniform(rng) * 1e-4f;                          // scale underflow
      else if (kind == 3) v = midpoints[rng() % 7] * (rng() & 1 ? 1.0f : -1.0f) / 6.0f; // ties
      else v = uniform(rng) * (rng() % 16 == 0 ? 50.0f : 1.0f);             // outliers
    }
    const float global = kind == 1 ? 1e-3f : 1.0f / 2688.0f;
    const Quantized rtn = quantize(block, global, kRtn);
    const Quantized mse = quantize(block, global, kMse);
    const double rtn_error = block_error_from_bytes(block.data(), rtn.packed.data(), rtn.scales[0], global);
    const double mse_error = block_error_from_bytes(block.data(), mse.packed.data(), mse.scales[0], global);
    ASSERT_LE(mse_error, rtn_error) << "trial " << trial;
    // The report's fp32 block sums (within 2^-21 each) may not order two near-equal errors.
    ASSERT_LE(mse.stats.error_sq, rtn.stats.error_sq * (1.0 + 0x1p-20)) << "trial " << trial;
    blocks_where_mse_helps += mse_error < rtn_error;
  }
  EXPECT_GT(blocks_where_mse_helps, 1000); // the search does something
}

// The choice recomputed independently: every candidate's code and error, smallest error
// wins, an exact tie goes to the larger alpha.
TEST(Nvfp4Ref, MseChoiceIsSmallestErrorTiesToLargerAlpha) {
  const auto alphas = kMse.alphas();
  int ties_seen = 0;
  for (int m = 1; m < 64; ++m) {
    for (int e = -12; e <= 4; ++e) {
      std::vector<float> block(16, 0.0f);
      block[0] = std::ldexp(float(m), e);
      block[3] = -std::ldexp(float(m % 7), e);
      block[9] = std::ldexp(float(m % 11), e - 1);
      const float global = 1.0f;
      double best_error = INFINITY;
      int best_k = -1;
      uint8_t best_code = 0;
      for (int k = 0; k < 8; ++k) {
        const float unclamped = (alphas[k] * block[0]) / (6.0f * global);
        const uint8_t code = e4m3_from_float(std::clamp(unclamped, 0x1p-9f, 448.0f));
        uint8_t nibbles[16], packed[8];
        const float divisor = e4m3_to_float(code) * global;
        for (int i = 0; i < 16; ++i) nibbles[i] = e2m1_from_float(block[i] / divisor);
        for (int i = 0; i < 8; ++i) packed[i] = uint8_t(nibbles[2 * i + 1] << 4 | nibbles[2 * i]);
        const double error = block_error_from_bytes(block.data(), packed, code, global);
        ties_seen += error == best_error;
        if (error <= best_error) best_error = error, best_k = k, best_code = code;
      }
      const Quantized q = quantize(block, global, kMse);
      ASSERT_EQ(q.scales[0], best_code) << block[0];
      ASSERT_EQ(q.stats.candidate_wins[best_k], 1u) << block[0];
    }
  }
  EXPECT_GT(ties_seen, 100);
}

TEST(Nvfp4Ref, MseTieWhenEveryCandidateClampsGoesToAlphaOne) {
  // Every alpha clamps to 448 (global tiny): one code, so alpha_7 = 1 must win.
  std::vector<float> block(16, 1.0f);
  const Quantized high = quantize(block, 1e-6f, kMse);
  EXPECT_EQ(high.scales[0], 0x7E);
  EXPECT_EQ(high.stats.candidate_wins[7], 1u);
  // Every alpha clamps to 2^-9.
  std::fill(block.begin(), block.end(), 1e-6f);
  const Quantized low = quantize(block, 1.0f, kMse);
  EXPECT_EQ(low.scales[0], 0x01);
  EXPECT_EQ(low.stats.candidate_wins[7], 1u);
  EXPECT_EQ(low.stats.scale_underflows, 1u);
}

TEST(Nvfp4Ref, SumBlockFp64FoldsInHalves) {
  // Terms chosen so that left-to-right and the fold give different doubles.
  double terms[16] = {1e16, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, -1e16, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0};
  // Fold: t0 + t8 = 0; every other pair 2 -> total 14.
  EXPECT_EQ(sum_block_fp64(terms), 14.0);
}

TEST(Nvfp4Ref, SumBlockFp32FoldsInHalves) {
  // As above in fp32: left to right, 1e8 + 1 == 1e8 (ulp 8) would lose the ones.
  float terms[16] = {1e8f, 1, 1, 1, 1, 1, 1, 1, -1e8f, 1, 1, 1, 1, 1, 1, 1};
  EXPECT_EQ(sum_block_fp32(terms), 14.0f);
}

namespace {

// The exact sums of one block in long double (64-bit mantissa: exact squares of fp32 differences).
BlockSums long_double_sums(const float* x, const float* deq) {
  long double error = 0, reference = 0;
  for (int i = 0; i < 16; ++i) {
    const long double diff = (long double)deq[i] - (long double)x[i];
    error += diff * diff;
    reference += (long double)x[i] * x[i];
  }
  return {double(error), double(reference)};
}

} // namespace

// The report rule's promise: each sum within 2^-21 relative of the exact one, plus the
// terms below fp32's subnormal range at the block's scale (16 * 2^-149 * (1/p)^2).
TEST(Nvfp4Ref, ReportSumsAreWithinTheFp32BoundOfExactSums) {
  std::mt19937 rng(29);
  std::uniform_real_distribution<float> magnitude(-148.0f, 126.0f);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  int huge_blocks = 0;
  for (int trial = 0; trial < 20000; ++trial) {
    const float level = std::exp2(magnitude(rng)), spread = float(trial % 5) * 4.0f;
    float x[16];
    for (float& v : x) v = std::clamp(normal(rng) * level * std::exp2(-spread * std::fabs(normal(rng))), -3e38f, 3e38f);
    const float global = Nvfp4::global_scale(std::max(*std::max_element(x, x + 16), -*std::min_element(x, x + 16)));
    uint8_t nibbles[16];
    BlockStats unused;
    const uint8_t code = choose_and_quantize_block_nvfp4(x, global, kRtn, nibbles, unused);
    float deq[16];
    for (int i = 0; i < 16; ++i) deq[i] = dequantize_nvfp4(nibbles[i], code, global);
    const BlockSums got = block_report_sums_nvfp4(x, deq), exact = long_double_sums(x, deq);
    float amax = 0.0f;
    for (float v : x) amax = std::max(amax, std::fabs(v));
    const double up = report_scale_of_amax(amax).up;
    const double floor = 16.0 * 0x1p-149 * up * up;
    huge_blocks += exact.reference_sq > 0x1p128; // fp32 squares of these would overflow
    ASSERT_TRUE(std::isfinite(got.error_sq) && std::isfinite(got.reference_sq)) << "trial " << trial;
    EXPECT_LE(std::fabs(got.error_sq - exact.error_sq), 0x1p-21 * exact.error_sq + floor) << "trial " << trial;
    EXPECT_LE(std::fabs(got.reference_sq - exact.reference_sq), 0x1p-21 * exact.reference_sq + floor)
        << "trial " << trial;
  }
  EXPECT_GT(huge_blocks, 100);
}

TEST(Nvfp4Ref, ReportScaleIsThePowerOfTwoOfTheBlockAmax) {
  EXPECT_EQ(report_scale_of_amax(1.0f).down, 1.0f);
  EXPECT_EQ(report_scale_of_amax(1.5f).up, 1.0f);
  EXPECT_EQ(report_scale_of_amax(3.0f).down, 0.5f);
  EXPECT_EQ(report_scale_of_amax(0x1.8p-100f).up, 0x1p-100f);
  EXPECT_EQ(report_scale_of_amax(0.0f).down, 0x1p126f); // zero and subnormal amax: E = 1
  EXPECT_EQ(report_scale_of_amax(0x1p-140f).up, 0x1p-126f);
  EXPECT_EQ(report_scale_of_amax(3e38f).down, 0x1p-126f); // E = 254 clamps to 253
}
