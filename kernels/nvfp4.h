// NVFP4 row kernels: block scales (amax rule and the MSE search), E2M1 codes, stats.
// quantize_row_nvfp4_ref is the spec; every fast path is tested bit for bit against it.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "kernels/formats.h"

namespace shardq {

inline constexpr int kMaxMseCandidates = 16;

// How a block scale is chosen.
struct ScaleSearch {
  int candidates = 1;        // 1 = the amax rule (RTN); 8 = the seed's MSE search
  double alpha_min = 0.75;   // candidates alpha_k = alpha_min + k * (1 - alpha_min) / (n - 1)
  // Candidate multipliers rounded once to fp32 (alpha of the last one is exactly 1).
  std::array<float, kMaxMseCandidates> alphas() const;
};

// One block's report sums (block_report_sums_nvfp4 below).
struct BlockSums {
  double error_sq = 0.0;
  double reference_sq = 0.0;
};

// Counters every kernel keeps; summed over chunks in chunk order by the pipeline.
struct BlockStats {
  uint64_t blocks = 0;
  uint64_t zero_blocks = 0;
  uint64_t scale_underflows = 0; // non-zero block whose unclamped amax scale < 2^-9
  std::array<uint64_t, kMaxMseCandidates> candidate_wins{};
  double error_sq = 0.0;         // sum (deq - x)^2 in fp64
  double reference_sq = 0.0;     // sum x^2 in fp64
  void merge(const BlockStats& other);
  void add_sums(const BlockSums& block) {
    error_sq += block.error_sq;
    reference_sq += block.reference_sq;
  }
};

// E4M3 code of a block scale: zero block -> 1.0, clamp to [2^-9, 448], RNE.
// A scale of exactly 0 means a zero block; callers decide that from the block amax.
uint8_t nvfp4_scale_code(float unclamped_scale);

// E4M3 code of 1.0: the scale of an all-zero block.
inline constexpr uint8_t kNvfp4ZeroBlockScaleCode = 0x38;

// Scale code of candidate alpha for a block: amax == 0 -> 1.0; otherwise
// e4m3(clamp((alpha * amax) / (6 * global), 2^-9, 448)), the product first, all fp32.
uint8_t nvfp4_block_scale_code(float amax, float alpha, float global_scale);

// Quantize one block of 16 with a given scale code; writes 16 unpacked nibbles.
void quantize_block_nvfp4(const float* x, uint8_t scale_code, float global_scale, uint8_t* nibbles);

// Sum of 16 terms in a fixed pairwise order: t[i] + t[i+8], then + 4, + 2, + 1 lanes (a
// fold in halves). Every backend sums a block in this order, so results match bit for bit.
double sum_block_fp64(const double* terms);
float sum_block_fp32(const float* terms);

// The MSE search's error of 16 nibbles against x (docs/formats.md "MSE block-scale search": fp64, so that no summation
// order can change the choice): terms (double(deq) - double(x))^2, sum_block_fp64.
double block_error_nvfp4(const float* x, const uint8_t* nibbles, uint8_t scale_code, float global_scale);

// What one block adds to the report's sums ||deq - x||^2 and ||x||^2 (rel_rms_error).
// Not the MSE choice: a report figure only needs fp32 terms, and fp64 terms cost the RTN
// row kernel more than the quantization itself. The rule, on every backend:
//   E = the biased fp32 exponent of the block amax, clamped to [1, 253];
//   p = 2^(127 - E), so |x * p| < 4 and no fp32 square overflows or underflows early;
//   error terms ((deq - x) * p)^2 and reference terms (x * p)^2 in fp32, sum_block_fp32,
//   each sum widened to fp64 and multiplied twice by 2^(E - 127) (exact).
// Each sum is within 2^-21 relative of the exact one (tested against fp64).
BlockSums block_report_sums_nvfp4(const float* x, const float* deq);
// Same, of 16 nibbles with their scale code (deq = dequantize_nvfp4 of each).
BlockSums block_report_sums_nvfp4(const float* x, const uint8_t* nibbles, uint8_t scale_code, float global_scale);

// 2^(127 - E) and 2^(E - 127) of the rule above, from the block amax.
struct ReportScale {
  float down;  // p
  float up;    // 1 / p
};
ReportScale report_scale_of_amax(float amax);

// block_report_sums_nvfp4 of every block of a row (cols % 16 == 0), added to stats in
// block order: the pipeline's per-row figure wherever deq is already at hand.
void add_row_report_sums_nvfp4(const float* x, const float* deq, int cols, BlockStats& stats);
// Same, SIMD with runtime dispatch; bit-identical.
void add_row_report_sums_nvfp4_simd(const float* x, const float* deq, int cols, BlockStats& stats);

// Dequantized value of one element: (e2m1 * scale) * global, one rounding.
inline float dequantize_nvfp4(uint8_t nibble, uint8_t scale_code, float global_scale) {
  return e2m1_to_float(nibble) * e4m3_to_float(scale_code) * global_scale;
}

// Choose the scale of one block (amax rule or MSE search) and quantize it: the block
// primitive that whole-row kernels and GPTQ (at each group start) share.
uint8_t choose_and_quantize_block_nvfp4(const float* x, float global_scale, const ScaleSearch& search,
                                        uint8_t* nibbles, BlockStats& stats);

// One row of `cols` values (cols % 16 == 0): packed codes (cols/2 bytes, low nibble =
// even element), E4M3 scales (cols/16 bytes), stats accumulated: per block, error_sq and
// reference_sq get the block's block_report_sums_nvfp4, in block order.
// Precondition: finite x (NaN/inf are counted and rejected upstream; backends may differ on them).
void quantize_row_nvfp4_ref(const float* x, int cols, float global_scale, const ScaleSearch& search,
                            uint8_t* packed, uint8_t* scales, BlockStats& stats);

// Same contract, Highway SIMD with runtime dispatch (AVX2 / AVX-512 / NEON / SVE / scalar);
// bit-identical to quantize_row_nvfp4_ref, stats included.
void quantize_row_nvfp4_simd(const float* x, int cols, float global_scale, const ScaleSearch& search,
                             uint8_t* packed, uint8_t* scales, BlockStats& stats);

// The scale choice of choose_and_quantize_block_nvfp4 for `lanes` blocks stored lane-wise
// (a GPTQ tile: rows as lanes): element e of block l at columns[e * stride + l], lanes % 16
// == 0. codes[l] = the code the scalar chooser picks for block l (bit-identical, SIMD with
// runtime dispatch); stats.blocks, zero_blocks, scale_underflows and candidate_wins count
// blocks l < counted only; error_sq / reference_sq are not touched.
void choose_block_scales_nvfp4_lanes(const float* columns, size_t stride, int lanes, int counted,
                                     float global_scale, const ScaleSearch& search, uint8_t* codes,
                                     BlockStats& stats);

// block_report_sums_nvfp4 of `lanes` blocks stored lane-wise (as above; nibbles one per
// byte in the same layout, codes[l] the scale of block l), into errors[l] and
// references[l]; bit-identical, SIMD with runtime dispatch.
void block_errors_nvfp4_lanes(const float* columns, const uint8_t* nibbles, size_t stride, int lanes,
                              const uint8_t* codes, float global_scale, double* errors, double* references);

void dequantize_row_nvfp4(const uint8_t* packed, const uint8_t* scales, int cols, float global_scale, float* out);
// Same values, Highway SIMD with runtime dispatch: bit-identical for every non-NaN result
// (cols a multiple of the block, as the scalar one).
void dequantize_row_nvfp4_simd(const uint8_t* packed, const uint8_t* scales, int cols, float global_scale, float* out);

// Source rows: E4M3 values with one E8M0 scale per 32 (the DeepSeek FP8 row format).
void dequantize_row_fp8_e8m0_32(const uint8_t* codes, const uint8_t* scales, int cols, float* out);

// Same values, Highway SIMD with runtime dispatch: bit-identical for every non-NaN result
// (NaN codes or scale 0xFF give a NaN, as the scalar one).
void dequantize_row_fp8_e8m0_32_simd(const uint8_t* codes, const uint8_t* scales, int cols, float* out);

} // namespace shardq
