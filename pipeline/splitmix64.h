// splitmix64 (Steele, Lea, Flood 2014): the fixture's counter-based random streams and
// `shardq study`'s row sampling, the same bits on every compiler.
#pragma once

#include <cstdint>

namespace shardq {

// splitmix64's finalizer: a bijective 64-bit mix.
constexpr uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

inline constexpr uint64_t kGoldenGamma = 0x9E3779B97F4A7C15ull; // splitmix64's step

// One splitmix64 output for counter x: its step, then the finalizer.
constexpr uint64_t splitmix64(uint64_t x) { return mix64(x + kGoldenGamma); }

} // namespace shardq
