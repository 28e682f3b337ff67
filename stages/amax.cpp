#include "stages/amax.h"

#include <algorithm>
#include <cmath>

#include "kernels/formats.h"

namespace shardq {

float amax_fp8_chunk(const Fp8RowChunk& chunk) {
  check_fp8_chunk(chunk);
  // |e4m3 * 2^k| is largest where the code magnitude is: take the largest code magnitude
  // of each 32-block and scale it once.
  const int scale_cols = chunk.cols / 32;
  float amax = 0.0f;
  for (uint64_t r = 0; r < chunk.rows; ++r) {
    const uint8_t* codes = chunk.codes.data() + r * chunk.cols;
    const uint8_t* scales = chunk.scales.data() + r * scale_cols;
    for (int s = 0; s < scale_cols; ++s) {
      uint8_t largest = 0;
      for (int i = 0; i < 32; ++i) largest = std::max<uint8_t>(largest, codes[s * 32 + i] & 0x7F);
      amax = std::max(amax, e4m3_to_float(largest) * e8m0_to_float(scales[s]));
    }
  }
  return amax;
}

} // namespace shardq
