#include "stages/verify.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <vector>

#include "kernels/formats.h"
#include "kernels/int8.h"
#include "kernels/mxfp4.h"
#include "kernels/nvfp4.h"
#include "stages/linear_rows.h"

namespace shardq {
namespace {

// Largest error round-to-nearest can leave at scaled magnitude |x / (s g)|: half the E2M1
// step there, or the clipped excess above 6.
double rtn_bound(double scaled) {
  if (scaled > 6.0) return scaled - 6.0;
  return scaled <= 2.0 ? 0.25 : scaled <= 4.0 ? 0.5 : 1.0;
}

} // namespace

void verify_nvfp4_rows(const Fp8RowChunk& source, const uint8_t* packed, const uint8_t* scales, float global_scale,
                       bool check_bound, const std::string& output_tensor, VerifyCounts& counts) {
  const int cols = source.cols;
  std::vector<float> x(cols), deq(cols);
  for (uint64_t r = 0; r < source.rows; ++r) {
    const uint64_t row = source.first_row + r;
    const uint8_t* row_scales = scales + r * (cols / Nvfp4::block);
    for (int b = 0; b < cols / Nvfp4::block; ++b) {
      if (E4M3::is_nan(row_scales[b]) && counts.nan_scales++ == 0 && counts.first_problem.empty()) {
        counts.first_problem = fmt::format("{}: row {} block {}: scale code 0x{:02X} is NaN", output_tensor, row, b, row_scales[b]);
      }
    }
    dequantize_chunk_row(source, r, x.data());
    dequantize_row_nvfp4_simd(packed + r * (cols / 2), row_scales, cols, global_scale, deq.data());
    BlockStats row_sums; // the report's rule, so a verified output reproduces its figure exactly
    add_row_report_sums_nvfp4_simd(x.data(), deq.data(), cols, row_sums);
    for (int i = 0; check_bound && i < cols; ++i) {
      const double diff = double(deq[i]) - double(x[i]);
      const double unit = double(e4m3_to_float(row_scales[i / Nvfp4::block])) * double(global_scale);
      // 1e-5 relative covers fp32 rounding of x / (s g) at a midpoint and of the decoded value.
      const double allowed = rtn_bound(std::fabs(double(x[i])) / unit) * unit * (1.0 + 1e-5);
      if (std::fabs(diff) > allowed && counts.elements_out_of_bound++ == 0 && counts.first_problem.empty()) {
        counts.first_problem = fmt::format("{}: row {} column {}: {} decodes to {}, off by {:.6g}; at most {:.6g} expected",
                                           output_tensor, row, i, x[i], deq[i], std::fabs(diff), allowed);
      }
    }
    counts.sums.add_row(row_sums);
    ++counts.rows;
  }
}

void verify_mxfp4_rows(const Fp8RowChunk& source, const uint8_t* packed, const uint8_t* scales,
                       const std::string& output_tensor, VerifyCounts& counts) {
  const int cols = source.cols, packed_cols = cols / 2, scale_cols = cols / Mxfp4::block;
  std::vector<float> x(size_t(cols), 0.0f);
  std::vector<float> deq(size_t(cols), 0.0f);
  std::vector<uint8_t> expected_packed(static_cast<size_t>(packed_cols)), expected_scales(static_cast<size_t>(scale_cols));
  for (uint64_t r = 0; r < source.rows; ++r) {
    dequantize_chunk_row(source, r, x.data());
    quantize_row_mxfp4_ref(x.data(), cols, expected_packed.data(), expected_scales.data());
    const uint8_t* row_packed = packed + r * uint64_t(packed_cols);
    const uint8_t* row_scales = scales + r * uint64_t(scale_cols);
    const bool same = std::equal(expected_packed.begin(), expected_packed.end(), row_packed) &&
                      std::equal(expected_scales.begin(), expected_scales.end(), row_scales);
    if (!same && counts.elements_out_of_bound++ == 0 && counts.first_problem.empty()) {
      counts.first_problem = fmt::format("{}: row {}: bytes differ from the MXFP4 quantizer's", output_tensor,
                                         source.first_row + r);
    }
    // The output's own decoding, for the cosine (equal to the quantizer's when `same`).
    dequantize_row_mxfp4(row_packed, row_scales, cols, deq.data());
    double x_sq = 0, deq_sq = 0, error_sq = 0;
    for (int i = 0; i < cols; ++i) {
      x_sq += double(x[size_t(i)]) * double(x[size_t(i)]);
      deq_sq += double(deq[size_t(i)]) * double(deq[size_t(i)]);
      error_sq += (double(deq[size_t(i)]) - double(x[size_t(i)])) * (double(deq[size_t(i)]) - double(x[size_t(i)]));
    }
    counts.sums.reference_sq.add(x_sq);
    counts.sums.output_sq.add(deq_sq);
    counts.sums.error_sq.add(error_sq);
    ++counts.sums.rows;
    ++counts.rows;
  }
}

void verify_transcode_rows(const uint8_t* source_codes, const uint8_t* source_scales, const uint8_t* codes,
                           const uint8_t* scales, float weight_scale_2, uint64_t first_row, uint64_t rows, int cols,
                           const std::string& output_tensor, VerifyCounts& counts) {
  for (uint64_t r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) {
      const uint64_t at = r * uint64_t(cols) + uint64_t(c);
      const uint8_t source_nibble = (source_codes[at / 2] >> (4 * (c % 2))) & 0xF;
      const uint8_t nibble = (codes[at / 2] >> (4 * (c % 2))) & 0xF;
      const float expected = e2m1_to_float(source_nibble) * e8m0_to_float(source_scales[at / Mxfp4::block]);
      const float got = e2m1_to_float(nibble) * e4m3_to_float(scales[at / Nvfp4::block]) * weight_scale_2;
      if (std::bit_cast<uint32_t>(expected) == std::bit_cast<uint32_t>(got)) continue;
      if (counts.elements_out_of_bound++ == 0 && counts.first_problem.empty()) {
        counts.first_problem = fmt::format("{}: row {} column {}: source {} but output {}", output_tensor, first_row + r, c,
                                           expected, got);
      }
    }
  }
  counts.rows += rows;
}

namespace {

void note_problem(VerifyCounts& counts, const std::string& problem) {
  if (counts.elements_out_of_bound++ == 0 && counts.first_problem.empty()) counts.first_problem = problem;
}

} // namespace

void verify_int8_rows(const LinearRows& source, const int8_t* codes, const float* scales,
                      const std::string& output_tensor, VerifyCounts& counts) {
  const int cols = source.cols;
  std::vector<float> x(size_t(cols), 0.0f);
  std::vector<int8_t> report_codes(static_cast<size_t>(cols));
  for (uint64_t r = 0; r < source.rows; ++r) {
    const uint64_t row = source.first_row + r;
    decode_linear_row(source, r, x.data());
    const int8_t* q = codes + r * uint64_t(cols);
    const float scale = scales[r];
    float amax = 0.0f;
    for (float v : x) amax = std::max(amax, std::fabs(v));
    const float expected_scale = amax == 0.0f ? 1.0f : amax / float(Int8::max_code);
    if (std::bit_cast<uint32_t>(scale) != std::bit_cast<uint32_t>(expected_scale)) {
      note_problem(counts, fmt::format("{}: row {}: weight_scale {} but amax {} / 127 = {}", output_tensor, row, scale,
                                       amax, expected_scale));
    }
    int largest = 0;
    double source_sq = 0, error_sq = 0;
    for (int c = 0; c < cols; ++c) {
      largest = std::max(largest, std::abs(int(q[c])));
      const double value = double(q[c]) * double(scale), error = value - double(x[size_t(c)]);
      source_sq += double(x[size_t(c)]) * double(x[size_t(c)]);
      error_sq += error * error;
      // Half a step, plus one fp32 rounding of x / scale (its ulp is at most 2^-17 for
      // |x / scale| <= 127): a quotient just under a midpoint can round onto it, then to even.
      if (!(std::fabs(error) <= double(scale) * (0.5 + 0x1p-16)) || q[c] == -128) {
        note_problem(counts, fmt::format("{}: row {} column {}: {} x {} = {} for source {}; half a step is {}",
                                         output_tensor, row, c, int(q[c]), scale, value, x[size_t(c)], scale / 2));
      }
    }
    const bool zero_row = std::all_of(x.begin(), x.end(), [](float v) { return v == 0.0f; });
    if (zero_row ? (scale != 1.0f || largest != 0) : largest != Int8::max_code) {
      note_problem(counts, fmt::format("{}: row {}: max |q| is {} with scale {}; {} expected", output_tensor, row, largest,
                                       scale, zero_row ? "0 with scale 1 (all-zero row)" : "127"));
    }
    // The report's figures by its rule (encode_int8): all-zero rows counted, and on the
    // sample of rows the integer terms of the scalar reference (Int8RowSums), not the exact
    // sums above, which differ from them by design.
    ++counts.sums.rows;
    ++counts.sums.blocks;
    counts.sums.zero_blocks += zero_row ? 1 : 0;
    if (is_int8_report_row(row)) {
      Int8RowSums report_sums;
      quantize_row_int8_ref(x.data(), cols, report_codes.data(), &report_sums);
      counts.sums.reference_sq.add(report_sums.source_sq);
      counts.sums.error_sq.add(report_sums.error_sq);
    }
    ++counts.rows;
  }
}

void verify_bf16_rows(const LinearRows& source, const uint16_t* values, const std::string& output_tensor,
                      VerifyCounts& counts) {
  const int cols = source.cols;
  std::vector<float> x(size_t(cols), 0.0f);
  for (uint64_t r = 0; r < source.rows; ++r) {
    decode_linear_row(source, r, x.data());
    double source_sq = 0, error_sq = 0;
    for (int c = 0; c < cols; ++c) {
      const uint16_t expected = bf16_from_float(x[size_t(c)]), got = values[r * uint64_t(cols) + uint64_t(c)];
      if (got != expected) {
        note_problem(counts, fmt::format("{}: row {} column {}: BF16 0x{:04X}, the source {} rounds to 0x{:04X}",
                                         output_tensor, source.first_row + r, c, got, x[size_t(c)], expected));
      }
      const double error = double(bf16_to_float(got)) - double(x[size_t(c)]);
      source_sq += double(x[size_t(c)]) * double(x[size_t(c)]);
      error_sq += error * error;
    }
    ++counts.sums.rows;
    counts.sums.reference_sq.add(source_sq);
    counts.sums.error_sq.add(error_sq);
    ++counts.rows;
  }
}

} // namespace shardq
