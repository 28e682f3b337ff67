// Symmetric per-channel INT8 (W8A8, seed 003; docs/formats.md "INT8"): one F32 scale per
// row, scale = amax(|row|) / 127, q = clamp(round_half_even(x / scale), -127, 127). The
// scalar functions here are the truth.
#pragma once

#include <cstdint>

namespace shardq {

struct Int8 {
  static constexpr int max_code = 127; // symmetric: -128 is never written
};

// One row's report terms: sum x^2 and sum (deq - x)^2 in fp64, added in element order.
struct Int8RowSums {
  double source_sq = 0.0;
  double error_sq = 0.0;
  bool all_zero = false; // every value 0: scale 1.0, codes 0 (ours: there is no amax rule)
};

// Returns the row's scale (F32, written to weight_scale[r, 0]) and writes `cols` codes.
// x / scale is an fp32 division (as torch's w / scale), rounded half to even.
// Precondition: finite x.
float quantize_row_int8_ref(const float* x, int cols, int8_t* codes, Int8RowSums* sums);

// out[i] = codes[i] * scale (fp32).
void dequantize_row_int8(const int8_t* codes, float scale, int cols, float* out);

} // namespace shardq
