#include "stages/verify.h"

#include <fmt/format.h>

#include <cmath>
#include <vector>

#include "kernels/formats.h"
#include "kernels/nvfp4.h"

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

} // namespace shardq
