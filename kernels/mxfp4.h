// MXFP4 row kernels: the Engram quantizer (NVIDIA ModelOpt's MXFP4QTensor.quantize with
// block_size 32, byte for byte), its dequantizer, and the lossless MXFP4 -> NVFP4 transcode
// of routed-expert block scales. The scalar functions here are the truth.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "kernels/formats.h"

namespace shardq {

struct Mxfp4 {
  static constexpr int block = traits(BlockFormat::mxfp4).block_size; // 32
  static constexpr int bytes_per_block = block * traits(BlockFormat::mxfp4).bits_per_value / 8; // 16
};

// ---------------------------------------------------------------- quantizer (ModelOpt)

// E8M0 byte of a block's scale as ModelOpt computes it in fp32:
//   127 + ceil(max(log2f(amax / 6), -127)).
// This is RCEIL (the smallest power of two >= amax / 6) except where the fp32 log2 of
// 2^k * (1 + tiny) rounds down to k (k >= 4 or k <= -5): then the byte is one lower and
// the block's largest values exceed 6 * scale and saturate to 6. An all-zero block gives 0
// (log2(0) = -inf, clamped to -127). Finite amax gives at most 253; the clamp to [0, 254]
// only guards infinities; NaN gives 0xFF.
// amax / 6 is divided, as torch does on CPU (equal to ModelOpt 0.47 there for every fp32
// amax). torch on CUDA multiplies by the fp32 reciprocal of 6 instead, which gives a byte one
// higher for 104 of the 2^31 finite amax values, none of them an FP8-sourced block maximum.
uint8_t mxfp4_scale_code(float amax);

// Nibble of one value already divided by its block scale (ModelOpt's cast_fp4): magnitude
// = number of E2M1 midpoints strictly below |v| (ties toward zero, saturating at 6); sign
// bit = (2 - sign(v)) // 2, which is 1 for v < 0 AND for v == +-0. So an exact zero (or a
// value whose quotient underflows to zero) is 0x8, a tiny positive 0x0, a tiny negative 0x8.
// For non-NaN values this differs from e2m1_from_float only in the sign of zero.
constexpr uint8_t mxfp4_nibble(float scaled) {
  const uint8_t sign = scaled > 0.0f ? 0x0 : 0x8;
  return sign | e2m1_index(scaled < 0.0f ? -scaled : scaled, E2M1Rounding::nearest_toward_zero);
}

// One block of 32: returns its scale byte and writes 32 unpacked nibbles. Each value is
// x / 2^(byte - 127) in fp32 (ModelOpt divides by exp2 of the exponent; computed as a
// product with the exact inverse power of two, which rounds identically).
uint8_t quantize_block_mxfp4(const float* x, uint8_t* nibbles);

// Report terms of one row against its source: inputs of a cosine and a relative error.
// Every term is fp64 from fp32 values; a block's 32 terms are summed by folding in halves
// (t[i] + t[i+16], then sum_block_fp64's 16-term fold), blocks added in block order.
struct Mxfp4RowSums {
  double source_sq = 0.0;  // sum x^2
  double dequant_sq = 0.0; // sum deq^2
  double error_sq = 0.0;   // sum (deq - x)^2
};

// One row of `cols` values (cols % 32 == 0): packed codes (cols/2 bytes, low nibble = even
// element), E8M0 scales (cols/32 bytes); returns the row's report sums.
// Precondition: finite x (as ModelOpt, which has no NaN/inf rule of its own).
Mxfp4RowSums quantize_row_mxfp4_ref(const float* x, int cols, uint8_t* packed, uint8_t* scales);

// Same contract, Highway SIMD with runtime dispatch (kernels/cpu/mxfp4_simd.cpp): the same
// bytes and bit-identical sums as quantize_row_mxfp4_ref for every input (inf and NaN too).
Mxfp4RowSums quantize_row_mxfp4_simd(const float* x, int cols, uint8_t* packed, uint8_t* scales);

// The Engram codec's row in one pass: E4M3 codes (cols of them) with one E8M0 source scale
// per 32 (cols % 32 == 0), decoded as dequantize_row_fp8_e8m0_32(_simd) decodes them, then
// quantized as quantize_row_mxfp4_ref quantizes the decoded row: bit-identical to those two
// calls for every input (NaN codes and scales included), without the fp32 row in between.
Mxfp4RowSums quantize_row_mxfp4_from_fp8_simd(const uint8_t* codes, const uint8_t* source_scales, int cols,
                                              uint8_t* packed, uint8_t* scales);

// out[i] = e2m1(nibble) * 2^(scale - 127) in fp32 (exact: no rounding for any byte but
// 0xFF, which gives NaN; ModelOpt's dequantize_packed maps 0xFF to +-inf instead).
void dequantize_row_mxfp4(const uint8_t* packed, const uint8_t* scales, int cols, float* out);

// ---------------------------------------------------------------- MXFP4 -> NVFP4 transcode
// Codes stay as they are; each E8M0 scale e (one per 32 values) becomes two E4M3 scales
// (one per 16) equal to 2^(e - emax + 8), with weight_scale_2 = 2^(emax - 135), emax being
// the largest E8M0 byte of the scale group (e8m0_max_of). Then
//   e2m1 * 2^(e - 127) == e2m1 * e4m3_scale * weight_scale_2   (fp32, exact)
// for every block with e - emax + 8 in [-9, 8]: E4M3 holds 2^-9..2^-7 as subnormals and
// 2^-6..2^8 as normals, so the 18 binades below and at emax transcode losslessly.
// Assumes no E8M0 NaN byte (0xFF): callers check with find_e8m0_nan first.

// Index of the first 0xFF byte of scales[0, n), or n if there is none.
size_t find_e8m0_nan(const uint8_t* scales, size_t n);

// The largest byte of scales[0, n) (0 for n == 0); a NaN byte 0xFF would win, so look for
// one first.
uint8_t e8m0_max_of(const uint8_t* scales, size_t n);

// weight_scale_2 = 2^(emax - 127 - 8) as fp32 (a subnormal for emax < 9; NaN for 0xFF).
float nvfp4_global_scale_from_e8m0_max(uint8_t emax);

// The E4M3 code of one transcoded block scale: e4m3_from_float(2^(e - emax + 8)), so an
// exponent beyond the range takes the nearest E4M3 value: 0 at 2^-10 and below (2^-10 is a
// tie between 0 and 2^-9 that rounds to even), 448 above 2^8 (only when e > emax, a caller
// error).
// For a block whose codes are fixed, dequant error is |e2m1| * |s - 2^d| per element, so
// the nearest scale is the one with least error: 0 beats 2^-9 for d <= -11 and ties at -10.
uint8_t nvfp4_scale_code_from_e8m0(uint8_t e8m0, uint8_t emax);

// One row (cols % 32 == 0): e4m3_scales[2b] = e4m3_scales[2b + 1] = the code of block b's
// scale. Returns the number of inexact blocks: blocks whose exponent is outside [-9, 8] of
// emax and whose codes are not all zero (nibbles 0x0 and 0x8 both count as zero). A block
// of zero codes is exact whatever its scale, and gets the same formula's (clamped) code.
uint64_t transcode_row_mxfp4_to_nvfp4(const uint8_t* codes, const uint8_t* e8m0_scales, int cols, uint8_t emax,
                                      uint8_t* e4m3_scales);

// The same transcode with every E8M0 byte's E4M3 code and exactness looked up in tables
// built once for the scale group's emax: a row costs a lookup per block (the pipeline's
// path; tested equal to transcode_row_mxfp4_to_nvfp4 for every emax and byte).
class Mxfp4ToNvfp4 {
 public:
  explicit Mxfp4ToNvfp4(uint8_t emax);
  uint64_t transcode_row(const uint8_t* codes, const uint8_t* e8m0_scales, int cols, uint8_t* e4m3_scales) const;

 private:
  std::array<uint8_t, 256> code_{};
  std::array<uint8_t, 256> exact_{};
};

} // namespace shardq
