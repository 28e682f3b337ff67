#include <algorithm>
#include <cmath>

#include "kernels/int8.h"

namespace shardq {

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
  double source_sq[Int8::sum_lanes] = {}, error_sq[Int8::sum_lanes] = {};
  for (int i = 0; i < cols; ++i) {
    // nearbyint rounds half to even in the default rounding mode. With a normal scale,
    // |x / scale| <= 127 * (1 + 2^-23) < 127.5; the clamp acts for a subnormal one only.
    const float q = std::clamp(std::nearbyint(x[i] / scale), -float(Int8::max_code), float(Int8::max_code));
    codes[i] = int8_t(q);
    const double error = double(q * scale) - double(x[i]);
    source_sq[i % Int8::sum_lanes] += double(x[i]) * double(x[i]);
    error_sq[i % Int8::sum_lanes] += error * error;
  }
  if (sums) *sums = {fold_int8_sum_lanes(source_sq), fold_int8_sum_lanes(error_sq), all_zero};
  return scale;
}

void dequantize_row_int8(const int8_t* codes, float scale, int cols, float* out) {
  for (int i = 0; i < cols; ++i) out[i] = float(codes[i]) * scale;
}

} // namespace shardq
