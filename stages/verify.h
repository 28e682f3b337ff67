// Stage `verify`: checks output rows against their source rows, independently of how
// they were made: valid codes, and for round-to-nearest methods (rtn, mse) every element
// within half an E2M1 step of its source value at the block's scale (or clipped to 6 at
// most by the scale's shortfall). GPTQ moves values on purpose, so for it only the error
// sums are recomputed.
#pragma once

#include <cstdint>
#include <string>

#include "stages/chunk_stats.h"
#include "stages/source_rows.h"

namespace shardq {

struct VerifyCounts {
  uint64_t rows = 0;
  uint64_t elements_out_of_bound = 0;
  uint64_t nan_scales = 0;
  std::string first_problem; // tensor, row, column and what was expected
  ChunkStats sums;           // error_sq / reference_sq recomputed per row
};

// Rows of one chunk: source (FP8) and output (packed NVFP4 + E4M3 scales).
void verify_nvfp4_rows(const Fp8RowChunk& source, const uint8_t* packed, const uint8_t* scales, float global_scale,
                       bool check_bound, const std::string& output_tensor, VerifyCounts& counts);

// Rows of an Engram MXFP4 output against their FP8 source: the bytes must be what the
// MXFP4 quantizer makes of the source (codes and scales), and the sums of x^2, deq^2 and
// (deq - x)^2 go to counts.sums (reference_sq, output_sq, error_sq) for the cosine.
void verify_mxfp4_rows(const Fp8RowChunk& source, const uint8_t* packed, const uint8_t* scales,
                       const std::string& output_tensor, VerifyCounts& counts);

// Rows of a transcoded expert: every element of the output (E2M1 code x E4M3 block scale x
// weight_scale_2) must equal the source's (E2M1 code x E8M0 block scale) bit for bit in
// fp32; counts.elements_out_of_bound counts those that do not.
void verify_transcode_rows(const uint8_t* source_codes, const uint8_t* source_scales, const uint8_t* codes,
                           const uint8_t* scales, float weight_scale_2, uint64_t first_row, uint64_t rows, int cols,
                           const std::string& output_tensor, VerifyCounts& counts);

struct LinearRows;

// Rows of an INT8 output against their decoded source: every element within half a step
// (scale / 2) of the source value, every non-zero row reaching max |q| == 127, every
// all-zero row with scale 1.0 and zero codes. counts.sums gets the report's figures by its
// rule: rows, blocks and all-zero rows (zero_blocks) of every row, the error sums of the
// sampled rows (is_int8_report_row).
void verify_int8_rows(const LinearRows& source, const int8_t* codes, const float* scales,
                      const std::string& output_tensor, VerifyCounts& counts);

// Rows of a BF16 output: every element the round-to-nearest-even BF16 of its source value;
// counts.sums gets every row's error sums (the report's rule for BF16 kinds).
void verify_bf16_rows(const LinearRows& source, const uint16_t* values, const std::string& output_tensor,
                      VerifyCounts& counts);

} // namespace shardq
