#include "stages/linear_rows.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/formats.h"
#include "kernels/mxfp4.h"
#include "kernels/nvfp4.h"
#include "kernels/scan.h"
#include "stages/stage_error.h"

namespace shardq {
namespace {

constexpr int kBlock = 32;

uint64_t code_bytes_per_row(const LinearRows& rows) {
  return rows.source == LinearSource::fp8_block32 ? uint64_t(rows.cols) : uint64_t(rows.cols) / 2;
}

uint64_t scale_cols(const LinearRows& rows) { return (uint64_t(rows.cols) + kBlock - 1) / kBlock; }

// The scale tensor's row of weight row `row` (absolute): its own (FP4), its block's (FP8).
uint64_t scale_row_of(const LinearRows& rows, uint64_t row) {
  return rows.source == LinearSource::fp4_row32 ? row : row / kBlock;
}

// The codes of chunk row r.
const uint8_t* row_codes(const LinearRows& rows, uint64_t r) { return rows.codes.data() + r * code_bytes_per_row(rows); }

// The E8M0 scales of chunk row r.
const uint8_t* row_scales(const LinearRows& rows, uint64_t r) {
  const uint64_t scale_row = scale_row_of(rows, rows.first_row + r) - scale_row_of(rows, rows.first_row);
  return rows.scales.data() + scale_row * scale_cols(rows);
}

} // namespace

void check_linear_scales(const LinearRows& rows) {
  // A branch-free byte max first (vectorized); the search that names the NaN (0xFF, the
  // largest byte) runs only when there is one.
  if (rows.scales.empty() || *std::max_element(rows.scales.begin(), rows.scales.end()) != E8M0::nan_code) return;
  const uint64_t at = uint64_t(std::find(rows.scales.begin(), rows.scales.end(), E8M0::nan_code) - rows.scales.begin());
  throw StageError(fmt::format("{}: row {} column {}: E8M0 scale is NaN (0xFF); expected a finite scale",
                               rows.scale_tensor, scale_row_of(rows, rows.first_row) + at / scale_cols(rows),
                               at % scale_cols(rows)));
}

void check_linear_codes(const LinearRows& rows, uint64_t first, uint64_t count) {
  if (rows.source != LinearSource::fp8_block32) return; // every E2M1 code is a number
  const std::span<const uint8_t> codes = rows.codes.subspan(first * uint64_t(rows.cols), count * uint64_t(rows.cols));
  // One SIMD scan (kernels/scan.h), then the search only if some code is NaN.
  if (!any_e4m3_nan_simd(codes.data(), codes.size())) return;
  const auto nan_code = std::find_if(codes.begin(), codes.end(), [](uint8_t c) { return E4M3::is_nan(c); });
  const uint64_t at = first * uint64_t(rows.cols) + uint64_t(nan_code - codes.begin());
  throw StageError(fmt::format("{}: row {} column {}: E4M3 code 0x{:02X} is NaN", rows.tensor,
                               rows.first_row + at / uint64_t(rows.cols), at % uint64_t(rows.cols), *nan_code));
}

void refuse_infinite_row(const LinearRows& rows, uint64_t r) {
  thread_local std::vector<float> values;
  values.resize(uint64_t(rows.cols));
  decode_linear_row(rows, r, values.data());
  const auto inf = std::find_if(values.begin(), values.end(), [](float x) { return std::isinf(x); });
  if (inf == values.end()) {
    throw StageError(fmt::format("{}: row {}: an infinite result from a row whose values all decode finite",
                                 rows.tensor, rows.first_row + r));
  }
  const uint64_t col = uint64_t(inf - values.begin());
  throw StageError(fmt::format("{}: row {} column {}: decodes to {} (E8M0 scale byte {} of '{}'): past fp32's range, "
                               "so neither an INT8 scale nor a BF16 value can hold it",
                               rows.tensor, rows.first_row + r, col, *inf, row_scales(rows, r)[col / kBlock],
                               rows.scale_tensor));
}

void check_linear_rows(const LinearRows& rows) {
  check_linear_scales(rows);
  check_linear_codes(rows, 0, rows.rows);
}

void decode_linear_row(const LinearRows& rows, uint64_t r, float* out) {
  const uint8_t* codes = row_codes(rows, r);
  const uint8_t* scales = row_scales(rows, r);
  if (rows.source == LinearSource::fp4_row32) {
    dequantize_row_mxfp4(codes, scales, rows.cols, out);
  } else if (rows.cols % kBlock == 0) {
    dequantize_row_fp8_e8m0_32_simd(codes, scales, rows.cols, out);
  } else { // a partial last block: the same rule, value by value
    for (int c = 0; c < rows.cols; ++c) out[c] = e4m3_to_float(codes[c]) * e8m0_to_float(scales[c / kBlock]);
  }
}

void quantize_linear_rows_int8(const LinearRows& rows, int8_t* codes, float* scales) {
  if (rows.source == LinearSource::fp4_row32) {
    quantize_rows_int8_from_fp4_simd(row_codes(rows, 0), row_scales(rows, 0), rows.cols, rows.rows, codes, scales);
    return;
  }
  for (uint64_t r = 0; r < rows.rows; ++r) scales[r] = quantize_linear_row_int8(rows, r, codes + r * uint64_t(rows.cols), nullptr);
}

float quantize_linear_row_int8(const LinearRows& rows, uint64_t r, int8_t* codes, Int8RowSums* sums) {
  if (rows.source == LinearSource::fp4_row32)
    return quantize_row_int8_from_fp4_simd(row_codes(rows, r), row_scales(rows, r), rows.cols, codes, sums);
  return quantize_row_int8_from_fp8_simd(row_codes(rows, r), row_scales(rows, r), rows.cols, codes, sums);
}

bool is_all_zero_int8_row(float scale, const int8_t* codes, int cols) {
  return scale == 1.0f && std::all_of(codes, codes + cols, [](int8_t code) { return code == 0; });
}

} // namespace shardq
