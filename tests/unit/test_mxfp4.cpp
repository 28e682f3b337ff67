// MXFP4 kernels: the Engram quantizer against blocks worked out by hand and checked with
// NVIDIA ModelOpt 0.47.0 (MXFP4QTensor.quantize, torch 2.15 on CPU), against a literal
// re-statement of ModelOpt's steps, and the MXFP4 -> NVFP4 scale transcode.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "kernels/mxfp4.h"

#if SHARDQ_CUDA_ORACLE
// The toolkit headers are not warning-clean under our flags; they are not our code.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter"
#include <cuda_fp8.h>
#pragma GCC diagnostic pop
#endif

using namespace shardq;

namespace {

struct Quantized {
  std::vector<uint8_t> packed, scales;
  Mxfp4RowSums sums;
};

Quantized quantize(const std::vector<float>& row) {
  Quantized q;
  q.packed.assign(row.size() / 2, 0xEE);
  q.scales.assign(row.size() / 32, 0xEE);
  q.sums = quantize_row_mxfp4_ref(row.data(), int(row.size()), q.packed.data(), q.scales.data());
  return q;
}

std::vector<float> dequantize(const Quantized& q) {
  std::vector<float> out(q.packed.size() * 2);
  dequantize_row_mxfp4(q.packed.data(), q.scales.data(), int(out.size()), out.data());
  return out;
}

// A block whose largest magnitude is `amax` (element 0), the rest zero.
std::vector<float> block_with_amax(float amax) {
  std::vector<float> block(32, 0.0f);
  block[0] = amax;
  return block;
}

float next_up(float x) { return std::nextafter(x, std::numeric_limits<float>::infinity()); }
float from_bits(uint32_t bits) { return std::bit_cast<float>(bits); }
uint32_t to_bits(float x) { return std::bit_cast<uint32_t>(x); }

// ModelOpt's steps for one block as mxfp4_tensor.py writes them, in fp32 with libm:
//   e = ceil(max(log2f(amax / 6), -127)); q = x / exp2f(e);
//   ord = number of bounds b with |q| - b > 0; sign bit = (2 - sign(q)) // 2.
// Written independently of the kernel (log2f, exp2f and a division instead of its double
// log2 and inverse product; bound counting instead of e2m1_index).
uint8_t modelopt_block(const float* x, uint8_t* nibbles) {
  float amax = 0.0f;
  for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float e = std::ceil(std::max(std::log2f(amax / 6.0f), -127.0f));
  const float scale = std::exp2f(e);
  const float bounds[] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};
  for (int i = 0; i < 32; ++i) {
    const float q = x[i] / scale;
    const float sign = q > 0.0f ? 1.0f : q < 0.0f ? -1.0f : 0.0f;
    const int sign_bit = int(std::floor((2.0f - sign) / 2.0f));
    int ord = 0;
    for (float b : bounds) ord += (std::fabs(q) - b) > 0.0f;
    nibbles[i] = uint8_t(sign_bit * 8 + ord);
  }
  return uint8_t(e + 127.0f);
}

// The scale byte with exact RCEIL: the smallest power of two >= amax / 6 (formats.h).
uint8_t rceil_byte(float amax) { return e8m0_from_float(amax / 6.0f, E8M0Rounding::toward_pos_inf); }

// Where fp32 log2 of amax / 6 lands on an integer that the exact log2 exceeds (d just above
// a power of two): there ModelOpt's byte is one below RCEIL (above 2^-127, where the clamp
// does not hide it). Just below a power of two the rounding up to the integer is harmless.
bool fp32_log2_rounds_down_to_integer(float amax) {
  const float d = amax / 6.0f;
  const float l = std::log2f(d);
  return d > 0x1p-127f && l == std::nearbyint(l) && std::exp2f(l) < d;
}

// Every value within `ulps` fp32 ulps above and below 6 * 2^k for every k.
std::vector<float> amax_near_six_times_powers_of_two(int ulps) {
  std::vector<float> out;
  for (int k = -150; k <= 125; ++k) {
    const float anchor = std::ldexp(6.0f, k);
    float below = anchor, above = anchor;
    out.push_back(anchor);
    for (int i = 0; i < ulps; ++i) {
      below = std::nextafter(below, 0.0f);
      above = next_up(above);
      out.push_back(below);
      out.push_back(above);
    }
  }
  return out;
}

} // namespace

// ---------------------------------------------------------------- quantizer, hand-worked

// Scale 1 (amax 6 -> descale 1 -> byte 127); every value is its own quotient.
// ModelOpt 0.47.0 gives exactly these bytes for this block.
TEST(Mxfp4Quantize, HandWorkedTiesSignsAndZeros) {
  const std::vector<float> row = {
      // n: 8 (zero)  0 (tie down)  1     2      3      4     5     6   7
      0.0f, 0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, 6.0f,
      // n: 8 (-tie -> -0 keeps sign)  9   A   B   C   D   E   F
      -0.25f, -0.75f, -1.25f, -1.75f, -2.5f, -3.5f, -5.0f, -6.0f,
      // n: 1  2  7  8 (-0)  0 (tiny +)  8 (tiny -)  1  2  3  4  5  6
      0.26f, 0.76f, 5.01f, -0.0f, 0.1f, -0.1f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f,
      // n: 0 (1e-30 > 0)  8  5 (2.9 -> 3)
      1e-30f, -1e-30f, 2.9f};
  const Quantized q = quantize(row);
  EXPECT_EQ(q.scales, std::vector<uint8_t>{127});
  // Packed byte = odd << 4 | even.
  const std::vector<uint8_t> packed = {0x08, 0x21, 0x43, 0x65, 0x87, 0xA9, 0xCB, 0xED,
                                       0x1F, 0x72, 0x08, 0x18, 0x32, 0x54, 0x06, 0x58};
  EXPECT_EQ(q.packed, packed);
}

TEST(Mxfp4Quantize, AllZeroBlockIsByteZeroAndEveryNibbleEight) {
  std::vector<float> row(64, 0.0f);
  for (size_t i = 0; i < row.size(); i += 3) row[i] = -0.0f;
  const Quantized q = quantize(row);
  EXPECT_EQ(q.scales, (std::vector<uint8_t>{0, 0}));
  for (uint8_t byte : q.packed) EXPECT_EQ(byte, 0x88);
  for (float v : dequantize(q)) {
    EXPECT_EQ(v, 0.0f);
    EXPECT_TRUE(std::signbit(v)); // nibble 8 is -0
  }
  EXPECT_EQ(q.sums.source_sq, 0.0);
  EXPECT_EQ(q.sums.dequant_sq, 0.0);
  EXPECT_EQ(q.sums.error_sq, 0.0);
}

TEST(Mxfp4Quantize, NibbleSignIsZeroOnlyForPositiveQuotients) {
  EXPECT_EQ(mxfp4_nibble(0.0f), 0x8);
  EXPECT_EQ(mxfp4_nibble(-0.0f), 0x8);
  EXPECT_EQ(mxfp4_nibble(0x1p-149f), 0x0);
  EXPECT_EQ(mxfp4_nibble(-0x1p-149f), 0x8);
  EXPECT_EQ(mxfp4_nibble(0.25f), 0x0);
  EXPECT_EQ(mxfp4_nibble(-0.25f), 0x8);
  EXPECT_EQ(mxfp4_nibble(0.2500001f), 0x1);
  EXPECT_EQ(mxfp4_nibble(7.0f), 0x7); // saturates (only the fp32 log2 case gets here)
  EXPECT_EQ(mxfp4_nibble(-1e30f), 0xF);
  // e2m1_from_float differs only in the sign of zero.
  EXPECT_EQ(e2m1_from_float(0.0f, E2M1Rounding::nearest_toward_zero), 0x0);
}

TEST(Mxfp4Quantize, ValueThatUnderflowsToZeroInTheQuotientIsNibbleEight) {
  // Scale 2^10 (amax 6144): 2^-140 / 2^10 = 2^-150 rounds to +0.0 (a tie to even), so its
  // sign is lost and the nibble is 8; 2^-139 / 2^10 = 2^-149 stays positive: nibble 0.
  std::vector<float> row(32, 0.0f);
  row[0] = 6144.0f, row[1] = 0x1p-140f, row[2] = 0x1p-139f;
  const Quantized q = quantize(row);
  EXPECT_EQ(q.scales[0], 127 + 10);
  EXPECT_EQ(q.packed[0], 0x87);
  EXPECT_EQ(q.packed[1], 0x80);
}

// ---------------------------------------------------------------- scale byte, hand-worked

TEST(Mxfp4Scale, AmaxExactlySixTimesAPowerOfTwo) {
  for (int k = -150; k <= 125; ++k) {
    const float amax = std::ldexp(6.0f, k); // 1.5 * 2^(k+2): exact down to 2^-149
    EXPECT_EQ(mxfp4_scale_code(amax), uint8_t(std::max(k, -127) + 127)) << k;
    // amax / scale = 6 (nibble 7) down to k = -127; below, the scale stays 2^-127 and
    // amax / 2^-127 = 6 * 2^(k+127): 3, 1.5, 0.75 (tie -> 0.5), 0.375, 0.1875 (-> +0).
    const uint8_t below[] = {0x5, 0x3, 0x1, 0x1, 0x0};
    const uint8_t nibble = k >= -127 ? 0x7 : below[std::min(-128 - k, 4)];
    EXPECT_EQ(quantize(block_with_amax(amax)).packed[0], 0x80 | nibble) << k; // element 1 is zero: 8
  }
  EXPECT_EQ(mxfp4_scale_code(0.0f), 0);
}

TEST(Mxfp4Scale, AmaxJustAboveSixTimesAPowerOfTwo) {
  // k = 0: 6 + 1 ulp -> descale 1 + 2^-23 -> log2 1.7e-7 > 0 -> byte 128; 6.0000005 / 2 =
  // 3.0000002 -> 3 (nibble 5).
  EXPECT_EQ(mxfp4_scale_code(next_up(6.0f)), 128);
  EXPECT_EQ(quantize(block_with_amax(next_up(6.0f))).packed[0], 0x85);
  // k = 3: 3 + 1.7e-7 rounds up to 3 + 2^-22 in fp32 -> ceil 4 -> byte 131 (as RCEIL).
  EXPECT_EQ(mxfp4_scale_code(next_up(48.0f)), 131);
  // k = 4: 96 + 1 ulp -> descale 16 * (1 + 2^-23); fp32 log2 = 4 + 1.7e-7 rounds to 4.0f
  // (half an ulp there is 2.4e-7), so ModelOpt's byte is 131, RCEIL's 132; the value
  // 96.0000076 / 16 = 6.0000005 saturates to 6: the one way an MXFP4 value clips.
  EXPECT_EQ(mxfp4_scale_code(next_up(96.0f)), 131);
  EXPECT_EQ(rceil_byte(next_up(96.0f)), 132);
  const Quantized clipped = quantize(block_with_amax(next_up(96.0f)));
  EXPECT_EQ(clipped.packed[0], 0x87);
  EXPECT_EQ(dequantize(clipped)[0], 96.0f);
  // Two ulps: descale still rounds to 16 * (1 + 2^-23) -> 131; three: 16 * (1 + 2^-22),
  // log2 4 + 3.4e-7 rounds up -> 132.
  EXPECT_EQ(mxfp4_scale_code(from_bits(to_bits(96.0f) + 2)), 131);
  EXPECT_EQ(mxfp4_scale_code(from_bits(to_bits(96.0f) + 3)), 132);
  // k = -4: -4 + 1.7e-7 = -(3.99999983): half the spacing below 4 is 1.2e-7 -> rounds away
  // from -4 -> ceil -3 -> byte 124 (as RCEIL). k = -5: half the spacing in [4, 8) is 2.4e-7
  // -> rounds to -5 -> byte 122, RCEIL 123.
  EXPECT_EQ(mxfp4_scale_code(next_up(0.375f)), 124);
  EXPECT_EQ(mxfp4_scale_code(next_up(0.1875f)), 122);
  EXPECT_EQ(rceil_byte(next_up(0.1875f)), 123);
}

TEST(Mxfp4Scale, HugeAndTinyAmaxAndTheClamps) {
  const float max = std::numeric_limits<float>::max();
  // FLT_MAX / 6 < 2^126: byte 253 is the largest finite amax can give.
  EXPECT_EQ(mxfp4_scale_code(max), 253);
  EXPECT_EQ(mxfp4_scale_code(std::ldexp(6.0f, 125)), 252);
  EXPECT_EQ(mxfp4_scale_code(next_up(std::ldexp(6.0f, 125))), 252); // fp32 log2 125 + 1.7e-7 -> 125
  EXPECT_EQ(rceil_byte(next_up(std::ldexp(6.0f, 125))), 253);
  EXPECT_EQ(mxfp4_scale_code(std::numeric_limits<float>::infinity()), 254); // clamp
  EXPECT_EQ(mxfp4_scale_code(std::numeric_limits<float>::quiet_NaN()), E8M0::nan_code);
  // FLT_MAX / 2^126 = 3.99999976 -> 4 (nibble 6); 4 * 2^126 = 2^128 overflows fp32, in our
  // dequant as in ModelOpt's (both give inf for this block).
  const Quantized huge = quantize(block_with_amax(max));
  EXPECT_EQ(huge.packed[0], 0x86);
  EXPECT_TRUE(std::isinf(dequantize(huge)[0]));
  // Tiny: descale below 2^-127 clamps to byte 0 (scale 2^-127).
  EXPECT_EQ(mxfp4_scale_code(0x1p-149f), 0);
  EXPECT_EQ(mxfp4_scale_code(std::ldexp(6.0f, -127)), 0);
  EXPECT_EQ(mxfp4_scale_code(std::ldexp(6.0f, -126)), 1);
  // 2^-149 * 2^127 = 2^-22 -> magnitude 0, positive -> nibble 0 (the zeros beside it: 8).
  const Quantized tiny = quantize(block_with_amax(0x1p-149f));
  EXPECT_EQ(tiny.scales[0], 0);
  EXPECT_EQ(tiny.packed[0], 0x80);
  EXPECT_EQ(quantize(block_with_amax(-0x1p-149f)).packed[0], 0x88);
}

// ---------------------------------------------------------------- scale byte, sweeps

// The kernel's double log2 rounded to fp32 against libm's log2f, over every amax within 64
// ulps of 6 * 2^k (where the fp32 rounding decides) and a strided sweep of all fp32.
TEST(Mxfp4Scale, EqualsTheFp32FormulaWithLibmLog2f) {
  auto formula = [](float amax) { return uint8_t(std::ceil(std::max(std::log2f(amax / 6.0f), -127.0f)) + 127.0f); };
  std::vector<float> amaxes = amax_near_six_times_powers_of_two(64);
  for (uint32_t bits = 0; bits < 0x7F800000u; bits += 4099) amaxes.push_back(from_bits(bits));
  int mismatches = 0;
  for (float amax : amaxes) {
    if (mxfp4_scale_code(amax) != formula(amax) && mismatches++ < 5)
      ADD_FAILURE() << "amax " << std::hexfloat << amax << ": " << int(mxfp4_scale_code(amax)) << " vs "
                    << int(formula(amax));
  }
  EXPECT_EQ(mismatches, 0);
}

// ModelOpt's byte is RCEIL's, minus one exactly where fp32 log2 rounds down to an integer.
TEST(Mxfp4Scale, IsRceilExceptWhereFp32Log2RoundsDownToAnInteger) {
  int lower = 0;
  for (float amax : amax_near_six_times_powers_of_two(64)) {
    const bool documented = fp32_log2_rounds_down_to_integer(amax);
    lower += documented;
    ASSERT_EQ(mxfp4_scale_code(amax), rceil_byte(amax) - (documented ? 1 : 0)) << std::hexfloat << amax;
  }
  EXPECT_GT(lower, 1000); // the difference is real (ModelOpt 0.47.0 agrees on the cases above)
}

// The Engram source is FP8 (E4M3 times an E8M0 scale): its block maxima never sit just above
// 6 * 2^k, so on them ModelOpt's byte equals RCEIL, and torch on CUDA (which multiplies amax
// by the fp32 reciprocal of 6 instead of dividing) gives the same byte too.
TEST(Mxfp4Scale, Fp8SourcedBlocksAgreeWithRceilAndWithTheReciprocalProduct) {
  for (int code = 1; code <= E4M3::max_code; ++code) {
    for (int scale = 0; scale <= E8M0::max_code; ++scale) {
      const float amax = e4m3_to_float(uint8_t(code)) * e8m0_to_float(uint8_t(scale));
      if (std::isinf(amax)) continue; // past FLT_MAX: no fp32 source row holds it
      const float times_reciprocal = std::ceil(std::max(float(std::log2(double(amax * (1.0f / 6.0f)))), -127.0f));
      ASSERT_EQ(mxfp4_scale_code(amax), rceil_byte(amax)) << code << " " << scale;
      ASSERT_EQ(mxfp4_scale_code(amax), uint8_t(times_reciprocal + 127.0f)) << code << " " << scale;
    }
  }
}

// ---------------------------------------------------------------- quantizer, properties

namespace {

// Rows that reach every rule: wide exponent spread, exact midpoints, zeros of both signs,
// values that underflow in the quotient, block maxima just above 6 * 2^k.
std::vector<float> mixed_row(std::mt19937& rng, int cols) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-140, 120);
  const float midpoints[] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};
  std::vector<float> row(static_cast<size_t>(cols), 0.0f);
  for (int b = 0; b < cols / 32; ++b) {
    const int kind = int(rng() % 6), k = exponent(rng);
    for (int i = 0; i < 32; ++i) {
      float& v = row[size_t(b * 32 + i)];
      const float sign = rng() & 1 ? 1.0f : -1.0f;
      if (kind == 0) v = normal(rng) * std::ldexp(1.0f, k);
      else if (kind == 1) v = sign * midpoints[rng() % 7] * std::ldexp(1.0f, k);
      else if (kind == 2) v = rng() % 3 ? sign * 0.0f : normal(rng) * std::ldexp(1.0f, k);
      else if (kind == 3) v = normal(rng) * std::ldexp(1.0f, int(rng() % 160) - 140); // underflows
      else if (kind == 4) v = sign * from_bits(to_bits(std::ldexp(6.0f, k % 100)) + uint32_t(rng() % 24)) / (1 + (i > 0));
      else v = normal(rng) * std::ldexp(1.0f, std::clamp(k, -30, 30));
    }
  }
  return row;
}

} // namespace

TEST(Mxfp4Quantize, EqualsModelOptStepsRestatedOnRandomRows) {
  std::mt19937 rng(2024);
  for (int trial = 0; trial < 3000; ++trial) {
    const std::vector<float> row = mixed_row(rng, 128);
    const Quantized q = quantize(row);
    for (int b = 0; b < 4; ++b) {
      uint8_t nibbles[32];
      ASSERT_EQ(q.scales[size_t(b)], modelopt_block(&row[size_t(b) * 32], nibbles)) << trial;
      for (int i = 0; i < 32; i += 2)
        ASSERT_EQ(q.packed[size_t(b * 16 + i / 2)], pack_e2m1x2(nibbles[i], nibbles[i + 1])) << trial << " " << b;
    }
  }
}

TEST(Mxfp4Quantize, RowSumsHandWorked) {
  // Block 0 {3, 1, 0...}: amax 3 -> descale 0.5 -> byte 126; 3 / 0.5 = 6, 1 / 0.5 = 2: exact.
  // Block 1 {7, 0...}: 7 / 6 -> log2 0.22 -> byte 128 (scale 2); 3.5 ties down to 3 -> 6.
  std::vector<float> row(64, 0.0f);
  row[0] = 3, row[1] = 1, row[32] = 7;
  const Quantized q = quantize(row);
  EXPECT_EQ(q.scales, (std::vector<uint8_t>{126, 128}));
  EXPECT_EQ(q.sums.source_sq, 9.0 + 1.0 + 49.0);
  EXPECT_EQ(q.sums.dequant_sq, 9.0 + 1.0 + 36.0);
  EXPECT_EQ(q.sums.error_sq, 1.0);
}

// The sums are each block's 32 fp64 terms folded in halves, blocks in order: recomputed here
// from the dequantized row, bit for bit, and within 2^-50 of a long double sum.
TEST(Mxfp4Quantize, RowSumsAreFoldedFp64Terms) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 500; ++trial) {
    const std::vector<float> row = mixed_row(rng, 256);
    const Quantized q = quantize(row);
    const std::vector<float> deq = dequantize(q);
    Mxfp4RowSums folded;
    long double exact_source = 0, exact_error = 0;
    for (size_t b = 0; b < 8; ++b) {
      double terms[3][32];
      for (size_t i = 0; i < 32; ++i) {
        const double x = row[b * 32 + i], d = deq[b * 32 + i];
        terms[0][i] = x * x, terms[1][i] = d * d, terms[2][i] = (d - x) * (d - x);
        exact_source += (long double)x * x;
        exact_error += ((long double)d - x) * ((long double)d - x);
      }
      double sums[3];
      for (int t = 0; t < 3; ++t) {
        for (int width = 16; width >= 1; width /= 2)
          for (int i = 0; i < width; ++i) terms[t][i] += terms[t][i + width];
        sums[t] = terms[t][0];
      }
      folded.source_sq += sums[0], folded.dequant_sq += sums[1], folded.error_sq += sums[2];
    }
    ASSERT_EQ(std::bit_cast<uint64_t>(q.sums.source_sq), std::bit_cast<uint64_t>(folded.source_sq)) << trial;
    ASSERT_EQ(std::bit_cast<uint64_t>(q.sums.dequant_sq), std::bit_cast<uint64_t>(folded.dequant_sq)) << trial;
    ASSERT_EQ(std::bit_cast<uint64_t>(q.sums.error_sq), std::bit_cast<uint64_t>(folded.error_sq)) << trial;
    EXPECT_LE(std::fabs(q.sums.source_sq - double(exact_source)), 0x1p-50 * double(exact_source)) << trial;
    EXPECT_LE(std::fabs(q.sums.error_sq - double(exact_error)), 0x1p-50 * double(exact_error)) << trial;
  }
}

TEST(Mxfp4Dequantize, EveryNibbleUnderEveryScaleIsTheExactProduct) {
  for (int scale = 0; scale <= 0xFF; ++scale) {
    std::vector<uint8_t> packed(16), scales = {uint8_t(scale)};
    for (int i = 0; i < 16; ++i) packed[size_t(i)] = uint8_t(i | ((15 - i) << 4));
    std::vector<float> out(32);
    dequantize_row_mxfp4(packed.data(), scales.data(), 32, out.data());
    for (int i = 0; i < 32; ++i) {
      const int nibble = (i & 1) ? 15 - i / 2 : i / 2;
      if (scale == E8M0::nan_code) {
        ASSERT_TRUE(std::isnan(out[size_t(i)]));
        continue;
      }
      const double exact = double(E2M1::values[size_t(nibble)]) * std::ldexp(1.0, scale - 127);
      ASSERT_EQ(double(out[size_t(i)]), double(float(exact))) << scale << " " << i; // inf only past FLT_MAX
      ASSERT_EQ(std::signbit(out[size_t(i)]), nibble >= 8);
    }
  }
}

// ---------------------------------------------------------------- transcode

TEST(Transcode, E8m0MaxNanAndGlobalScale) {
  const std::vector<uint8_t> scales = {120, 131, 7, 131, 0, 254};
  EXPECT_EQ(e8m0_max_of(scales.data(), 5), 131);
  EXPECT_EQ(e8m0_max_of(scales.data(), scales.size()), 254);
  EXPECT_EQ(e8m0_max_of(scales.data(), 0), 0);
  EXPECT_EQ(find_e8m0_nan(scales.data(), scales.size()), scales.size());
  const std::vector<uint8_t> with_nan = {1, 2, 0xFF, 3, 0xFF};
  EXPECT_EQ(find_e8m0_nan(with_nan.data(), with_nan.size()), 2u);
  EXPECT_EQ(nvfp4_global_scale_from_e8m0_max(135), 1.0f);
  EXPECT_EQ(nvfp4_global_scale_from_e8m0_max(127), 0x1p-8f);
  EXPECT_EQ(nvfp4_global_scale_from_e8m0_max(254), 0x1p119f);
  EXPECT_EQ(to_bits(nvfp4_global_scale_from_e8m0_max(0)), 1u << 14); // 2^-135, an fp32 subnormal
  EXPECT_TRUE(std::isnan(nvfp4_global_scale_from_e8m0_max(0xFF)));
}

// emax 140 (weight_scale_2 = 2^5); block exponents d = e - 140 + 8 across the range.
TEST(Transcode, HandWorkedBlocksAcrossTheExponentRange) {
  struct Case {
    uint8_t e8m0;
    uint8_t code_byte;      // all 16 code bytes of the block
    uint8_t expected_e4m3;  // both halves
  };
  const Case cases[] = {
      {140, 0x7F, 0x78}, // d = 8: 2^8, exponent field 15
      {139, 0x12, 0x70}, // d = 7
      {132, 0xF1, 0x38}, // d = 0: 1.0
      {126, 0x21, 0x08}, // d = -6: the smallest normal
      {125, 0x21, 0x04}, // d = -7: subnormal 4 * 2^-9
      {124, 0x21, 0x02}, // d = -8
      {123, 0x21, 0x01}, // d = -9: the smallest subnormal, the last exact exponent
      {122, 0x21, 0x00}, // d = -10: inexact (non-zero codes); 2^-10 ties to even 0
      {122, 0x88, 0x00}, // d = -10, codes all -0: exact
      {100, 0x80, 0x00}, // d = -32, codes 0 and -0: exact
      {0, 0x00, 0x00},   // d = -132, zero codes: exact
  };
  const int blocks = int(std::size(cases));
  std::vector<uint8_t> codes(size_t(blocks) * 16), e8m0(static_cast<size_t>(blocks)), e4m3(size_t(blocks) * 2, 0xEE);
  for (int b = 0; b < blocks; ++b) {
    std::fill_n(codes.begin() + b * 16, 16, cases[b].code_byte);
    e8m0[size_t(b)] = cases[b].e8m0;
  }
  const uint8_t emax = 140;
  EXPECT_EQ(transcode_row_mxfp4_to_nvfp4(codes.data(), e8m0.data(), blocks * 32, emax, e4m3.data()), 1u);
  for (int b = 0; b < blocks; ++b) {
    EXPECT_EQ(e4m3[size_t(2 * b)], cases[b].expected_e4m3) << b;
    EXPECT_EQ(e4m3[size_t(2 * b + 1)], cases[b].expected_e4m3) << b;
  }
  // The exact blocks dequantize to the same fp32 values.
  const float global = nvfp4_global_scale_from_e8m0_max(emax);
  EXPECT_EQ(global, 32.0f);
  std::vector<float> mx(size_t(blocks) * 32);
  dequantize_row_mxfp4(codes.data(), e8m0.data(), blocks * 32, mx.data());
  for (int i = 0; i < blocks * 32; ++i) {
    if (i / 32 == 7) continue; // the inexact block
    const uint8_t byte = codes[size_t(i / 2)], nibble = (i & 1) ? byte >> 4 : byte & 0xF;
    const float nv = e2m1_to_float(nibble) * e4m3_to_float(e4m3[size_t(i / 16)]) * global;
    ASSERT_EQ(to_bits(nv), to_bits(mx[size_t(i)])) << i;
  }
}

TEST(Transcode, ScaleAboveEmaxSaturatesAndIsInexact) {
  // A caller error (emax not the maximum): d = 9 -> 2^9 has no E4M3, the nearest is 448.
  std::vector<uint8_t> codes(32, 0x11), e8m0 = {141, 141}, e4m3(4);
  for (size_t i = 16; i < 32; ++i) codes[i] = i % 2 ? 0x80 : 0x08; // block 1: 0 and -0 only: exact
  EXPECT_EQ(transcode_row_mxfp4_to_nvfp4(codes.data(), e8m0.data(), 64, 140, e4m3.data()), 1u);
  EXPECT_EQ(e4m3, (std::vector<uint8_t>{0x7E, 0x7E, 0x7E, 0x7E}));
}

// With codes fixed, dequant error per element is |e2m1| * |s - 2^d|: the written code is
// the E4M3 value nearest to 2^d, so no other scale code has less error.
TEST(Transcode, OutOfRangeScaleIsTheNearestE4m3Value) {
  for (int d = -20; d <= 12; ++d) {
    const int e8m0 = 140 + d - 8;
    const uint8_t written = nvfp4_scale_code_from_e8m0(uint8_t(e8m0), 140);
    const double target = std::ldexp(1.0, d);
    for (int code = 0; code <= E4M3::max_code; ++code)
      ASSERT_LE(std::fabs(e4m3_to_float(written) - target), std::fabs(e4m3_to_float(uint8_t(code)) - target)) << d;
    if (d <= -10) {
      EXPECT_EQ(written, 0x00) << d; // 2^-10: a tie with 2^-9, even wins
    }
  }
}

TEST(Transcode, ScaleCodeIsE4m3OfThePowerOfTwo) {
  for (int emax = 0; emax <= E8M0::max_code; ++emax) {
    for (int e = 0; e <= E8M0::max_code; ++e) {
      const float power = std::ldexp(1.0f, e - emax + 8); // 0 or inf far out: codes 0 / 0x7E
      ASSERT_EQ(nvfp4_scale_code_from_e8m0(uint8_t(e), uint8_t(emax)), e4m3_from_float(power)) << e << " " << emax;
    }
  }
}

// The property the transcode exists for: within 17 binades of emax, every value dequantizes
// to the same fp32 bits, NVFP4 as (e2m1 * e4m3 scale) * weight_scale_2.
TEST(Transcode, LosslessWithinRangeBitForBit) {
  std::mt19937 rng(99);
  const int cols = 512, blocks = cols / 32;
  int checked = 0;
  for (int trial = 0; trial < 4000; ++trial) {
    const int emax = trial < 4 ? std::array{0, 1, 17, 254}[size_t(trial)] : int(rng() % 255);
    std::vector<uint8_t> codes(size_t(cols) / 2), e8m0(static_cast<size_t>(blocks)), e4m3(size_t(cols) / 16);
    for (auto& byte : codes) byte = uint8_t(rng());
    for (auto& e : e8m0) e = uint8_t(std::max(0, emax - int(rng() % 18)));
    e8m0[rng() % size_t(blocks)] = uint8_t(emax);
    ASSERT_EQ(e8m0_max_of(e8m0.data(), e8m0.size()), emax);
    ASSERT_EQ(transcode_row_mxfp4_to_nvfp4(codes.data(), e8m0.data(), cols, uint8_t(emax), e4m3.data()), 0u);
    const float global = nvfp4_global_scale_from_e8m0_max(uint8_t(emax));
    std::vector<float> mx(static_cast<size_t>(cols));
    dequantize_row_mxfp4(codes.data(), e8m0.data(), cols, mx.data());
    for (int i = 0; i < cols; ++i) {
      const uint8_t byte = codes[size_t(i / 2)], nibble = (i & 1) ? byte >> 4 : byte & 0xF;
      const float nv = e2m1_to_float(nibble) * e4m3_to_float(e4m3[size_t(i / 16)]) * global;
      ASSERT_EQ(to_bits(nv), to_bits(mx[size_t(i)])) << "trial " << trial << " element " << i;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 4000 * cols);
}

// ---------------------------------------------------------------- CUDA toolkit oracle

#if SHARDQ_CUDA_ORACLE

// __nv_cvt_float_to_e8m0 with cudaRoundPosInf is NVIDIA's RCEIL: the kernel's byte is that
// of amax / 6, except (one lower) exactly where fp32 log2 rounds down to an integer.
TEST(Mxfp4Oracle, ScaleIsToolkitRceilExceptTheFp32Log2Cases) {
  std::vector<float> amaxes = amax_near_six_times_powers_of_two(64);
  for (uint32_t bits = 0; bits < 0x7F800000u; bits += 4099) amaxes.push_back(from_bits(bits));
  int lower = 0;
  for (float amax : amaxes) {
    const uint8_t rceil = __nv_cvt_float_to_e8m0(amax / 6.0f, __NV_SATFINITE, cudaRoundPosInf);
    const bool documented = fp32_log2_rounds_down_to_integer(amax);
    lower += documented;
    ASSERT_EQ(mxfp4_scale_code(amax), rceil - (documented ? 1 : 0)) << std::hexfloat << amax;
  }
  EXPECT_GT(lower, 1000);
}


// The pipeline's table-driven transcode equals the reference for every emax, every scale
// byte, and blocks of zero and non-zero codes (both inexact-count paths).
TEST(Transcode, TableDrivenEqualsReferenceForEveryEmaxAndByte) {
  std::mt19937 rng(7);
  constexpr int kCols = 256 * 32; // one block per E8M0 byte
  std::vector<uint8_t> codes(kCols / 2), scales(kCols / 32), ref(kCols / 16), fast(kCols / 16);
  for (int b = 0; b < 256; ++b) scales[size_t(b)] = uint8_t(b == 0xFF ? 0xFE : b);
  for (size_t i = 0; i < codes.size(); ++i) codes[i] = (i / 16) % 3 == 0 ? uint8_t(0x88 * (rng() % 2)) : uint8_t(rng());
  for (int emax = 0; emax < 255; ++emax) {
    const uint64_t ref_inexact = transcode_row_mxfp4_to_nvfp4(codes.data(), scales.data(), kCols, uint8_t(emax), ref.data());
    const uint64_t fast_inexact = Mxfp4ToNvfp4(uint8_t(emax)).transcode_row(codes.data(), scales.data(), kCols, fast.data());
    ASSERT_EQ(fast, ref) << "emax " << emax;
    ASSERT_EQ(fast_inexact, ref_inexact) << "emax " << emax;
  }
}

TEST(Mxfp4Oracle, TranscodeScaleIsToolkitE4m3OfThePowerOfTwo) {
  for (int d = -140; d <= 140; ++d) {
    const int emax = 127, e = emax + d - 8;
    if (e < 0 || e > E8M0::max_code) continue;
    const uint8_t oracle = __nv_cvt_float_to_fp8(std::ldexp(1.0f, d), __NV_SATFINITE, __NV_E4M3);
    ASSERT_EQ(nvfp4_scale_code_from_e8m0(uint8_t(e), uint8_t(emax)), oracle) << d;
  }
}

#else

TEST(Mxfp4Oracle, ScaleIsToolkitRceilExceptTheFp32Log2Cases) { GTEST_SKIP() << "CUDA toolkit headers not found"; }

#endif
