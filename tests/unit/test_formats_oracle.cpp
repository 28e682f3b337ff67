// Our small-float conversions against an independent oracle: the CUDA toolkit's host-side
// converters (cuda_fp8.hpp / cuda_fp4.hpp compiled by the host compiler, no GPU needed).
// Where docs/formats.md deliberately differs from the oracle, exactly those inputs are excluded
// from the sweep and our behaviour is pinned with explicit asserts below.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "kernels/formats.h"

#if SHARDQ_CUDA_ORACLE
// The toolkit headers are not warning-clean under our flags; they are not our code.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter"
#include <cuda_fp4.h>
#include <cuda_fp8.h>
#pragma GCC diagnostic pop
#endif

using namespace shardq;

namespace {

#if defined(__SANITIZE_ADDRESS__) || SHARDQ_TEST_EMULATED
constexpr bool kFullSweep = false;
constexpr uint64_t kPatternStride = 4099; // ~10^6 patterns: ASan runs ~20x slower, qemu ~50x
#else
constexpr bool kFullSweep = true;
constexpr uint64_t kPatternStride = 41;   // 2^32 / 41 ~ 1.05e8 patterns
#endif

float from_bits(uint32_t bits) { return std::bit_cast<float>(bits); }
uint32_t to_bits(float x) { return std::bit_cast<uint32_t>(x); }
bool is_nan_bits(uint32_t bits) { return (bits & 0x7FFFFFFFu) > 0x7F800000u; }

// Every value within `ulps` fp32 ulps of each anchor, both signs.
std::vector<float> around(const std::vector<float>& anchors, int ulps) {
  std::vector<float> out;
  for (float anchor : anchors) {
    for (float signed_anchor : {anchor, -anchor}) {
      float below = signed_anchor, above = signed_anchor;
      out.push_back(signed_anchor);
      for (int i = 0; i < ulps; ++i) {
        below = std::nextafter(below, -std::numeric_limits<float>::infinity());
        above = std::nextafter(above, std::numeric_limits<float>::infinity());
        out.push_back(below);
        out.push_back(above);
      }
    }
  }
  return out;
}

// Every finite E4M3 value and the midpoint above each (464 = the midpoint past 448).
std::vector<float> e4m3_anchors() {
  std::vector<float> anchors;
  for (int code = 0; code <= E4M3::max_code; ++code) {
    const float value = e4m3_to_float(uint8_t(code));
    const float next = code == E4M3::max_code ? 512.0f : e4m3_to_float(uint8_t(code + 1));
    anchors.push_back(value);
    anchors.push_back((value + next) / 2); // exact: both are short fp32 values
  }
  return anchors;
}

std::vector<float> e2m1_anchors() {
  std::vector<float> anchors(E2M1::values.begin(), E2M1::values.begin() + 8);
  for (float midpoint : {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, 7.0f}) anchors.push_back(midpoint);
  return anchors;
}

std::vector<float> e8m0_anchors() {
  std::vector<float> anchors;
  for (int e = -149; e <= 127; ++e) anchors.push_back(std::ldexp(1.0f, e));
  anchors.push_back(0x1.8p-127f);
  anchors.push_back(std::numeric_limits<float>::max());
  return anchors;
}

} // namespace

#if SHARDQ_CUDA_ORACLE

namespace {

uint8_t oracle_e4m3(float x) { return __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3); }
uint8_t oracle_e2m1(float x) { return __nv_cvt_float_to_fp4(x, __NV_E2M1, cudaRoundNearest); }
uint8_t oracle_e8m0(float x, E8M0Rounding mode) {
  return __nv_cvt_float_to_e8m0(x, __NV_SATFINITE, mode == E8M0Rounding::toward_zero ? cudaRoundZero : cudaRoundPosInf);
}

// Documented differences (docs/formats.md "Checked against an independent oracle"): E4M3 NaN keeps its sign bit (oracle: 0x7F always);
// E2M1 sign = (x < 0), so -0.0 gives 0x0 (oracle: 0x8).
bool e4m3_documented_difference(uint32_t bits) { return is_nan_bits(bits) && (bits >> 31); }
bool e2m1_documented_difference(uint32_t bits) { return bits == 0x80000000u; }

struct Mismatches {
  uint64_t checked = 0, e4m3 = 0, e2m1 = 0, e8m0_rz = 0, e8m0_rp = 0;
  void check(uint32_t bits) {
    const float x = from_bits(bits);
    ++checked;
    if (!e4m3_documented_difference(bits) && e4m3_from_float(x) != oracle_e4m3(x) && e4m3++ < 5)
      ADD_FAILURE() << "e4m3 of bits 0x" << std::hex << bits << ": ours 0x" << int(e4m3_from_float(x))
                    << " oracle 0x" << int(oracle_e4m3(x));
    if (!e2m1_documented_difference(bits) && e2m1_from_float(x) != oracle_e2m1(x) && e2m1++ < 5)
      ADD_FAILURE() << "e2m1 of bits 0x" << std::hex << bits << ": ours 0x" << int(e2m1_from_float(x))
                    << " oracle 0x" << int(oracle_e2m1(x));
    for (auto mode : {E8M0Rounding::toward_zero, E8M0Rounding::toward_pos_inf}) {
      uint64_t& count = mode == E8M0Rounding::toward_zero ? e8m0_rz : e8m0_rp;
      if (e8m0_from_float(x, mode) != oracle_e8m0(x, mode) && count++ < 5)
        ADD_FAILURE() << "e8m0 (mode " << int(mode) << ") of bits 0x" << std::hex << bits << ": ours 0x"
                      << int(e8m0_from_float(x, mode)) << " oracle 0x" << int(oracle_e8m0(x, mode));
    }
  }
  void expect_none() const {
    EXPECT_EQ(e4m3, 0u);
    EXPECT_EQ(e2m1, 0u);
    EXPECT_EQ(e8m0_rz, 0u);
    EXPECT_EQ(e8m0_rp, 0u);
  }
};

} // namespace

TEST(FormatsOracle, StridedSweepOfAllFp32Patterns) {
  Mismatches mismatches;
  for (uint64_t bits = 0; bits <= 0xFFFFFFFFull; bits += kPatternStride) mismatches.check(uint32_t(bits));
  if (kFullSweep) {
    EXPECT_GE(mismatches.checked, 100'000'000u);
  }
  mismatches.expect_none();
}

TEST(FormatsOracle, EveryFp32Subnormal) {
  Mismatches mismatches;
  const uint32_t step = kFullSweep ? 1 : 97;
  for (uint32_t m = 0; m < 0x800000u; m += step) {
    mismatches.check(m);
    mismatches.check(m | 0x80000000u);
  }
  mismatches.expect_none();
}

TEST(FormatsOracle, WithinEightUlpsOfEveryCodeAndMidpoint) {
  Mismatches mismatches;
  for (const auto& anchors : {e4m3_anchors(), e2m1_anchors(), e8m0_anchors()})
    for (float x : around(anchors, 8)) mismatches.check(to_bits(x));
  for (float x : {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity()})
    mismatches.check(to_bits(x));
  EXPECT_GT(mismatches.checked, 10'000u);
  mismatches.expect_none();
}

TEST(FormatsOracle, DocumentedDifferencesAreReallyDifferent) {
  // If the oracle ever changes to agree with us, the exclusions above must go.
  const float negative_nan = from_bits(0xFFC00000u);
  EXPECT_EQ(oracle_e4m3(negative_nan), 0x7F);
  EXPECT_EQ(oracle_e2m1(-0.0f), 0x8);
}

#else

TEST(FormatsOracle, StridedSweepOfAllFp32Patterns) { GTEST_SKIP() << "CUDA toolkit headers not found"; }

#endif

// ---------------------------------------------------------------- our rules, pinned
TEST(FormatsPinned, E4M3NanKeepsSignAndSaturation) {
  EXPECT_EQ(e4m3_from_float(from_bits(0x7FC00000u)), 0x7F);
  EXPECT_EQ(e4m3_from_float(from_bits(0xFFC00000u)), 0xFF);
  EXPECT_EQ(e4m3_from_float(from_bits(0x7F800001u)), 0x7F); // signalling NaN
  EXPECT_EQ(e4m3_from_float(464.0f), 0x7E);                // the plain cast would give NaN
  EXPECT_EQ(e4m3_from_float(std::numeric_limits<float>::infinity()), 0x7E);
  EXPECT_EQ(e4m3_from_float(-std::numeric_limits<float>::infinity()), 0xFE);
  EXPECT_EQ(e4m3_from_float(0x1p-10f), 0x00);  // half the smallest subnormal: tie to even 0
  EXPECT_EQ(e4m3_from_float(0x1.8p-9f), 0x02); // 1.5 * 2^-9: tie to even 2
  EXPECT_EQ(e4m3_from_float(-0.0f), 0x80);
}

TEST(FormatsPinned, E2M1SignIsXLessThanZero) {
  EXPECT_EQ(e2m1_from_float(-0.0f), 0x0);
  EXPECT_EQ(e2m1_from_float(-0.1f), 0x8); // a small negative that rounds to zero keeps its sign
  EXPECT_EQ(e2m1_from_float(std::numeric_limits<float>::quiet_NaN()), 0x7);
  EXPECT_EQ(e2m1_from_float(-std::numeric_limits<float>::infinity()), 0xF);
}

TEST(FormatsPinned, E2M1NearestEvenHandWorked) {
  // Midpoints go to the code whose mantissa bit is 0: 1.0 (0x2), 2.0 (0x4), 4.0 (0x6).
  const std::pair<float, uint8_t> cases[] = {{0.25f, 0x0}, {0.75f, 0x2}, {1.25f, 0x2}, {1.75f, 0x4}, {2.5f, 0x4},
                                             {3.5f, 0x6},  {5.0f, 0x6},  {5.01f, 0x7}, {100.f, 0x7}, {-0.75f, 0xA},
                                             {-3.5f, 0xE}, {-5.0f, 0xE}, {-7.0f, 0xF}};
  for (auto [x, code] : cases) EXPECT_EQ(e2m1_from_float(x), code) << x;
}

TEST(FormatsPinned, E2M1TiesTowardZeroHandWorked) {
  // MXFP4 (seed 001): an exact midpoint goes to the smaller magnitude.
  const std::pair<float, uint8_t> cases[] = {
      {0.25f, 0x0}, {0.75f, 0x1}, {1.25f, 0x2}, {1.75f, 0x3}, {2.5f, 0x4},  {3.5f, 0x5},  {5.0f, 0x6},
      {7.0f, 0x7},  {0.26f, 0x1}, {0.76f, 0x2}, {5.01f, 0x7}, {-0.25f, 0x8}, {-0.75f, 0x9}, {-1.75f, 0xB},
      {-2.5f, 0xC}, {-3.5f, 0xD}, {-5.0f, 0xE}, {-7.0f, 0xF}};
  for (auto [x, code] : cases) EXPECT_EQ(e2m1_from_float(x, E2M1Rounding::nearest_toward_zero), code) << x;
}

TEST(FormatsPinned, E8M0HandWorked) {
  EXPECT_EQ(e8m0_from_float(1.0f, E8M0Rounding::toward_zero), 127);
  EXPECT_EQ(e8m0_from_float(1.0f, E8M0Rounding::toward_pos_inf), 127);
  EXPECT_EQ(e8m0_from_float(1.5f, E8M0Rounding::toward_zero), 127);
  EXPECT_EQ(e8m0_from_float(1.5f, E8M0Rounding::toward_pos_inf), 128);
  EXPECT_EQ(e8m0_from_float(-1.5f, E8M0Rounding::toward_pos_inf), 128); // magnitude only
  EXPECT_EQ(e8m0_from_float(0.0f, E8M0Rounding::toward_pos_inf), 0);
  EXPECT_EQ(e8m0_from_float(0x1p127f * 1.5f, E8M0Rounding::toward_pos_inf), 254); // saturates
  EXPECT_EQ(e8m0_from_float(std::numeric_limits<float>::quiet_NaN(), E8M0Rounding::toward_zero), 255);
}

TEST(FormatsPinned, Bf16RoundTripAndNearestEven) {
  for (uint32_t hi = 0; hi < 0x10000u; ++hi) {
    if (is_nan_bits(hi << 16)) continue;
    EXPECT_EQ(bf16_from_float(bf16_to_float(uint16_t(hi))), hi);
  }
  EXPECT_EQ(bf16_from_float(from_bits(0x3F808000u)), 0x3F80); // tie, even stays
  EXPECT_EQ(bf16_from_float(from_bits(0x3F818000u)), 0x3F82); // tie, odd rounds up
  EXPECT_EQ(bf16_from_float(from_bits(0x3F808001u)), 0x3F81); // above the tie
  EXPECT_EQ(bf16_from_float(from_bits(0x3F807FFFu)), 0x3F80); // below the tie
  EXPECT_EQ(bf16_from_float(from_bits(0x7F7FFFFFu)), 0x7F80); // max float rounds to inf
  EXPECT_EQ(bf16_from_float(from_bits(0xBF818000u)), 0xBF82); // negative tie
  const uint16_t nan = bf16_from_float(from_bits(0x7F800001u));
  EXPECT_TRUE(std::isnan(bf16_to_float(nan))); // a NaN whose payload is all low bits stays NaN
}
