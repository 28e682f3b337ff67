#include <algorithm>
#include <cmath>

#include "kernels/int8.h"

namespace shardq {

float quantize_row_int8_ref(const float* x, int cols, int8_t* codes, Int8RowSums* sums) {
  float amax = 0.0f;
  for (int i = 0; i < cols; ++i) amax = std::max(amax, std::fabs(x[i]));
  const bool all_zero = amax == 0.0f;
  const float scale = all_zero ? 1.0f : amax / float(Int8::max_code);
  double source_sq = 0.0, error_sq = 0.0;
  for (int i = 0; i < cols; ++i) {
    // nearbyint rounds half to even in the default rounding mode; |x / scale| <= 127 up to
    // one rounding of the division, so the clamp only catches that last ulp.
    const float q = std::clamp(std::nearbyint(x[i] / scale), -float(Int8::max_code), float(Int8::max_code));
    codes[i] = int8_t(q);
    const double error = double(q * scale) - double(x[i]);
    source_sq += double(x[i]) * double(x[i]);
    error_sq += error * error;
  }
  if (sums) *sums = {source_sq, error_sq, all_zero};
  return scale;
}

void dequantize_row_int8(const int8_t* codes, float scale, int cols, float* out) {
  for (int i = 0; i < cols; ++i) out[i] = float(codes[i]) * scale;
}

} // namespace shardq
