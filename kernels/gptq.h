// GPTQ error feedback for NVFP4 rows of one Engram hash column (docs/gptq.md "Quantizing
// batch of rows"): lazy blocks of B columns, per-16 scale chosen on fully updated values at
// each group start (choose_and_quantize_block_nvfp4), one lazy-batch product per block.
//
// Precision and determinism: the fast kernel works in fp32 (X, U, the error feedback); the
// factor is computed in fp64 and rounded once to fp32 by gptq_factor_fp32. Every update of
// an element is one fused multiply-add, and each element receives its updates in ascending
// column order whether they come from the in-block loop or from the lazy-batch product
// (a register-blocked product whose accumulators start from X, not a BLAS GEMM, whose
// summation order is its own). So the output is the same bits for every lazy width B, every
// row split and every CPU, and equals the unbatched fp32 reference gptq_quantize_rows_ref
// exactly (tested); a CUDA port can be held to the same bits. The fp64 reference measures
// what fp32 costs (tests state it: a few codes in 10^5 near rounding midpoints).
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/nvfp4.h"

namespace shardq {

inline constexpr int kGptqCols = 256;   // values per Engram row
inline constexpr int kGptqRowTile = 64; // rows per tile (rows are independent: a speed choice)

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

// Sets OpenBLAS to one thread (call once per process when ranks or threads run their own
// row ranges): the weighted error's triangular product runs inside a rank's compute thread.
void gptq_pin_blas_threads();

// Quantizes R rows of 256 (row-major, not modified: feedback works on a tile copy) to NVFP4 with
// GPTQ feedback through U (fp32, from gptq_factor_fp32). block_width B: a multiple of 16
// that divides 256. packed: R x 128 bytes, scales: R x 16 E4M3 codes. stats: block
// counters and candidate wins as in quantize_row_nvfp4_ref; error_sq / reference_sq
// against the ORIGINAL rows, summed as quantize_row_nvfp4_ref sums them (per block
// block_report_sums_nvfp4, blocks in order, rows in order), so splitting rows never
// changes them.
// What gptq_quantize_rows adds to stats: the block counters and candidate wins always;
// error_sq / reference_sq too unless the caller sums errors itself (the pipeline keeps
// exact per-row sums, so it skips these: ~10% of the kernel's time).
enum class GptqSums { counters_and_errors, counters_only };

void gptq_quantize_rows(const float* x, int rows, const float* upper, float global_scale, const ScaleSearch& search,
                        int block_width, uint8_t* packed, uint8_t* scales, BlockStats& stats,
                        GptqWorkspace& workspace, GptqSums sums = GptqSums::counters_and_errors);

// The spec, unbatched: one row at a time, every later column updated right after every
// column with one fused multiply-add. x is not modified. With the fp32 factor this is the
// truth gptq_quantize_rows equals bit for bit (outputs and stats); with the fp64 factor it
// runs in fp64 throughout (the accuracy yardstick).
void gptq_quantize_rows_ref(const float* x, int rows, const float* upper, float global_scale,
                            const ScaleSearch& search, uint8_t* packed, uint8_t* scales, BlockStats& stats);
void gptq_quantize_rows_ref(const float* x, int rows, const double* upper, float global_scale,
                            const ScaleSearch& search, uint8_t* packed, uint8_t* scales, BlockStats& stats);

// The undamped Gram H of a hash column as the weighted error uses it: H = P^T G^T G P with
// G upper triangular (fp32, row-major 256x256) and P the permutation (P v)[k] = v[order[k]]
// (a pivoted LDL^T, G = D^1/2 L^T; stages/factors.h gram_root makes it). Then v^T H v =
// ||G P v||^2: a sum of squares, which fp32 products keep to ~1e-6 relative, where the
// quadratic form itself cancels (H's condition reaches 1e6).
struct GramRoot {
  std::vector<float> upper;
  std::vector<int32_t> order;
};

// Weighted error through H: adds sum_r ||G P e_r||^2 to error_sq and sum_r ||G P x_r||^2 to
// reference_sq, e_r = deq_r - x_r (fp32), rows in order (weighted_rel_error = error_sq /
// reference_sq = sum ||W_c e||^2 / sum ||W_c x||^2). Computed per kGptqRowTile rows as one
// fp32 triangular product of fixed shape ([E; X] P^T G^T) and fp64 sums of the squares in
// column order, so the result does not depend on how rows are split either (~33K fp32 FMA
// per vector at BLAS speed, still most of a gptq-mse run's arithmetic). The figure depends
// on the BLAS kernel chosen for the CPU, never the output bytes (docs/gptq.md "Weighted
// error" says how a cluster of mixed CPUs keeps it identical).
// Per row: row_error[r] = e_r^T H e_r, row_reference[r] = x_r^T H x_r.
void weighted_error_rows(const GramRoot& root, const float* original, const float* dequantized, int rows,
                         double* row_error, double* row_reference);

void add_weighted_error(const GramRoot& root, const float* original, const float* dequantized, int rows,
                        double& error_sq, double& reference_sq);

// Same, from the NVFP4 output (dequantizes each row first).
void add_weighted_error_nvfp4(const GramRoot& root, const float* original, const uint8_t* packed,
                              const uint8_t* scales, float global_scale, int rows, double& error_sq,
                              double& reference_sq);

// The feedback updates, one fused multiply-add per step, on the transposed tile (column k
// of the tile: kGptqRowTile rows; errors: E^T of the lazy block starting at b0):
// update_column: X[:, j] -= E[:, i] * U[i, j] for i = from..to-1, in that order;
// update_columns: the same for every column k_begin..k_end-1 (the lazy-batch product).
// Each dispatches to the best SIMD target with fused multiply-adds (kernels/cpu/
// gptq_update_simd.cpp: AVX2 on x86, NEON on aarch64); the *_portable versions are their
// scalar truth (exposed for the bit-for-bit tests).
namespace gptq_detail {
void update_column(float* column, const float* errors, const float* upper, int b0, int j, int from, int to);
void update_column_portable(float* column, const float* errors, const float* upper, int b0, int j, int from, int to);
void update_columns(float* tile, const float* errors, const float* upper, int b0, int k_begin, int k_end, int from,
                    int to);
void update_columns_portable(float* tile, const float* errors, const float* upper, int b0, int k_begin, int k_end,
                             int from, int to);
} // namespace gptq_detail

} // namespace shardq
