// Symmetric per-channel INT8 (W8A8, seed 003; docs/formats.md "INT8"): one F32 scale per
// row, scale = amax(|row|) / 127, q = clamp(round_half_even(x / scale), -127, 127). The
// scalar functions here are the truth; the SIMD ones are tested bit for bit against them.
#pragma once

#include <cstdint>

namespace shardq {

struct Int8 {
  static constexpr int max_code = 127; // symmetric: -128 is never written
  // Report sums (Int8RowSums) run in this many lanes: 16 is a whole number of vectors at
  // every power-of-two width (one AVX-512 vector of 16 floats, 2 of AVX2's 8).
  static constexpr int sum_lanes = 16;
  // Columns per fp32 partial sum: each lane adds 256 / 16 = 16 terms in fp32, then widens.
  static constexpr int sum_block = 256;
  // The exponent k of the report terms' unit 2^-k (Int8RowSums) for a row's scale.
  static int sum_exponent(float scale);
};

// One row's report terms: sum x^2 and sum (deq - x)^2, deq = q * scale in fp32. Cheap,
// deterministic, and precise enough for a report figure (relative error a few 1e-7 against
// an fp64 sum in element order; bounded at 1e-5 in tests/unit/test_int8.cpp):
// - the terms are taken at the scale's binade: k = max(ilogb(scale), -126), unit = 2^-k
//   (an fp32 power of two), x' = x * unit, m = scale * unit, e' = q * m - x' (fp32
//   operations; exact, so x' and e' are x and deq - x times 2^-k, for every x of a normal
//   scale's row that is not below 2^-126 after scaling). Every |x'| < 256: no square
//   overflows fp32, and only terms negligible in the row underflow;
// - the row is cut into blocks of Int8::sum_block columns (the last may be shorter); in a
//   block, element i's term t (x' or e') goes to fp32 lane i % Int8::sum_lanes in element
//   order, each lane from +0, as lane = fma(t, t, lane): one rounding (std::fma in the
//   ref, a fused multiply-add in SIMD);
// - at the block's end each fp32 lane is widened to fp64 and added to the row's fp64 lane
//   of the same index (each from +0);
// - the 16 fp64 lanes are folded in halves (fold_int8_sum_lanes), then times 2^(2k) (exact).
// Every target adds the same terms in the same order: the sums are identical bits.
struct Int8RowSums {
  double source_sq = 0.0;
  double error_sq = 0.0;
  bool all_zero = false; // every value 0: scale 1.0, codes 0 (ours: there is no amax rule)
};

// lanes[0, Int8::sum_lanes) to one sum: lane l + lane l + 8 for l < 8, then + 4, + 2, + 1.
double fold_int8_sum_lanes(const double* lanes);

// Returns the row's scale (F32, written to weight_scale[r, 0]) and writes `cols` codes.
// x / scale is an fp32 division (as torch's w / scale), rounded half to even.
// Precondition: finite x.
float quantize_row_int8_ref(const float* x, int cols, int8_t* codes, Int8RowSums* sums);

// Same contract, Highway SIMD with runtime dispatch (kernels/cpu/int8_simd.cpp): the same
// scale, codes and sums bits as quantize_row_int8_ref.
float quantize_row_int8_simd(const float* x, int cols, int8_t* codes, Int8RowSums* sums);

// A source row decoded and quantized in one pass, the decoded row kept in a stack tile:
// the same bits as decoding it (below) and calling quantize_row_int8_ref on the result.
// `scales` holds the row's E8M0 scales, one per 32 columns (a partial last block too).
// Precondition: no NaN code and no NaN scale byte (0xFF); the codecs refuse those first.
//   FP8: E4M3 codes, value = e4m3_to_float(code) * e8m0_to_float(scale).
float quantize_row_int8_from_fp8_simd(const uint8_t* codes, const uint8_t* scales, int cols, int8_t* out,
                                      Int8RowSums* sums);
//   FP4: E2M1 codes two per byte, low nibble = even column (cols even), value =
//   e2m1_to_float(nibble) * e8m0_to_float(scale).
float quantize_row_int8_from_fp4_simd(const uint8_t* packed, const uint8_t* scales, int cols, int8_t* out,
                                      Int8RowSums* sums);

// out[i] = codes[i] * scale (fp32).
void dequantize_row_int8(const int8_t* codes, float scale, int cols, float* out);

} // namespace shardq
