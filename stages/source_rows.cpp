#include "stages/source_rows.h"

#include <fmt/format.h>

#include "kernels/formats.h"
#include "kernels/nvfp4.h"
#include "stages/stage_error.h"

namespace shardq {

void check_fp8_chunk(const Fp8RowChunk& chunk) {
  const int scale_cols = chunk.cols / 32;
  for (uint64_t r = 0; r < chunk.rows; ++r) {
    const uint8_t* codes = chunk.codes.data() + r * chunk.cols;
    const uint8_t* scales = chunk.scales.data() + r * scale_cols;
    for (int s = 0; s < scale_cols; ++s) {
      if (scales[s] == E8M0::nan_code) {
        throw StageError(fmt::format("{}: row {} column {}: E8M0 scale is NaN (0xFF); expected a finite scale",
                                     chunk.scale_tensor.empty() ? chunk.tensor : chunk.scale_tensor,
                                     chunk.first_row + r, s));
      }
    }
    for (int c = 0; c < chunk.cols; ++c) {
      if (E4M3::is_nan(codes[c])) {
        throw StageError(fmt::format("{}: row {} column {}: E4M3 code 0x{:02X} is NaN; expected a finite value",
                                     chunk.tensor, chunk.first_row + r, c, codes[c]));
      }
    }
  }
}

void dequantize_chunk_row(const Fp8RowChunk& chunk, uint64_t r, float* out) {
  dequantize_row_fp8_e8m0_32_simd(chunk.codes.data() + r * chunk.cols, chunk.scales.data() + r * (chunk.cols / 32),
                             chunk.cols, out);
}

} // namespace shardq
