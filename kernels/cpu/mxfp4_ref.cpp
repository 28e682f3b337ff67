#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/mxfp4.h"
#include "kernels/nvfp4.h"

namespace shardq {

// ---------------------------------------------------------------- quantizer (ModelOpt)

uint8_t mxfp4_scale_code(float amax) {
  if (std::isnan(amax)) return E8M0::nan_code;
  // ModelOpt (modelopt/torch/quantization/qtensor/mxfp4_tensor.py) on fp32 tensors:
  //   descale = amax / 6;  e = ceil(max(log2(descale), -127));  byte = e + 127.
  // torch's fp32 log2 behaves as log2 rounded once to fp32 wherever the ceil can tell:
  // at 2^k it is exactly k, and just above 2^k it is k + log2(m) rounded by one fp32 add,
  // never near a tie (checked against torch for every fp32 amax). The double log2 rounded
  // to float is that value. Its fp32 rounding, not the exact log2, is what decides the
  // ceil: log2(16 * (1 + 2^-23)) rounds to 4.0f, so that block's byte is 131, not 132.
  const float descale = amax / E2M1::max;
  const float log2_descale = float(std::log2(double(descale)));
  const float exponent = std::ceil(std::max(log2_descale, -float(E8M0::bias)));
  return uint8_t(std::min(exponent, float(E8M0::max_code - E8M0::bias)) + float(E8M0::bias));
}

static float dequantize_mxfp4(uint8_t nibble, uint8_t scale_code) {
  return e2m1_to_float(nibble) * e8m0_to_float(scale_code);
}

uint8_t quantize_block_mxfp4(const float* x, uint8_t* nibbles) {
  float amax = 0.0f;
  for (int i = 0; i < Mxfp4::block; ++i) amax = std::max(amax, std::fabs(x[i]));
  const uint8_t code = mxfp4_scale_code(amax);
  // x / 2^s and x * 2^-s are the same fp32 rounding of one real number (2^-s is exact for
  // every byte 0..254), subnormal quotients included; the product is cheaper.
  const float inverse = e8m0_to_float(uint8_t(E8M0::max_code - code));
  for (int i = 0; i < Mxfp4::block; ++i) nibbles[i] = mxfp4_nibble(x[i] * inverse);
  return code;
}

// 32 terms folded in halves: t[i] + t[i+16], then the 16-term fold every NVFP4 backend uses,
// so a SIMD or CUDA port can sum in registers and still match bit for bit.
static double sum_block32_fp64(const double* terms) {
  double halves[Nvfp4::block];
  for (int i = 0; i < Nvfp4::block; ++i) halves[i] = terms[i] + terms[i + Nvfp4::block];
  return sum_block_fp64(halves);
}

static void add_block_sums(const float* x, const uint8_t* nibbles, uint8_t scale_code, Mxfp4RowSums& sums) {
  double source[Mxfp4::block], dequant[Mxfp4::block], error[Mxfp4::block];
  for (int i = 0; i < Mxfp4::block; ++i) {
    const double value = x[i], deq = dequantize_mxfp4(nibbles[i], scale_code);
    source[i] = value * value; // exact: a 24-bit mantissa squared fits in 53 bits
    dequant[i] = deq * deq;
    error[i] = (deq - value) * (deq - value);
  }
  sums.source_sq += sum_block32_fp64(source);
  sums.dequant_sq += sum_block32_fp64(dequant);
  sums.error_sq += sum_block32_fp64(error);
}

Mxfp4RowSums quantize_row_mxfp4_ref(const float* x, int cols, uint8_t* packed, uint8_t* scales) {
  Mxfp4RowSums sums;
  uint8_t nibbles[Mxfp4::block];
  for (int b = 0; b < cols / Mxfp4::block; ++b) {
    const float* block = x + b * Mxfp4::block;
    scales[b] = quantize_block_mxfp4(block, nibbles);
    uint8_t* bytes = packed + b * Mxfp4::bytes_per_block;
    for (int i = 0; i < Mxfp4::block; i += 2) bytes[i / 2] = pack_e2m1x2(nibbles[i], nibbles[i + 1]);
    add_block_sums(block, nibbles, scales[b], sums);
  }
  return sums;
}

void dequantize_row_mxfp4(const uint8_t* packed, const uint8_t* scales, int cols, float* out) {
  for (int i = 0; i < cols; i += 2) {
    const uint8_t byte = packed[i / 2], scale = scales[i / Mxfp4::block];
    out[i] = dequantize_mxfp4(byte & 0xF, scale);
    out[i + 1] = dequantize_mxfp4(byte >> 4, scale);
  }
}

// ---------------------------------------------------------------- MXFP4 -> NVFP4 transcode

namespace {

// The largest block scale becomes 2^8: the largest power of two E4M3 holds (448 = 1.75 * 2^8).
constexpr int kTranscodeHeadroom = 8;
// Block exponents d = e - emax + 8 that E4M3 holds exactly: 2^-9 (smallest subnormal) to 2^8.
constexpr int kMinExactExponent = -9;
constexpr int kMaxExactExponent = 8;
// Codes of 2^d are constant outside this window (0x00 below, 0x7E above).
constexpr int kTableMin = -16;
constexpr int kTableMax = 16;

int transcode_exponent(uint8_t e8m0, uint8_t emax) { return int(e8m0) - int(emax) + kTranscodeHeadroom; }

// e4m3_from_float(2^d) for d in the window, built once: the E4M3 rule stays in formats.cpp.
const std::array<uint8_t, kTableMax - kTableMin + 1>& power_of_two_e4m3_codes() {
  static const auto table = [] {
    std::array<uint8_t, kTableMax - kTableMin + 1> codes{};
    for (int d = kTableMin; d <= kTableMax; ++d) codes[size_t(d - kTableMin)] = e4m3_from_float(std::ldexp(1.0f, d));
    return codes;
  }();
  return table;
}

uint8_t scale_code_of_exponent(const std::array<uint8_t, kTableMax - kTableMin + 1>& table, int d) {
  return table[size_t(std::clamp(d, kTableMin, kTableMax) - kTableMin)];
}

// 16 bytes = 32 nibbles; 0x0 and 0x8 (-0) are both zero, so only magnitude bits count.
bool block_codes_all_zero(const uint8_t* codes) {
  uint64_t low, high;
  std::memcpy(&low, codes, sizeof low);
  std::memcpy(&high, codes + sizeof low, sizeof high);
  return ((low | high) & 0x7777777777777777ull) == 0;
}

} // namespace

size_t find_e8m0_nan(const uint8_t* scales, size_t n) {
  return size_t(std::find(scales, scales + n, E8M0::nan_code) - scales);
}

uint8_t e8m0_max_of(const uint8_t* scales, size_t n) { return n == 0 ? 0 : *std::max_element(scales, scales + n); }

float nvfp4_global_scale_from_e8m0_max(uint8_t emax) {
  if (emax == E8M0::nan_code) return std::numeric_limits<float>::quiet_NaN();
  return std::ldexp(1.0f, int(emax) - E8M0::bias - kTranscodeHeadroom); // exact, down to 2^-135
}

uint8_t nvfp4_scale_code_from_e8m0(uint8_t e8m0, uint8_t emax) {
  return scale_code_of_exponent(power_of_two_e4m3_codes(), transcode_exponent(e8m0, emax));
}

uint64_t transcode_row_mxfp4_to_nvfp4(const uint8_t* codes, const uint8_t* e8m0_scales, int cols, uint8_t emax,
                                      uint8_t* e4m3_scales) {
  const auto& table = power_of_two_e4m3_codes();
  uint64_t inexact_blocks = 0;
  for (int b = 0; b < cols / Mxfp4::block; ++b) {
    const int d = transcode_exponent(e8m0_scales[b], emax);
    e4m3_scales[2 * b] = e4m3_scales[2 * b + 1] = scale_code_of_exponent(table, d);
    // Codes are read only for blocks out of range: the common case touches scales alone.
    if ((d < kMinExactExponent || d > kMaxExactExponent) &&
        !block_codes_all_zero(codes + size_t(b) * Mxfp4::bytes_per_block))
      ++inexact_blocks;
  }
  return inexact_blocks;
}

Mxfp4ToNvfp4::Mxfp4ToNvfp4(uint8_t emax) {
  for (int e = 0; e < 256; ++e) {
    const int d = transcode_exponent(uint8_t(e), emax);
    code_[size_t(e)] = nvfp4_scale_code_from_e8m0(uint8_t(e), emax);
    exact_[size_t(e)] = d >= kMinExactExponent && d <= kMaxExactExponent;
  }
}

uint64_t Mxfp4ToNvfp4::transcode_row(const uint8_t* codes, const uint8_t* e8m0_scales, int cols,
                                     uint8_t* e4m3_scales) const {
  uint64_t inexact_blocks = 0;
  for (int b = 0; b < cols / Mxfp4::block; ++b) {
    const uint8_t e = e8m0_scales[b];
    e4m3_scales[2 * b] = e4m3_scales[2 * b + 1] = code_[e];
    if (!exact_[e] && !block_codes_all_zero(codes + size_t(b) * Mxfp4::bytes_per_block)) ++inexact_blocks;
  }
  return inexact_blocks;
}

} // namespace shardq
