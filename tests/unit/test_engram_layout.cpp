// The Engram prime layout against the real DeepSeek-V4.1-Flash config (docs/formats.md "Prime layout").
#include <gtest/gtest.h>

#include <set>
#include <vector>

#include "stages/engram_layout.h"
#include "stages/stage_error.h"

namespace shardq {
namespace {

EngramConfig real_config() {
  EngramConfig config;
  config.layer_ids = {1, 14};
  config.num_embeddings = {384006168, 384016682};
  config.max_ngram_size = 4;
  config.vocab_size = 16000000;
  config.n_heads = 8;
  config.head_dim = 256;
  return config;
}

bool is_prime_by_trial_division(uint64_t n) {
  if (n < 2) return false;
  for (uint64_t d = 2; d * d <= n; ++d) {
    if (n % d == 0) return false;
  }
  return true;
}

// The spec's pseudo-code, written out again with trial division: the independent oracle.
std::vector<std::vector<uint64_t>> primes_by_spec(const EngramConfig& config) {
  std::set<uint64_t> seen;
  std::vector<std::vector<uint64_t>> layers;
  for (size_t l = 0; l < config.layer_ids.size(); ++l) {
    std::vector<uint64_t> primes;
    for (int n = 2; n <= config.max_ngram_size; ++n) {
      uint64_t cur = config.vocab_size - 1;
      for (int h = 0; h < config.n_heads; ++h) {
        cur += 1;
        while (!is_prime_by_trial_division(cur) || seen.count(cur)) cur += 1;
        seen.insert(cur);
        primes.push_back(cur);
      }
    }
    layers.push_back(primes);
  }
  return layers;
}

TEST(EngramLayout, PrimalityTestAgreesOnKnownNumbers) {
  EXPECT_FALSE(is_prime_u64(0));
  EXPECT_FALSE(is_prime_u64(1));
  EXPECT_TRUE(is_prime_u64(2));
  EXPECT_TRUE(is_prime_u64(37));
  EXPECT_FALSE(is_prime_u64(561));                     // Carmichael number
  EXPECT_FALSE(is_prime_u64(3215031751ull));           // strong pseudoprime to bases 2, 3, 5, 7
  EXPECT_TRUE(is_prime_u64(2305843009213693951ull));   // 2^61 - 1
  EXPECT_TRUE(is_prime_u64(18446744073709551557ull));  // largest prime below 2^64
  EXPECT_FALSE(is_prime_u64(18446744073709551555ull));
  for (uint64_t n = 15999000; n < 16001000; ++n) {
    ASSERT_EQ(is_prime_u64(n), is_prime_by_trial_division(n)) << n;
  }
}

TEST(EngramLayout, RealConfigTotalsAndPrimes) {
  const EngramLayout layout(real_config());
  EXPECT_EQ(layout.columns(), 24);
  EXPECT_EQ(layout.table_rows(1), 384006168u);
  EXPECT_EQ(layout.table_rows(14), 384016682u);
  ASSERT_EQ(layout.primes(1).size(), 24u);
  ASSERT_EQ(layout.primes(14).size(), 24u);
  EXPECT_EQ(layout.primes(1).front(), 16000057u);
  EXPECT_EQ(layout.primes(1).back(), 16000463u);
  EXPECT_EQ(layout.primes(14).front(), 16000477u);
  EXPECT_EQ(layout.primes(14).back(), 16000889u);
  const auto expected = primes_by_spec(real_config());
  EXPECT_EQ(std::vector<uint64_t>(layout.primes(1).begin(), layout.primes(1).end()), expected[0]);
  EXPECT_EQ(std::vector<uint64_t>(layout.primes(14).begin(), layout.primes(14).end()), expected[1]);
  EXPECT_NO_THROW(layout.check(1, 384006168));
  EXPECT_NO_THROW(layout.check(14, 384016682));
}

TEST(EngramLayout, HashColumnAtEveryBoundary) {
  const EngramLayout layout(real_config());
  const auto expected = primes_by_spec(real_config());
  for (size_t l = 0; l < 2; ++l) {
    const int layer = l == 0 ? 1 : 14;
    uint64_t offset = 0;
    for (int c = 0; c < 24; ++c) {
      const uint64_t prime = expected[l][size_t(c)];
      EXPECT_EQ(layout.offsets(layer)[size_t(c)], offset) << "layer " << layer << " column " << c;
      if (c > 0) {
        EXPECT_EQ(layout.hash_column(layer, offset - 1), c - 1) << "layer " << layer;
      }
      EXPECT_EQ(layout.hash_column(layer, offset), c) << "layer " << layer;
      EXPECT_EQ(layout.hash_column(layer, offset + prime - 1), c) << "layer " << layer;
      offset += prime;
    }
    EXPECT_THROW(layout.hash_column(layer, offset), StageError);
  }
}

TEST(EngramLayout, RefusesMismatchedRowCounts) {
  const EngramLayout layout(real_config());
  EXPECT_THROW(layout.check(1, 384006167), StageError);
  EXPECT_THROW(layout.check(14, 384006168), StageError);
  try {
    layout.check(14, 5);
    FAIL() << "a 5-row table was accepted";
  } catch (const StageError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("layers.14."), std::string::npos) << message;
    EXPECT_NE(message.find("384016682"), std::string::npos) << message;
    EXPECT_NE(message.find(" 5 "), std::string::npos) << message;
  }
  EngramConfig wrong = real_config();
  wrong.num_embeddings = {384006168, 384016683};
  const EngramLayout wrong_layout(wrong);
  EXPECT_NO_THROW(wrong_layout.check(1, 384006168));
  EXPECT_THROW(wrong_layout.check(14, 384016682), StageError);
  EXPECT_THROW(layout.table_rows(2), StageError);
}

TEST(EngramLayout, RefusesUnusableConfigs) {
  EngramConfig config = real_config();
  config.num_embeddings = {384006168};
  EXPECT_THROW(EngramLayout{config}, StageError);
  config = real_config();
  config.max_ngram_size = 1;
  EXPECT_THROW(EngramLayout{config}, StageError);
  config = real_config();
  config.layer_ids = {1, 1};
  EXPECT_THROW(EngramLayout{config}, StageError);
}

} // namespace
} // namespace shardq
