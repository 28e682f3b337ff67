// Rows of a quantized linear of the source, decoded exactly to fp32 (docs/formats.md
// "INT8"): FP8 E4M3 codes with one E8M0 scale per 32x32 block (scale row = weight row / 32),
// or DeepSeek's FP4 experts, E2M1 codes two per byte with one E8M0 scale per 32 values of
// a row. The W8A8 codecs re-encode them to INT8 per channel or to BF16.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "kernels/int8.h"

namespace shardq {

enum class LinearSource { fp8_block32, fp4_row32 };

struct LinearRows {
  LinearSource source = LinearSource::fp8_block32;
  std::string_view tensor, scale_tensor; // for messages: views of names that outlive the rows (the plan's)
  uint64_t first_row = 0;           // absolute row of row 0
  uint64_t rows = 0;
  int cols = 0;                     // values per row
  std::span<const uint8_t> codes;   // rows x row bytes
  std::span<const uint8_t> scales;  // the scale rows these rows use (fp8: from row first_row / 32)
};

// Throws StageError naming tensor, row and column at the first NaN code or NaN scale.
void check_linear_rows(const LinearRows& rows);
// The same check in parts, so that a codec can look at codes just before it uses them
// (while they are in cache): every scale, then the codes of chunk rows [first, first + count).
void check_linear_scales(const LinearRows& rows);
void check_linear_codes(const LinearRows& rows, uint64_t first, uint64_t count);
// For a chunk row r found to hold an infinite value (an INT8 scale or a sum of squares
// that came out infinite): throws StageError naming the first value that decodes to
// infinity (a code times a scale past fp32's range: no INT8 scale or BF16 value holds it).
[[noreturn]] void refuse_infinite_row(const LinearRows& rows, uint64_t r);

// Row r (0-based in the chunk) decoded exactly into out[cols].
void decode_linear_row(const LinearRows& rows, uint64_t r, float* out);

// Row r quantized to INT8 per channel straight from its codes (the SIMD kernels' fused
// decode): the bits of decode_linear_row + quantize_row_int8_ref. Returns the row's scale.
// `sums` null: the codes only (the kernels' faster paths). Precondition: check_linear_rows
// passed.
float quantize_linear_row_int8(const LinearRows& rows, uint64_t r, int8_t* codes, Int8RowSums* sums);
// Every row, codes only: codes[rows x cols] and scales[rows] as quantize_linear_row_int8
// with null sums gives them (a NaN scale for a row with a NaN code). FP4 rows go to the
// kernel all at once (quantize_rows_int8_from_fp4_simd: narrow rows share its tables).
void quantize_linear_rows_int8(const LinearRows& rows, int8_t* codes, float* scales);

// The W8A8 report measures its error figures on a fixed sample of each INT8 tensor's rows,
// those whose absolute row index is a multiple of kInt8ReportRowStride (docs/formats.md
// "INT8"): the report terms cost several times the codes, and a row in 16 of every tensor
// still gives each kind's figure from thousands of rows. The sample depends on the row
// index only, so it is the same for any rank count, chunking or schedule. `shardq verify`
// recomputes the figures over every row.
constexpr uint64_t kInt8ReportRowStride = 16;
inline bool is_int8_report_row(uint64_t row) { return row % kInt8ReportRowStride == 0; }
// How many of a tensor's `rows` the sample takes.
inline uint64_t int8_report_row_count(uint64_t rows) { return (rows + kInt8ReportRowStride - 1) / kInt8ReportRowStride; }

// Whether a quantized row was all zero: its scale is 1.0 and every code 0 (a row whose amax
// is 127 has scale 1.0 too, and codes of +-127).
bool is_all_zero_int8_row(float scale, const int8_t* codes, int cols);

} // namespace shardq
