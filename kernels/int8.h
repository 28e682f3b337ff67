// Symmetric per-channel INT8 (W8A8, seed 003; docs/formats.md "INT8"): one F32 scale per
// row, scale = amax(|row|) / 127, q = clamp(round_half_even(x / scale), -127, 127). The
// scalar functions here are the truth; the SIMD ones are tested bit for bit against them.
#pragma once

#include <cstdint>

namespace shardq {

// The scalar element rule below is shared by the CPU reference, the SIMD kernels' lookup
// tables and the CUDA kernel: on the device every fp32 operation is rounded explicitly
// (nvcc would otherwise contract a product and a difference into one fma).
#if defined(__CUDACC__)
#define SHARDQ_HOST_DEVICE __host__ __device__
#else
#define SHARDQ_HOST_DEVICE
#endif

struct Int8 {
  static constexpr int max_code = 127; // symmetric: -128 is never written
  // The report terms are integers (Int8RowSums): source terms in units of 2^(2k), error
  // terms in units of 2^(2(k - 6)).
  static constexpr int source_shift = 0;
  static constexpr int error_shift = 6;
  // The least k: 2^(error_shift - k) stays an fp32 number.
  static constexpr int min_sum_exponent = -120;
};

// One row's report figures: sum x^2 and sum (deq - x)^2, deq = q * scale. Integer terms,
// added in any order to the same bits (every backend sums them as it likes):
// - k = max(ilogb(scale), -120) (Int8Row); with a normal scale every |x| < 2^(k + 8);
// - the source term is nearbyint(s * s), s = x * 2^-k in fp32 (exact): below 2^16;
// - the error term is nearbyint(e * e), e = q * m - x' in fp32 (two roundings: no fused
//   multiply-add), x' = x * 2^(6 - k) and m = scale * 2^(6 - k) (both exact, m in [1, 128)):
//   |e| <= 64, so the term is at most 2^12;
// - source_sq and error_sq are the exact integer totals times 2^(2k) and 2^(2k - 12).
// A term is off by at most half a unit: relative to a typical value's square (amax / 4)
// or a typical error's (about scale^2 / 12) that is below 1e-3, and as often up as down.
// Values below 2^(k - 8) have code 0 and both terms 0, so 16 binades of a row's values
// decide all its figures: the SIMD kernels look each decoded value's code and terms up in
// tables of 128 entries.
struct Int8RowSums {
  double source_sq = 0.0;
  double error_sq = 0.0;
  bool all_zero = false; // every value 0: scale 1.0, codes 0 (ours: there is no amax rule)
};

namespace int8_detail {
// The device's explicitly rounded intrinsic, else the host's plain operation.
#if defined(__CUDA_ARCH__)
#define SHARDQ_DEVICE_ELSE_HOST(device, host) device
#else
#define SHARDQ_DEVICE_ELSE_HOST(device, host) host
#endif
SHARDQ_HOST_DEVICE inline float div_rn(float a, float b) { return SHARDQ_DEVICE_ELSE_HOST((__fdiv_rn(a, b)), (a / b)); }
SHARDQ_HOST_DEVICE inline float mul_rn(float a, float b) { return SHARDQ_DEVICE_ELSE_HOST((__fmul_rn(a, b)), (a * b)); }
SHARDQ_HOST_DEVICE inline float sub_rn(float a, float b) { return SHARDQ_DEVICE_ELSE_HOST((__fsub_rn(a, b)), (a - b)); }
// Round half to even (the default rounding mode's nearbyint, rintf on the device).
SHARDQ_HOST_DEVICE inline float round_even(float a) { return SHARDQ_DEVICE_ELSE_HOST((rintf(a)), (__builtin_nearbyintf(a))); }
SHARDQ_HOST_DEVICE inline float float_of_bits(uint32_t bits) {
  return SHARDQ_DEVICE_ELSE_HOST((__uint_as_float(bits)), (__builtin_bit_cast(float, bits)));
}
SHARDQ_HOST_DEVICE inline uint32_t bits_of_float(float value) {
  return SHARDQ_DEVICE_ELSE_HOST((__float_as_uint(value)), (__builtin_bit_cast(uint32_t, value)));
}
SHARDQ_HOST_DEVICE inline float power_of_two(int e) { return float_of_bits(uint32_t(e + 127) << 23); } // -126 <= e <= 127
// The binade of a positive finite float: its exponent field less the bias (a subnormal's
// -127 is below every k the terms use).
SHARDQ_HOST_DEVICE inline int binade(float positive) { return int(bits_of_float(positive) >> 23) - 127; }
} // namespace int8_detail

// A row's scale and the units of its report terms.
struct Int8Row {
  float scale = 1.0f;       // amax / 127 in fp32, 1.0 for an all-zero row
  int k = 0;                // max(ilogb(scale), Int8::min_sum_exponent)
  float source_unit = 1.0f; // 2^(Int8::source_shift - k)
  float unit = 1.0f;        // 2^(Int8::error_shift - k)
  float m = 1.0f;           // scale * unit

  SHARDQ_HOST_DEVICE static Int8Row of_amax(float amax) {
    using namespace int8_detail;
    Int8Row row;
    row.scale = amax == 0.0f ? 1.0f : div_rn(amax, float(Int8::max_code));
    const int b = binade(row.scale);
    row.k = b > Int8::min_sum_exponent ? b : Int8::min_sum_exponent;
    row.source_unit = power_of_two(Int8::source_shift - row.k);
    row.unit = power_of_two(Int8::error_shift - row.k);
    row.m = mul_rn(row.scale, row.unit);
    return row;
  }
  // The integer totals as figures (exact): times 2^(2k) and 2^(2k - 12).
  Int8RowSums figures(uint64_t source_total, uint64_t error_total, bool all_zero) const;
};

// One element: its code and its two report terms.
struct Int8Element {
  int8_t code;
  uint32_t source_term;
  uint32_t error_term;
};

// x / scale in fp32 (as torch's w / scale), rounded half to even; the clamp acts for a
// subnormal scale only (with a normal one |x / scale| <= 127 * (1 + 2^-23) < 127.5).
// Precondition: finite x.
SHARDQ_HOST_DEVICE inline Int8Element quantize_int8_element(float x, const Int8Row& row) {
  using namespace int8_detail;
  float q = round_even(div_rn(x, row.scale));
  q = q < -float(Int8::max_code) ? -float(Int8::max_code) : (q > float(Int8::max_code) ? float(Int8::max_code) : q);
  const float source = mul_rn(x, row.source_unit), error = sub_rn(mul_rn(q, row.m), mul_rn(x, row.unit));
  return {int8_t(q), uint32_t(round_even(mul_rn(source, source))), uint32_t(round_even(mul_rn(error, error)))};
}

// Returns the row's scale (F32, written to weight_scale[r, 0]) and writes `cols` codes.
// x / scale is an fp32 division (as torch's w / scale), rounded half to even.
// Precondition: finite x.
float quantize_row_int8_ref(const float* x, int cols, int8_t* codes, Int8RowSums* sums);

// Same contract, Highway SIMD with runtime dispatch (kernels/cpu/int8_simd.cpp): the same
// scale, codes and sums bits as quantize_row_int8_ref.
float quantize_row_int8_simd(const float* x, int cols, int8_t* codes, Int8RowSums* sums);

// A source row decoded and quantized in one pass: the same bits as decoding it (below) and
// calling quantize_row_int8_ref on the result. `scales` holds the row's E8M0 scales, one
// per 32 columns (a partial last block too). Precondition: no NaN scale byte (0xFF).
//   FP8: E4M3 codes, value = e4m3_to_float(code) * e8m0_to_float(scale). A NaN code makes
//   it return NaN, its codes and sums meaningless: the row is looked at once, and only then
//   does the caller search it for the column to name.
float quantize_row_int8_from_fp8_simd(const uint8_t* codes, const uint8_t* scales, int cols, int8_t* out,
                                      Int8RowSums* sums);
//   FP4: E2M1 codes two per byte, low nibble = even column (cols even), value =
//   e2m1_to_float(nibble) * e8m0_to_float(scale).
float quantize_row_int8_from_fp4_simd(const uint8_t* packed, const uint8_t* scales, int cols, int8_t* out,
                                      Int8RowSums* sums);
// `rows` FP4 rows back to back (packed: rows x cols / 2, scales: rows x blocks, out: rows x
// cols), without sums: the scale and codes of quantize_row_int8_from_fp4_simd for each,
// row_scales[r] its scale. Rows of one or two blocks (the small experts of a model of many
// tensors) cost several times their bytes in setup one at a time; here they share tables.
void quantize_rows_int8_from_fp4_simd(const uint8_t* packed, const uint8_t* scales, int cols, size_t rows, int8_t* out,
                                      float* row_scales);

// out[i] = codes[i] * scale (fp32).
void dequantize_row_int8(const int8_t* codes, float scale, int cols, float* out);

} // namespace shardq
