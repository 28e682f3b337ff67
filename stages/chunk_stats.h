// What one chunk of a table contributes to the report; stored per chunk in the checkpoint
// and merged at the end. Every field is an integer or an ExactSum, so the totals are the
// same whatever the rank count, the schedule or rows_per_chunk.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>

#include "kernels/nvfp4.h"

namespace shardq {

// Order-free sum of non-negative doubles: each term (one row's sum) is rounded once to a
// multiple of 2^-64 and added as a 128-bit integer, so any grouping gives the same bits.
// Range 2^63 (about 9e18) is far above any table's sum of squares.
__extension__ typedef unsigned __int128 uint128_t; // GCC and Clang, every 64-bit target

struct ExactSum {
  static constexpr double kUnit = 0x1p64;
  uint128_t value = 0;
  void add(double term) { value += static_cast<uint128_t>(std::nearbyint(term * kUnit)); }
  void merge(const ExactSum& other) { value += other.value; }
  double to_double() const { return double(value) / kUnit; }
  uint64_t high() const { return uint64_t(value >> 64); }
  uint64_t low() const { return uint64_t(value); }
  static ExactSum from_parts(uint64_t high, uint64_t low) {
    return ExactSum{(static_cast<uint128_t>(high) << 64) | low};
  }
  bool operator==(const ExactSum&) const = default;
};

struct ChunkStats {
  uint64_t rows = 0;
  uint64_t blocks = 0;
  uint64_t zero_blocks = 0;
  uint64_t scale_underflows = 0;
  std::array<uint64_t, kMaxMseCandidates> candidate_wins{};
  ExactSum error_sq;              // sum ||deq - x||^2
  ExactSum reference_sq;          // sum ||x||^2
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
  void merge(const ChunkStats& other) {
    rows += other.rows;
    blocks += other.blocks;
    zero_blocks += other.zero_blocks;
    scale_underflows += other.scale_underflows;
    for (size_t k = 0; k < candidate_wins.size(); ++k) candidate_wins[k] += other.candidate_wins[k];
    error_sq.merge(other.error_sq);
    reference_sq.merge(other.reference_sq);
    weighted_error_sq.merge(other.weighted_error_sq);
    weighted_reference_sq.merge(other.weighted_reference_sq);
  }
  bool operator==(const ChunkStats&) const = default;
};

} // namespace shardq
