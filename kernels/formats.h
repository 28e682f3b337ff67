// Every numeric format shardq reads or writes, described once (docs/formats.md).
// The scalar functions here are the truth; SIMD and CUDA paths are tested against them.
#pragma once

#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string_view>

namespace shardq {

// ---------------------------------------------------------------- E2M1 (FP4)
// sign | 2 exponent bits | 1 mantissa bit, bias 1; no inf, no NaN.
struct E2M1 {
  static constexpr int bits = 4;
  static constexpr float max = 6.0f;
  static constexpr std::array<float, 16> values = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                                   -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
  static_assert(values[7] == max);
};

enum class E2M1Rounding {
  nearest_even,       // NVFP4 (ModelOpt, PTX cvt.rn): 0.25->0, 0.75->1, 2.5->2, 5->4
  nearest_toward_zero // Engram MXFP4 (seed 001): 0.75->0.5, 1.75->1.5, 3.5->3, 5->4
};

// Magnitude index 0..7 of |a| (a >= 0, not NaN), saturating at 6.
constexpr uint8_t e2m1_index(float a, E2M1Rounding mode) {
  if (mode == E2M1Rounding::nearest_even) {
    return a <= 0.25f ? 0 : a < 0.75f ? 1 : a <= 1.25f ? 2 : a < 1.75f ? 3
         : a <= 2.5f  ? 4 : a < 3.5f  ? 5 : a <= 5.0f  ? 6 : 7;
  }
  return a <= 0.25f ? 0 : a <= 0.75f ? 1 : a <= 1.25f ? 2 : a <= 1.75f ? 3
       : a <= 2.5f  ? 4 : a <= 3.5f  ? 5 : a <= 5.0f  ? 6 : 7;
}

// Nibble = sign << 3 | index, sign = (x < 0): a small negative that rounds to zero is
// 0x8, while -0.0 gives 0x0 (docs/formats.md "Element rounding").
constexpr uint8_t e2m1_from_float(float x, E2M1Rounding mode = E2M1Rounding::nearest_even) {
  const uint8_t sign = x < 0.0f ? 0x8 : 0x0;
  return sign | e2m1_index(x < 0.0f ? -x : x, mode);
}

constexpr float e2m1_to_float(uint8_t nibble) { return E2M1::values[nibble & 0xF]; }

// Two E2M1 codes per byte, low nibble = even element (ModelOpt, PTX e2m1x2, CUTLASS).
constexpr uint8_t pack_e2m1x2(uint8_t even, uint8_t odd) { return uint8_t((odd << 4) | (even & 0xF)); }

// ---------------------------------------------------------------- E4M3FN (FP8)
// bias 7, max 448 (0x7E), NaN 0x7F/0xFF, no infinity; subnormals m * 2^-9.
struct E4M3 {
  static constexpr int bias = 7;
  static constexpr uint8_t max_code = 0x7E;
  static constexpr float max = 448.0f;
  static constexpr float min_subnormal = 0x1p-9f;
  static constexpr float min_normal = 0x1p-6f;
  static constexpr bool is_nan(uint8_t code) { return (code & 0x7F) == 0x7F; }
};

constexpr float e4m3_to_float(uint8_t code) {
  const int exponent = (code >> 3) & 0xF;
  const int mantissa = code & 0x7;
  if (E4M3::is_nan(code)) return std::numeric_limits<float>::quiet_NaN();
  // Normal codes map straight onto fp32 fields (no libm call: this sits in hot loops).
  const float magnitude = exponent == 0 ? float(mantissa) * E4M3::min_subnormal
                                        : std::bit_cast<float>(uint32_t(exponent - E4M3::bias + 127) << 23 |
                                                               uint32_t(mantissa) << 20);
  return (code & 0x80) ? -magnitude : magnitude;
}

// fp32 -> E4M3, round to nearest even, saturating to +-448 (the plain cast would turn
// |x| >= 464 into NaN); NaN -> 0x7F with the input's sign bit.
uint8_t e4m3_from_float(float x);

// ---------------------------------------------------------------- E8M0 (UE8M0)
// value 2^(byte - 127); 0xFF = NaN; no zero and no sign.
struct E8M0 {
  static constexpr int bias = 127;
  static constexpr uint8_t nan_code = 0xFF;
  static constexpr uint8_t max_code = 0xFE;
};

// Built from the bits (2^-127 is the fp32 subnormal 0x00400000, the rest are normals
// whose exponent field is the code): hot loops call this per 32 values, ldexp was a call.
constexpr float e8m0_to_float(uint8_t code) {
  if (code == E8M0::nan_code) return std::numeric_limits<float>::quiet_NaN();
  if (code == 0) return std::bit_cast<float>(uint32_t{0x00400000});
  return std::bit_cast<float>(uint32_t(code) << 23);
}

enum class E8M0Rounding { toward_zero, toward_pos_inf };

// fp32 -> E8M0 for the magnitude of x, saturating to [2^-127, 2^127]; NaN -> 0xFF.
uint8_t e8m0_from_float(float x, E8M0Rounding mode);

// ---------------------------------------------------------------- BF16
constexpr float bf16_to_float(uint16_t bits) { return std::bit_cast<float>(uint32_t(bits) << 16); }

// Top 16 bits of fp32, round to nearest even; NaN stays a quiet NaN.
constexpr uint16_t bf16_from_float(float x) {
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return uint16_t((bits >> 16) | 0x40);
  const uint32_t rounding = 0x7FFFu + ((bits >> 16) & 1u);
  return uint16_t((bits + rounding) >> 16);
}

// ---------------------------------------------------------------- block formats
// One row per quantized format, like ggml's type_traits: tests and dispatch loop over it.
enum class ScaleDtype { none, e4m3, e8m0, f32 };

enum class BlockFormat { nvfp4, mxfp4, fp8_block32, int8_channel };

struct BlockFormatTraits {
  BlockFormat format;
  std::string_view name;
  int block_size;         // values per scale (0 = one scale per row)
  int bits_per_value;     // code bits
  ScaleDtype scale_dtype; // dtype of the per-block scale
  bool has_global_scale;  // a per-tensor fp32 multiplier (NVFP4 weight_scale_2)
  int bytes_per_block() const { return block_size * bits_per_value / 8; }
};

inline constexpr std::array<BlockFormatTraits, 4> block_format_traits = {{
    {BlockFormat::nvfp4, "nvfp4", 16, 4, ScaleDtype::e4m3, true},
    {BlockFormat::mxfp4, "mxfp4", 32, 4, ScaleDtype::e8m0, false},
    {BlockFormat::fp8_block32, "fp8-e4m3-ue8m0-32", 32, 8, ScaleDtype::e8m0, false},
    {BlockFormat::int8_channel, "int8", 0, 8, ScaleDtype::f32, false},
}};

constexpr const BlockFormatTraits& traits(BlockFormat format) { return block_format_traits[size_t(format)]; }

// NVFP4 constants (ModelOpt convention).
struct Nvfp4 {
  static constexpr int block = 16;
  static constexpr float min_scale = E4M3::min_subnormal; // clamp floor of a block scale
  static constexpr float max_scale = E4M3::max;
  // global = amax / (6 * 448): the largest block scale lands on E4M3's max.
  static float global_scale(float amax) { return amax > 0.0f ? amax / (E2M1::max * E4M3::max) : 1.0f; }
};

} // namespace shardq
