// Helpers shared by the NVFP4 kernel tests: every fast path (SIMD, CUDA, GPTQ) is held to
// its scalar truth with the same checks, on the same kind of random rows.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/nvfp4.h"

namespace shardq::test {

inline bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }
inline bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// Block counters and candidate wins equal.
inline void expect_same_counters(const BlockStats& got, const BlockStats& want, const std::string& where) {
  EXPECT_EQ(got.blocks, want.blocks) << where;
  EXPECT_EQ(got.zero_blocks, want.zero_blocks) << where;
  EXPECT_EQ(got.scale_underflows, want.scale_underflows) << where;
  EXPECT_EQ(got.candidate_wins, want.candidate_wins) << where;
}

// Counters equal and both error sums the same bits.
inline void expect_same_stats(const BlockStats& got, const BlockStats& want, const std::string& where) {
  expect_same_counters(got, want, where);
  EXPECT_TRUE(same_bits(got.error_sq, want.error_sq)) << where << ": " << got.error_sq << " vs " << want.error_sq;
  EXPECT_TRUE(same_bits(got.reference_sq, want.reference_sq)) << where;
}

// Normal values scaled by 2^u, u uniform in [-spread_exponent, spread_exponent].
inline std::vector<float> random_values(std::mt19937& rng, size_t count, float spread_exponent) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> exponent(-spread_exponent, spread_exponent);
  std::vector<float> out(count);
  for (float& v : out) v = normal(rng) * std::exp2(exponent(rng));
  return out;
}

inline float amax_of(const std::vector<float>& values) {
  float amax = 0.0f;
  for (float v : values) amax = std::max(amax, std::fabs(v));
  return amax;
}

} // namespace shardq::test
