// GPTQ's feedback updates (kernels/gptq.h, gptq_detail) on Highway SIMD, dispatched at run
// time (foreach_target), and their scalar truth. One fused multiply-add per step, each
// element's steps in ascending order, on every path: the same bits on any CPU and vector
// width. A target without native FMA (x86 before AVX2) runs the scalar loop, whose std::fma
// is exact everywhere; a vector emulation there would round twice.
#include <algorithm>
#include <cmath>
#include <cstddef>

#include "kernels/gptq.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/gptq_update_simd.cpp"
// No SVE targets: the tile's rows are held as arrays of vectors, which SVE's sizeless types
// forbid. aarch64 runs NEON here, as wide as the DGX Spark's SVE2 (128 bits). No AVX-512:
// with 512-bit vectors the whole GPTQ kernel ran 4-6% slower than with AVX2 on an AVX-512
// Xeon (docs/benchmarks.md), so x86 takes AVX2 where it has it.
#define HWY_DISABLED_TARGETS (HWY_SVE | HWY_SVE2 | HWY_SVE_256 | HWY_SVE2_128 | HWY_AVX3 | HWY_AVX3_DL)
#include "hwy/foreach_target.h" // IWYU pragma: keep
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace shardq {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

constexpr int kCols = kGptqCols;
constexpr int kTile = kGptqRowTile;

#if HWY_NATIVE_FMA
using Tag = hn::ScalableTag<float>;
constexpr int kLanes = int(HWY_LANES(float));
static_assert(kTile % (4 * kLanes) == 0, "whole vectors of a tile's rows");

// Left-looking in-block update of column j: the whole column (64 rows) stays in registers
// while the errors stream past; only the errors are loaded (the right-looking form was bound
// by its stores). The loops over the register arrays are unrolled (HWY_UNROLL) so that GCC
// keeps the arrays in registers: left to itself it copied the column through the stack.
void UpdateColumn(float* column, const float* errors, const float* upper, int b0, int j, int from, int to) {
  const Tag d;
  constexpr int kVectors = kTile / kLanes;
  hn::Vec<Tag> x[kVectors];
  HWY_UNROLL(16)
  for (int v = 0; v < kVectors; ++v) x[v] = hn::LoadU(d, column + v * kLanes);
  for (int i = from; i < to; ++i) {
    const auto u = hn::Set(d, upper[size_t(i) * kCols + j]);
    const float* e = errors + size_t(i - b0) * kTile;
    HWY_UNROLL(16)
    for (int v = 0; v < kVectors; ++v) x[v] = hn::NegMulAdd(hn::LoadU(d, e + v * kLanes), u, x[v]);
  }
  HWY_UNROLL(16)
  for (int v = 0; v < kVectors; ++v) hn::StoreU(x[v], d, column + v * kLanes);
}

// The lazy-batch product: three columns x four vectors of rows (32 rows on AVX2, 16 on NEON)
// per step, 12 accumulators sharing each error load (so the loop runs at the FMA rate, not
// the load rate); steps in runs of 64, then row blocks, so that one run's errors of one
// block (64 x 32 floats at most, 8 KB) stay in L1 across all columns. Runs go in order:
// each element's chain stays ascending.
void UpdateColumns(float* tile, const float* errors, const float* upper, int b0, int k_begin, int k_end, int from,
                   int to) {
  const Tag d;
  constexpr int kColumns = 3, kVectors = 4, kRows = kVectors * kLanes, kSteps = 64;
  const int k_split = k_end - (k_end - k_begin) % kColumns;
  for (int run = from; run < to; run += kSteps) {
    const int run_end = std::min(to, run + kSteps);
    for (int r0 = 0; r0 < kTile; r0 += kRows) {
      for (int k = k_begin; k < k_split; k += kColumns) {
        hn::Vec<Tag> x[kColumns][kVectors];
        HWY_UNROLL(16)
        for (int c = 0; c < kColumns; ++c)
          HWY_UNROLL(16)
          for (int v = 0; v < kVectors; ++v) x[c][v] = hn::LoadU(d, tile + size_t(k + c) * kTile + r0 + v * kLanes);
        for (int i = run; i < run_end; ++i) {
          const float* u_row = upper + size_t(i) * kCols + k;
          hn::Vec<Tag> u[kColumns];
          HWY_UNROLL(16)
          for (int c = 0; c < kColumns; ++c) u[c] = hn::Set(d, u_row[c]);
          const float* e = errors + size_t(i - b0) * kTile + r0;
          HWY_UNROLL(16)
          for (int v = 0; v < kVectors; ++v) {
            const auto ev = hn::LoadU(d, e + v * kLanes);
            HWY_UNROLL(16)
            for (int c = 0; c < kColumns; ++c) x[c][v] = hn::NegMulAdd(ev, u[c], x[c][v]);
          }
        }
        HWY_UNROLL(16)
        for (int c = 0; c < kColumns; ++c)
          HWY_UNROLL(16)
          for (int v = 0; v < kVectors; ++v) hn::StoreU(x[c][v], d, tile + size_t(k + c) * kTile + r0 + v * kLanes);
      }
    }
  }
  for (int k = k_split; k < k_end; ++k) UpdateColumn(tile + size_t(k) * kTile, errors, upper, b0, k, from, to);
}
#else
void UpdateColumn(float* column, const float* errors, const float* upper, int b0, int j, int from, int to) {
  gptq_detail::update_column_portable(column, errors, upper, b0, j, from, to);
}

void UpdateColumns(float* tile, const float* errors, const float* upper, int b0, int k_begin, int k_end, int from,
                   int to) {
  gptq_detail::update_columns_portable(tile, errors, upper, b0, k_begin, k_end, from, to);
}
#endif

} // namespace HWY_NAMESPACE
} // namespace shardq
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace shardq {

void gptq_detail::update_column_portable(float* column, const float* errors, const float* upper, int b0, int j,
                                         int from, int to) {
  for (int i = from; i < to; ++i) {
    const float u = upper[size_t(i) * kGptqCols + j];
    const float* e = errors + size_t(i - b0) * kGptqRowTile;
    for (int r = 0; r < kGptqRowTile; ++r) column[r] = std::fma(-e[r], u, column[r]);
  }
}

void gptq_detail::update_columns_portable(float* tile, const float* errors, const float* upper, int b0, int k_begin,
                                          int k_end, int from, int to) {
  for (int k = k_begin; k < k_end; ++k)
    update_column_portable(tile + size_t(k) * kGptqRowTile, errors, upper, b0, k, from, to);
}

HWY_EXPORT(UpdateColumn);
HWY_EXPORT(UpdateColumns);

void gptq_detail::update_column(float* column, const float* errors, const float* upper, int b0, int j, int from,
                                int to) {
  HWY_DYNAMIC_DISPATCH(UpdateColumn)(column, errors, upper, b0, j, from, to);
}

void gptq_detail::update_columns(float* tile, const float* errors, const float* upper, int b0, int k_begin, int k_end,
                                 int from, int to) {
  HWY_DYNAMIC_DISPATCH(UpdateColumns)(tile, errors, upper, b0, k_begin, k_end, from, to);
}

} // namespace shardq
#endif
