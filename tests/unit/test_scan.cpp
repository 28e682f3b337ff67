// kernels/scan.h: every SIMD target gives the scalar reference's answer, for a NaN code
// (either sign) at every position of buffers around the vector and stride sizes.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "kernels/scan.h"
#include "simd_targets.h"

namespace {

TEST(ScanSimd, AnyE4m3NaNEqualsRefAtEveryPosition) {
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> finite(0, 0x7E);
  shardq::test::for_each_simd_target([&](const std::string& target) {
    for (size_t n : {0u, 1u, 63u, 64u, 65u, 1023u, 1024u, 1025u, 4100u}) {
      std::vector<uint8_t> codes(n);
      for (uint8_t& code : codes) code = uint8_t(finite(rng) | (rng() & 0x80)); // every finite code, both signs
      ASSERT_FALSE(shardq::any_e4m3_nan_ref(codes.data(), n));
      ASSERT_FALSE(shardq::any_e4m3_nan_simd(codes.data(), n)) << n << target;
      for (size_t at = 0; at < n; at += 1 + at / 7) {
        for (uint8_t nan : {uint8_t{0x7F}, uint8_t{0xFF}}) {
          const uint8_t kept = codes[at];
          codes[at] = nan;
          ASSERT_TRUE(shardq::any_e4m3_nan_ref(codes.data(), n));
          ASSERT_TRUE(shardq::any_e4m3_nan_simd(codes.data(), n)) << n << " at " << at << target;
          codes[at] = kept;
        }
      }
    }
  });
}

} // namespace
