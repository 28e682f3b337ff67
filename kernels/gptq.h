// GPTQ error feedback for NVFP4 rows of one Engram hash column (GPTQ.md "Quantizing a
// batch of rows"): lazy blocks of B columns, per-16 scale chosen on fully updated values at
// each group start (choose_and_quantize_block_nvfp4), one BLAS GEMM per lazy block.
//
// Precision: the fast kernel works in fp32 (X, U, the in-block updates and the GEMM,
// cblas_sgemm); the factor is computed in fp64 and rounded once to fp32 by
// gptq_factor_fp32. The unbatched reference works in fp64 throughout.
//
// Determinism: rows are processed in fixed tiles of kGptqRowTile rows; the last tile is
// padded with zero rows, so every GEMM is called with the same (M, N, K) whatever R is,
// and a row's arithmetic never depends on its neighbours or on R. The caller must keep
// OpenBLAS single-threaded (gptq_pin_blas_threads) and use the same BLAS build and CPU
// kernel on every rank (OpenBLAS DYNAMIC_ARCH picks kernels by CPU: set
// OPENBLAS_CORETYPE on a mixed cluster).
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/nvfp4.h"

namespace shardq {

inline constexpr int kGptqCols = 256;   // values per Engram row
inline constexpr int kGptqRowTile = 64; // rows per tile: fixed, part of the output's definition

// Buffers of one row tile, allocated once per stage and reused (never in the hot loop).
struct GptqWorkspace {
  std::vector<float> tile;     // kGptqCols x kGptqRowTile, column-major per tile (X^T)
  std::vector<float> original_columns; // the tile before feedback (for the SIMD stats)
  std::vector<float> errors;   // B x kGptqRowTile, E^T of the current lazy block
  std::vector<uint8_t> nibbles; // kGptqCols x kGptqRowTile codes, unpacked
  GptqWorkspace();
};

// U (256x256 row-major, upper triangular, fp64) rounded once to fp32 for the fast kernel.
std::vector<float> gptq_factor_fp32(const double* upper);

// Sets OpenBLAS to one thread (call once per process before gptq_quantize_rows when
// ranks or threads run their own row ranges).
void gptq_pin_blas_threads();

// Quantizes R rows of 256 (row-major, not modified: feedback works on a tile copy) to NVFP4 with
// GPTQ feedback through U (fp32, from gptq_factor_fp32). block_width B: a multiple of 16
// that divides 256. packed: R x 128 bytes, scales: R x 16 E4M3 codes. stats: block
// counters and candidate wins as in quantize_row_nvfp4_ref; error_sq / reference_sq
// against the ORIGINAL rows, summed as quantize_row_nvfp4_ref sums them (per block
// sum_block_fp64, blocks in order, rows in order), so splitting rows never changes them.
// What gptq_quantize_rows adds to stats: the block counters and candidate wins always;
// error_sq / reference_sq too unless the caller sums errors itself (the pipeline keeps
// exact per-row sums, so it skips these: ~10% of the kernel's time).
enum class GptqSums { counters_and_errors, counters_only };

void gptq_quantize_rows(const float* x, int rows, const float* upper, float global_scale, const ScaleSearch& search,
                        int block_width, uint8_t* packed, uint8_t* scales, BlockStats& stats,
                        GptqWorkspace& workspace, GptqSums sums = GptqSums::counters_and_errors);

// The spec: one row at a time in fp64, every later column updated after every column (no
// lazy batching, no BLAS). x is not modified. Same outputs and stats as above.
void gptq_quantize_rows_ref(const float* x, int rows, const double* upper, float global_scale,
                            const ScaleSearch& search, uint8_t* packed, uint8_t* scales, BlockStats& stats);

// Weighted error through the undamped Gram H (256x256, fp64): adds sum_r e_r^T H e_r to
// error_sq and sum_r x_r^T H x_r to reference_sq, e_r = deq_r - x_r, all in fp64, rows in
// order (weighted_rel_error = error_sq / reference_sq = sum ||W_c e||^2 / sum ||W_c x||^2).
// Computed per kGptqRowTile rows as one fp64 GEMM of fixed shape ([E; X] H), so the result
// does not depend on how rows are split either (~131K fp64 FMA per row: BLAS speed).
// Per row: row_error[r] = e_r^T H e_r, row_reference[r] = x_r^T H x_r (fp64, fixed tiles).
void weighted_error_rows(const double* gram, const float* original, const float* dequantized, int rows,
                         double* row_error, double* row_reference);

void add_weighted_error(const double* gram, const float* original, const float* dequantized, int rows,
                        double& error_sq, double& reference_sq);

// Same, from the NVFP4 output (dequantizes each row first).
void add_weighted_error_nvfp4(const double* gram, const float* original, const uint8_t* packed,
                              const uint8_t* scales, float global_scale, int rows, double& error_sq,
                              double& reference_sq);

// The in-block update X[:, j] -= E[:, i] * U[i, j], i = from..to-1, one fused multiply-add
// per step, on a kGptqRowTile-row column (errors: E^T of the lazy block starting at b0).
// update_column picks the SIMD path; update_column_portable is its scalar truth (exposed
// for the bit-for-bit test).
namespace gptq_detail {
void update_column(float* column, const float* errors, const float* upper, int b0, int j, int from, int to);
void update_column_portable(float* column, const float* errors, const float* upper, int b0, int j, int from, int to);
} // namespace gptq_detail

} // namespace shardq
