#include <bit>
#include <cmath>

#include "kernels/int8.h"

namespace shardq {

// 2^e as a double (-1022 <= e <= 1023): a product with it is exact here.
static double power_of_two(int e) { return std::bit_cast<double>(uint64_t(1023 + e) << 52); }

Int8RowSums Int8Row::figures(uint64_t source_total, uint64_t error_total, bool all_zero) const {
  return {double(source_total) * power_of_two(2 * (k - Int8::source_shift)),
          double(error_total) * power_of_two(2 * (k - Int8::error_shift)), all_zero};
}

float quantize_row_int8_ref(const float* x, int cols, int8_t* codes, Int8RowSums* sums) {
  float amax = 0.0f;
  for (int i = 0; i < cols; ++i) amax = std::fmax(amax, std::fabs(x[i]));
  const Int8Row row = Int8Row::of_amax(amax);
  uint64_t source_sq = 0, error_sq = 0;
  for (int i = 0; i < cols; ++i) {
    const Int8Element element = quantize_int8_element(x[i], row);
    codes[i] = element.code;
    source_sq += element.source_term;
    error_sq += element.error_term;
  }
  if (sums) *sums = row.figures(source_sq, error_sq, amax == 0.0f);
  return row.scale;
}

void dequantize_row_int8(const int8_t* codes, float scale, int cols, float* out) {
  for (int i = 0; i < cols; ++i) out[i] = float(codes[i]) * scale;
}

} // namespace shardq
