// What one chunk of a table contributes to the report; stored per chunk in the checkpoint
// and merged at the end. Every field is an integer or an ExactSum, so the totals are the
// same whatever the rank count, the schedule or rows_per_chunk.
#pragma once

#include <array>
#include <bit>
#include <cmath>
#include <cstdint>

#include "kernels/nvfp4.h"

namespace shardq {

// Order-free sum of non-negative doubles: each term (one row's sum) is rounded once to a
// multiple of 2^-64 and added as a 128-bit integer, so any grouping gives the same bits.
// Range 2^63 (about 9e18) is far above any table's sum of squares. A term beyond it (an
// inf or NaN row sum, from a source whose values overflow fp32) saturates the sum, which
// then reads back as +inf: saturating additions of non-negative terms stay order-free.
__extension__ typedef unsigned __int128 uint128_t; // GCC and Clang, every 64-bit target

struct ExactSum {
  static constexpr double kUnit = 0x1p64;
  static constexpr uint128_t kSaturated = ~uint128_t{0};
  uint128_t value = 0;
  void add(double term) { value = saturating_add(value, to_units(term)); }
  void merge(const ExactSum& other) { value = saturating_add(value, other.value); }
  double to_double() const { return value == kSaturated ? HUGE_VAL : double(value) / kUnit; }
  constexpr uint64_t high() const { return uint64_t(value >> 64); }
  constexpr uint64_t low() const { return uint64_t(value); }
  static ExactSum from_parts(uint64_t high, uint64_t low) {
    return ExactSum{(static_cast<uint128_t>(high) << 64) | low};
  }
  bool operator==(const ExactSum&) const = default;

 private:
  static uint128_t saturating_add(uint128_t a, uint128_t b) { return a + b < a ? kSaturated : a + b; }

  // term * 2^64 rounded half to even (as std::nearbyint), from the double's fields in
  // integer operations: the compiler's own double -> int128 cast is a libgcc call, and the
  // baseline x86-64 target has no rounding instruction (a hot spot at three calls per row).
  // term = significand * 2^(exponent - 1075), so term * 2^64 is significand shifted by
  // exponent - 1011: left (exact), or right with the bits shifted out deciding the rounding.
  static uint128_t to_units(double term) {
    const uint64_t bits = std::bit_cast<uint64_t>(term);
    const int exponent = int(bits >> 52 & 0x7FF); // the sign bit of -0.0 (the terms are >= 0)
    const uint64_t fraction = bits & ((uint64_t{1} << 52) - 1);
    const uint64_t significand = exponent == 0 ? fraction : fraction | uint64_t{1} << 52;
    const int shift = (exponent == 0 ? 1 : exponent) - 1011;
    if (shift > 127 - 53) return kSaturated; // 2^63 or more, inf, NaN
    if (shift >= 0) return static_cast<uint128_t>(significand) << shift;
    if (shift < -53) return 0; // below half a unit
    const int right = -shift;
    const uint64_t kept = significand >> right, rest = significand & ((uint64_t{1} << right) - 1);
    const uint64_t half = uint64_t{1} << (right - 1);
    return kept + ((rest > half || (rest == half && (kept & 1))) ? 1 : 0);
  }
};

// The 64-bit words of a stats field, in the order every serialization uses (checkpoint
// columns, journal, checksums): a counter is one word, an ExactSum two (high, low), the
// candidate wins one per candidate.
template <class Word> constexpr void for_each_word(uint64_t v, Word&& word) { word(v); }
template <class Word> constexpr void for_each_word(const ExactSum& sum, Word&& word) {
  word(sum.high());
  word(sum.low());
}
template <size_t N, class Word> constexpr void for_each_word(const std::array<uint64_t, N>& values, Word&& word) {
  for (uint64_t v : values) word(v);
}
// Reads a field back from its words, next() giving them in that order.
template <class Next> void read_words(uint64_t& v, Next&& next) { v = next(); }
template <class Next> void read_words(ExactSum& sum, Next&& next) {
  const uint64_t high = next();
  sum = ExactSum::from_parts(high, next());
}
template <size_t N, class Next> void read_words(std::array<uint64_t, N>& values, Next&& next) {
  for (uint64_t& v : values) v = next();
}

inline void merge_field(uint64_t& into, uint64_t from) { into += from; }
inline void merge_field(ExactSum& into, const ExactSum& from) { into.merge(from); }
template <size_t N>
void merge_field(std::array<uint64_t, N>& into, const std::array<uint64_t, N>& from) {
  for (size_t k = 0; k < N; ++k) into[k] += from[k];
}

struct ChunkStats {
  uint64_t rows = 0;
  uint64_t blocks = 0;
  uint64_t zero_blocks = 0;
  uint64_t scale_underflows = 0;
  uint64_t inexact_blocks = 0;    // transcode: blocks the target format cannot hold exactly
  std::array<uint64_t, kMaxMseCandidates> candidate_wins{};
  ExactSum error_sq;              // sum ||deq - x||^2
  ExactSum reference_sq;          // sum ||x||^2
  ExactSum output_sq;             // sum ||deq||^2 (with the two above: the cosine)
  ExactSum weighted_error_sq;     // sum ||W_c (x - deq)||^2 (undamped H_c)
  ExactSum weighted_reference_sq; // sum ||W_c x||^2

  // Integer counters of any number of rows: exact in any grouping.
  void add_counters(const BlockStats& counted) {
    blocks += counted.blocks;
    zero_blocks += counted.zero_blocks;
    scale_underflows += counted.scale_underflows;
    for (size_t k = 0; k < candidate_wins.size(); ++k) candidate_wins[k] += counted.candidate_wins[k];
  }
  // One row's counters and fp64 sums (the kernel's own order within the row).
  void add_row(const BlockStats& row) {
    ++rows;
    add_counters(row);
    error_sq.add(row.error_sq);
    reference_sq.add(row.reference_sq);
  }
  void merge(const ChunkStats& other);
  bool operator==(const ChunkStats&) const = default;
};

// The one list of ChunkStats' fields, for everything that walks them (merge, checkpoint
// columns, checksums): visit(name, field...) with the same field of each struct given, a
// uint64_t counter, the candidate_wins array or an ExactSum.
template <class Visit, class... Stats>
constexpr void for_each_stat(Visit&& visit, Stats&... s) {
  visit("rows", s.rows...);
  visit("blocks", s.blocks...);
  visit("zero_blocks", s.zero_blocks...);
  visit("scale_underflows", s.scale_underflows...);
  visit("inexact_blocks", s.inexact_blocks...);
  visit("candidate_wins", s.candidate_wins...);
  visit("error_sq", s.error_sq...);
  visit("reference_sq", s.reference_sq...);
  visit("output_sq", s.output_sq...);
  visit("weighted_error_sq", s.weighted_error_sq...);
  visit("weighted_reference_sq", s.weighted_reference_sq...);
}

// The fields of ChunkStats (for_each_stat's visits).
constexpr size_t stat_fields() {
  size_t fields = 0;
  const ChunkStats stats;
  for_each_stat([&](const char*, const auto&) { ++fields; }, stats);
  return fields;
}

// The 64-bit words of one ChunkStats (for_each_word over every field).
constexpr size_t stat_words() {
  size_t words = 0;
  const ChunkStats stats;
  for_each_stat([&](const char*, const auto& field) { for_each_word(field, [&](uint64_t) { ++words; }); }, stats);
  return words;
}

inline void ChunkStats::merge(const ChunkStats& other) {
  for_each_stat([](const char*, auto& into, const auto& from) { merge_field(into, from); }, *this, other);
}

} // namespace shardq
