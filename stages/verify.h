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

} // namespace shardq
