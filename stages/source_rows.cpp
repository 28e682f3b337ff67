#include "stages/source_rows.h"

#include <fmt/format.h>

#include <algorithm>

#include "kernels/formats.h"
#include "kernels/nvfp4.h"
#include "kernels/scan.h"
#include "stages/stage_error.h"

namespace shardq {

namespace {

// True when some code or scale is NaN: the codes in one SIMD pass (kernels/scan.h), so the
// common, clean chunk costs a fraction of a memory pass.
bool any_nan_code(std::span<const uint8_t> codes, std::span<const uint8_t> scales) {
  return any_e4m3_nan_simd(codes.data(), codes.size()) ||
         std::find(scales.begin(), scales.end(), E8M0::nan_code) != scales.end();
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

void check_fp8_rows(const Fp8RowChunk& chunk, uint64_t first, uint64_t count) {
  const int scale_cols = chunk.cols / 32;
  const auto codes = chunk.codes.subspan(first * chunk.cols, count * chunk.cols);
  const auto scales = chunk.scales.subspan(first * scale_cols, count * scale_cols);
  if (!any_nan_code(codes, scales)) return;
  // Slow path: name the first bad code.
  for (uint64_t r = first; r < first + count; ++r) {
    const uint8_t* row_codes = chunk.codes.data() + r * chunk.cols;
    const uint8_t* row_scales = chunk.scales.data() + r * scale_cols;
    for (int s = 0; s < scale_cols; ++s) {
      if (row_scales[s] == E8M0::nan_code) throw_nan_scale(chunk, r, s);
    }
    for (int c = 0; c < chunk.cols; ++c) {
      if (E4M3::is_nan(row_codes[c])) {
        throw StageError(fmt::format("{}: row {} column {}: E4M3 code 0x{:02X} is NaN; expected a finite value",
                                     chunk.tensor, chunk.first_row + r, c, row_codes[c]));
      }
    }
  }
}

void check_fp8_chunk(const Fp8RowChunk& chunk) { check_fp8_rows(chunk, 0, chunk.rows); }

void dequantize_chunk_row(const Fp8RowChunk& chunk, uint64_t r, float* out) {
  dequantize_row_fp8_e8m0_32_simd(chunk.codes.data() + r * chunk.cols, chunk.scales.data() + r * (chunk.cols / 32),
                             chunk.cols, out);
}

} // namespace shardq
