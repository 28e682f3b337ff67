#include <algorithm>
#include <cmath>

#include "kernels/int8.h"

namespace shardq {

int Int8::sum_exponent(float scale) { return std::max(std::ilogb(scale), -126); }

double fold_int8_sum_lanes(const double* lanes) {
  double folded[Int8::sum_lanes];
  std::copy(lanes, lanes + Int8::sum_lanes, folded);
  for (int half = Int8::sum_lanes / 2; half >= 1; half /= 2)
    for (int i = 0; i < half; ++i) folded[i] = folded[i] + folded[i + half];
  return folded[0];
}

float quantize_row_int8_ref(const float* x, int cols, int8_t* codes, Int8RowSums* sums) {
  float amax = 0.0f;
  for (int i = 0; i < cols; ++i) amax = std::max(amax, std::fabs(x[i]));
  const bool all_zero = amax == 0.0f;
  const float scale = all_zero ? 1.0f : amax / float(Int8::max_code);
  const int k = Int8::sum_exponent(scale);
  const float unit = std::ldexp(1.0f, -k), m = scale * unit;
  double source_sq[Int8::sum_lanes] = {}, error_sq[Int8::sum_lanes] = {};
  for (int block = 0; block < cols; block += Int8::sum_block) {
    float block_source[Int8::sum_lanes] = {}, block_error[Int8::sum_lanes] = {};
    for (int i = block; i < std::min(cols, block + Int8::sum_block); ++i) {
      // nearbyint rounds half to even in the default rounding mode. With a normal scale,
      // |x / scale| <= 127 * (1 + 2^-23) < 127.5; the clamp acts for a subnormal one only.
      const float q = std::clamp(std::nearbyint(x[i] / scale), -float(Int8::max_code), float(Int8::max_code));
      codes[i] = int8_t(q);
      const float source = x[i] * unit, error = q * m - source; // x and deq - x, times 2^-k
      const int lane = i % Int8::sum_lanes;
      block_source[lane] = std::fma(source, source, block_source[lane]);
      block_error[lane] = std::fma(error, error, block_error[lane]);
    }
    for (int lane = 0; lane < Int8::sum_lanes; ++lane) {
      source_sq[lane] += double(block_source[lane]);
      error_sq[lane] += double(block_error[lane]);
    }
  }
  if (sums) {
    *sums = {std::ldexp(fold_int8_sum_lanes(source_sq), 2 * k), std::ldexp(fold_int8_sum_lanes(error_sq), 2 * k), all_zero};
  }
  return scale;
}

void dequantize_row_int8(const int8_t* codes, float scale, int cols, float* out) {
  for (int i = 0; i < cols; ++i) out[i] = float(codes[i]) * scale;
}

} // namespace shardq
