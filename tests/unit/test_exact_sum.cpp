// ExactSum (stages/chunk_stats.h): each term lands on the integer the compiler's own
// double -> unsigned __int128 conversion gives, across the whole range; any grouping of
// the terms gives the same total; a term beyond the range saturates the sum to +inf.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "stages/chunk_stats.h"

using shardq::ExactSum;
using shardq::uint128_t;

namespace {

uint128_t reference_units(double term) {
  return static_cast<uint128_t>(std::nearbyint(term * ExactSum::kUnit));
}

ExactSum one(double term) {
  ExactSum sum;
  sum.add(term);
  return sum;
}

TEST(ExactSum, EachTermIsTheIntegerOfTheCompilersConversion) {
  std::vector<double> terms = {0.0, 0x1p-64, 0x1p-65, 1.5 * 0x1p-64, 0.5, 1.0, 1.0 - 0x1p-53, 1.0 + 0x1p-52,
                               std::nextafter(1.0, 0.0), 3.0, 0x1p62, std::nextafter(0x1p63, 0.0)};
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> exponent(-80.0, 62.9);
  for (int i = 0; i < 200000; ++i) terms.push_back(std::exp2(exponent(rng)));
  for (double term : terms) {
    const uint128_t expected = reference_units(term);
    const ExactSum sum = one(term);
    ASSERT_EQ(sum.high(), uint64_t(expected >> 64)) << term;
    ASSERT_EQ(sum.low(), uint64_t(expected)) << term;
  }
}

TEST(ExactSum, AnyGroupingGivesTheSameTotal) {
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> exponent(-70.0, 40.0);
  std::vector<double> terms(4096);
  for (double& term : terms) term = std::exp2(exponent(rng));
  ExactSum in_order;
  for (double term : terms) in_order.add(term);
  std::shuffle(terms.begin(), terms.end(), rng);
  ExactSum first_half, second_half;
  for (size_t i = 0; i < terms.size(); ++i) (i < terms.size() / 2 ? first_half : second_half).add(terms[i]);
  first_half.merge(second_half);
  EXPECT_EQ(first_half, in_order);
}

TEST(ExactSum, TermsBeyondTheRangeSaturateToInfinity) {
  for (double term : {0x1p63, 0x1p100, std::numeric_limits<double>::max(), HUGE_VAL,
                      std::numeric_limits<double>::quiet_NaN()}) {
    ExactSum sum;
    sum.add(1.0);
    sum.add(term);
    EXPECT_EQ(sum.to_double(), HUGE_VAL) << term;
    sum.add(2.0);
    EXPECT_EQ(sum.to_double(), HUGE_VAL) << term;
    ExactSum other;
    other.add(3.0);
    other.merge(sum); // saturated in either order
    EXPECT_EQ(other, sum) << term;
  }
  ExactSum largest;
  largest.add(std::nextafter(0x1p63, 0.0));
  EXPECT_LT(largest.to_double(), 0x1p63);
  ExactSum wrapped = largest; // 2^63 + 2^63 + ... would wrap 128 bits: it saturates instead
  for (int i = 0; i < 70; ++i) wrapped.merge(wrapped);
  EXPECT_EQ(wrapped.to_double(), HUGE_VAL);
}

} // namespace
