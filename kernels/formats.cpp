#include "kernels/formats.h"

namespace shardq {

uint8_t e4m3_from_float(float x) {
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  const uint8_t sign = uint8_t((bits >> 24) & 0x80);
  const uint32_t magnitude_bits = bits & 0x7FFFFFFFu;
  if (magnitude_bits > 0x7F800000u) return sign | 0x7F;
  const float a = std::bit_cast<float>(magnitude_bits);
  if (a >= E4M3::max) return sign | E4M3::max_code;
  if (a < E4M3::min_normal) {
    // Subnormal range: a * 2^9 is exact, so one RNE rounding gives the mantissa; 8 is
    // exactly the smallest normal's code 0x08.
    return sign | uint8_t(std::nearbyint(a * 512.0f));
  }
  int exponent = int(magnitude_bits >> 23) - 127 + E4M3::bias;
  const uint32_t mantissa = magnitude_bits & 0x7FFFFFu;
  uint32_t kept = mantissa >> 20;
  const uint32_t dropped = mantissa & 0xFFFFFu;
  if (dropped > 0x80000u || (dropped == 0x80000u && (kept & 1u))) ++kept;
  if (kept == 8) {
    kept = 0;
    ++exponent;
  }
  const uint32_t code = uint32_t(exponent) << 3 | kept;
  return sign | uint8_t(code > E4M3::max_code ? E4M3::max_code : code);
}

uint8_t e8m0_from_float(float x, E8M0Rounding mode) {
  const uint32_t bits = std::bit_cast<uint32_t>(x) & 0x7FFFFFFFu;
  if (bits > 0x7F800000u) return E8M0::nan_code;
  if (bits == 0x7F800000u) return E8M0::max_code;
  const uint32_t biased = bits >> 23;
  const uint32_t mantissa = bits & 0x7FFFFFu;
  uint32_t code = biased;
  if (biased == 0) {
    // fp32 subnormal: below 2^-126; only 2^-127 (code 0) and 2^-126 (code 1) are near.
    code = (mode == E8M0Rounding::toward_pos_inf && mantissa > 0x400000u) ? 1 : 0;
  } else if (mode == E8M0Rounding::toward_pos_inf && mantissa != 0) {
    ++code;
  }
  return uint8_t(code > E8M0::max_code ? E8M0::max_code : code);
}

} // namespace shardq
