#include "stages/source_rows.h"

#include <fmt/format.h>

#include <algorithm>

#include "kernels/formats.h"
#include "kernels/nvfp4.h"
#include "stages/stage_error.h"

namespace shardq {

namespace {

// True when some code is NaN: one branch-free pass the compiler vectorizes (byte max),
// so the common, clean chunk costs a fraction of a memory pass.
bool any_nan_code(std::span<const uint8_t> codes, std::span<const uint8_t> scales) {
  uint8_t largest_magnitude = 0, largest_scale = 0;
  for (const uint8_t code : codes) largest_magnitude = std::max<uint8_t>(largest_magnitude, code & 0x7F);
  for (const uint8_t scale : scales) largest_scale = std::max(largest_scale, scale);
  return E4M3::is_nan(largest_magnitude) || largest_scale == E8M0::nan_code;
}

[[noreturn]] void throw_nan_scale(const Fp8RowChunk& chunk, uint64_t r, int s) {
  throw StageError(fmt::format("{}: row {} column {}: E8M0 scale is NaN (0xFF); expected a finite scale",
                               chunk.scale_tensor.empty() ? chunk.tensor : chunk.scale_tensor, chunk.first_row + r, s));
}

} // namespace

void check_e8m0_scales(const Fp8RowChunk& chunk) {
  const int scale_cols = chunk.cols / 32;
  const auto scales = chunk.scales.first(chunk.rows * uint64_t(scale_cols));
  const auto nan = std::find(scales.begin(), scales.end(), E8M0::nan_code);
  if (nan == scales.end()) return;
  const uint64_t at = uint64_t(nan - scales.begin());
  throw_nan_scale(chunk, at / scale_cols, int(at % scale_cols));
}

void check_fp8_chunk(const Fp8RowChunk& chunk) {
  const int scale_cols = chunk.cols / 32;
  if (!any_nan_code(chunk.codes.first(chunk.rows * uint64_t(chunk.cols)), chunk.scales.first(chunk.rows * uint64_t(scale_cols)))) {
    return;
  }
  // Slow path: name the first bad code.
  for (uint64_t r = 0; r < chunk.rows; ++r) {
    const uint8_t* codes = chunk.codes.data() + r * chunk.cols;
    const uint8_t* scales = chunk.scales.data() + r * scale_cols;
    for (int s = 0; s < scale_cols; ++s) {
      if (scales[s] == E8M0::nan_code) throw_nan_scale(chunk, r, s);
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
