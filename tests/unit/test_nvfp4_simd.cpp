// quantize_row_nvfp4_simd == quantize_row_nvfp4_ref, bit for bit (codes, scales, every
// stat), on every SIMD target this CPU supports, for RTN and the MSE search.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "hwy/targets.h"
#include "kernels/nvfp4.h"

using namespace shardq;

namespace {

const ScaleSearch kSearches[] = {ScaleSearch{1}, ScaleSearch{8, 0.75}};

bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

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
    EXPECT_EQ(simd.blocks, ref.blocks) << where;
    EXPECT_EQ(simd.zero_blocks, ref.zero_blocks) << where;
    EXPECT_EQ(simd.scale_underflows, ref.scale_underflows) << where;
    EXPECT_EQ(simd.candidate_wins, ref.candidate_wins) << where;
    EXPECT_TRUE(same_bits(simd.error_sq, ref.error_sq)) << where << ": " << simd.error_sq << " vs " << ref.error_sq;
    EXPECT_TRUE(same_bits(simd.reference_sq, ref.reference_sq)) << where;
  }
}

std::vector<float> random_row(std::mt19937& rng, int cols, float spread_exponent) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> exponent(-spread_exponent, spread_exponent);
  std::vector<float> row(cols);
  for (float& v : row) v = normal(rng) * std::exp2(exponent(rng));
  return row;
}

float amax_of(const std::vector<float>& row) {
  float amax = 0.0f;
  for (float v : row) amax = std::max(amax, std::fabs(v));
  return amax;
}

// Blocks whose quotients x / (s * global) land exactly on every E2M1 midpoint and code,
// both signs, for several exact E4M3 scales s (amax = 6 * s fixes the scale).
std::vector<float> tie_row() {
  const float quotients[] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f};
  std::vector<float> row;
  for (float scale : {0x1p-9f, 0.1875f, 1.0f, 1.125f, 448.0f}) {
    for (int sign = 0; sign < 2; ++sign) {
      row.push_back(6.0f * scale); // sets amax
      for (float q : quotients) row.push_back((sign ? -q : q) * scale);
      while (row.size() % 16) row.push_back(sign ? -0.0f : 0.0f);
    }
  }
  return row;
}

// Runs `check(target name)` once per SIMD target the CPU supports and the build generated.
template <class Check>
void for_each_target(Check check) {
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    check(std::string(" on ") + hwy::TargetName(target));
  }
  hwy::SetSupportedTargetsForTest(0);
}

} // namespace

TEST(Nvfp4Simd, RandomRowsEqualRef) {
  for_each_target([](const std::string& on) {
    std::mt19937 rng(7);
    for (int cols : {16, 32, 256, 1024, 7168}) {
      const auto row = random_row(rng, cols, 3.0f);
      expect_simd_equals_ref(row, Nvfp4::global_scale(amax_of(row)), "random" + on);
    }
  });
}

TEST(Nvfp4Simd, ZerosAndNegativeZerosEqualRef) {
  for_each_target([](const std::string& on) {
    std::vector<float> row(256, 0.0f);
    expect_simd_equals_ref(row, 1.0f, "zeros" + on);
    for (size_t i = 0; i < row.size(); i += 3) row[i] = -0.0f;
    expect_simd_equals_ref(row, 1.0f, "negative zeros" + on);
    row[40] = 1.0f; // one block with -0.0 beside a real value
    expect_simd_equals_ref(row, 1.0f / 2688.0f, "negative zeros beside a value" + on);
  });
}

TEST(Nvfp4Simd, TinyBlocksWithScaleUnderflowEqualRef) {
  for_each_target([](const std::string& on) {
    std::mt19937 rng(11);
    auto row = random_row(rng, 512, 2.0f);
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
  for_each_target([](const std::string& on) {
    std::mt19937 rng(13);
    const auto row = random_row(rng, 2048, 60.0f);
    expect_simd_equals_ref(row, Nvfp4::global_scale(amax_of(row)), "huge range" + on);
    expect_simd_equals_ref(row, 1e-30f, "scales clamped at 448" + on);
  });
}

TEST(Nvfp4Simd, ExactTiesAtEveryE2M1MidpointEqualRef) {
  for_each_target([](const std::string& on) {
    const auto row = tie_row();
    expect_simd_equals_ref(row, 1.0f, "ties" + on);
    expect_simd_equals_ref(row, 0.5f, "ties, global 0.5" + on);
  });
}
