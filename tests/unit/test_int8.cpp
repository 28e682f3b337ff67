// W8A8 INT8 (kernels/int8.h, stages/codec.h fp8_to_int8 / fp4_to_int8 / *_to_bf16): the
// per-channel quantizer against rows worked out by hand (ties to even in both parities and
// signs, an all-zero row, one huge value), its invariants on random rows (scale = amax /
// 127 in fp32, max |q| == 127, never -128, within half a step, fp64 sums), and the codecs'
// chunks (an FP8 32x32-block linear whose chunk starts at row 32, with a partial last
// block; FP4 expert rows) against the source decoded here from docs/formats.md's rules
// (E4M3 x E8M0, E2M1 x E8M0, low nibble = even column) and the reference quantizer.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/formats.h"
#include "kernels/int8.h"
#include "stages/codec.h"
#include "stages/recipes/recipe.h"
#include "stages/stage_error.h"

using namespace shardq;
using ::testing::HasSubstr;

namespace {

struct Quantized {
  float scale = 0.0f;
  std::vector<int8_t> codes;
  Int8RowSums sums;
};

Quantized quantize(const std::vector<float>& row) {
  Quantized q;
  q.codes.assign(row.size(), int8_t(0x55)); // poison: every code must be written
  q.sums.source_sq = q.sums.error_sq = -1.0;
  q.scale = quantize_row_int8_ref(row.data(), int(row.size()), q.codes.data(), &q.sums);
  return q;
}

std::vector<int8_t> as_codes(std::initializer_list<int> values) {
  std::vector<int8_t> out;
  for (int v : values) out.push_back(int8_t(v));
  return out;
}

bool same_bits(float a, float b) { return std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b); }
bool same_bits(double a, double b) { return std::bit_cast<uint64_t>(a) == std::bit_cast<uint64_t>(b); }

// The report terms, recomputed here (docs/formats.md "INT8"): k = max(ilogb(scale), -120),
// s = x * 2^-k, x' = x * 2^(6 - k) and e = q * (scale * 2^(6 - k)) - x' in fp32, each
// term the fp32 square of s or e rounded half to even to an integer; the integer totals
// times 2^(2k) and 2^(2k - 12).
Int8RowSums expected_sums(const std::vector<float>& x, const std::vector<int8_t>& codes, float scale) {
  const int k = std::max(std::ilogb(scale), -120);
  const float u = std::ldexp(1.0f, 6 - k), m = scale * u;
  uint64_t source = 0, error = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const float s = x[i] * std::ldexp(1.0f, -k), xs = x[i] * u;
    const float product = float(codes[i]) * m;
    const float e = product - xs;
    const float source_square = s * s, error_square = e * e;
    source += uint64_t(std::nearbyint(source_square));
    error += uint64_t(std::nearbyint(error_square));
  }
  Int8RowSums sums;
  sums.source_sq = std::ldexp(double(source), 2 * k);
  sums.error_sq = std::ldexp(double(error), 2 * k - 12);
  return sums;
}

// The same sums in fp64, element order: what the report figures approximate.
Int8RowSums fp64_sums(const std::vector<float>& x, const std::vector<int8_t>& codes, float scale) {
  Int8RowSums sums;
  for (size_t i = 0; i < x.size(); ++i) {
    const double e = double(float(codes[i]) * scale) - double(x[i]);
    sums.source_sq += double(x[i]) * double(x[i]);
    sums.error_sq += e * e;
  }
  return sums;
}

} // namespace

// ---------------------------------------------------------------- quantizer, hand-worked

// amax 127: scale exactly 1, so each value is its own quotient and every k + 0.5 is an
// exact tie: it goes to the even neighbour, whatever the sign or the parity of k.
TEST(Int8Quantize, TiesGoToEvenAtScaleOne) {
  const std::vector<float> row = {127.0f, 0.5f,  1.5f,  2.5f,  3.5f,   -0.5f, -1.5f,   -2.5f,
                                  -3.5f,  126.5f, -125.5f, 0.0f, 10.25f, -7.75f, 64.5f, -65.5f};
  const Quantized q = quantize(row);
  EXPECT_TRUE(same_bits(q.scale, 1.0f));
  EXPECT_EQ(q.codes, as_codes({127, 0, 2, 2, 4, 0, -2, -2, -4, 126, -126, 0, 10, -8, 64, -66}));
  EXPECT_FALSE(q.sums.all_zero);
  // Scale 1: source terms are the squares rounded to integers (16129 + 2.25 + 6.25 + ...:
  // every fraction here is .25 or .0625, so each rounds down), 56536 in all; error terms
  // are exact in units of 2^-12.
  EXPECT_EQ(q.sums.source_sq, 56536.0);
  // 12 elements off by 0.5 (the ten ties and 64.5, -65.5), 10.25 and -7.75 off by 0.25.
  EXPECT_EQ(q.sums.error_sq, 12 * 0.25 + 2 * 0.0625);
}

// The same ties at other powers of two (scale 2, scale 2^-10): the scale is amax / 127 in
// fp32, the quotient exact, the tie to even.
TEST(Int8Quantize, TiesGoToEvenAtPowerOfTwoScales) {
  for (const int exponent : {1, -10, 20, -60}) {
    const float s = std::ldexp(1.0f, exponent);
    const std::vector<float> row = {-127.0f * s, 2.5f * s, 3.5f * s, -2.5f * s, -3.5f * s, 0.5f * s, -0.5f * s, 5.5f * s};
    const Quantized q = quantize(row);
    EXPECT_TRUE(same_bits(q.scale, s)) << exponent;
    EXPECT_EQ(q.codes, as_codes({-127, 2, 4, -2, -4, 0, 0, 6})) << exponent;
    const Int8RowSums want = expected_sums(row, q.codes, q.scale);
    EXPECT_TRUE(same_bits(q.sums.source_sq, want.source_sq)) << exponent;
    EXPECT_TRUE(same_bits(q.sums.error_sq, want.error_sq)) << exponent;
  }
}

// Just off a tie the value goes to the nearer side, not to even.
TEST(Int8Quantize, JustOffTiesRoundToNearest) {
  const std::vector<float> row = {127.0f, std::nextafter(2.5f, 3.0f), std::nextafter(3.5f, 3.0f),
                                  std::nextafter(-2.5f, -3.0f), std::nextafter(-3.5f, -3.0f)};
  EXPECT_EQ(quantize(row).codes, as_codes({127, 3, 3, -3, -3}));
}

// The terms by hand (scale 1: k = 0; source terms of s = x in units of 1, error terms of
// e = 64 (q - x) in units of 2^-12). 2^-7: s = 1/128, code 0, e = -0.5 (square 0.25): both
// terms 0. 3 * 2^-8: source term 0, code 0, e = -0.75 (square 0.5625): error term 1. 1.25:
// s^2 = 1.5625 (term 2), code 1, e = 64 - 80 = -16 (term 256). 127: term 16129, no error.
// The totals do not depend on the columns' order.
TEST(Int8Quantize, SumsAreIntegerTermsByHand) {
  std::vector<float> row = {127.0f, 0x1p-7f, 3 * 0x1p-8f, 1.25f, 0.0f};
  for (int turn = 0; turn < 5; ++turn) {
    std::rotate(row.begin(), row.begin() + 1, row.end());
    const Quantized q = quantize(row);
    EXPECT_TRUE(same_bits(q.scale, 1.0f));
    EXPECT_EQ(q.sums.source_sq, 16129.0 + 2.0) << turn;
    EXPECT_EQ(q.sums.error_sq, (256.0 + 1.0) / 4096.0) << turn;
  }
}

// The terms are taken at the scale's binade: a row of 2^40 and a row of 2^-80 sum without
// overflow or underflow in fp32, to the same bits as the row at 1 scaled by 2^80 / 2^-160.
TEST(Int8Quantize, SumsAtTheScalesBinade) {
  const std::vector<float> base = {127.0f, 3.3f, -0.7f, 100.25f, 1e-3f};
  const Quantized one = quantize(base);
  for (const int exponent : {40, -80}) {
    std::vector<float> row = base;
    for (float& v : row) v = std::ldexp(v, exponent);
    const Quantized q = quantize(row);
    EXPECT_EQ(q.codes, one.codes) << exponent;
    EXPECT_EQ(q.sums.source_sq, std::ldexp(one.sums.source_sq, 2 * exponent)) << exponent;
    EXPECT_EQ(q.sums.error_sq, std::ldexp(one.sums.error_sq, 2 * exponent)) << exponent;
  }
}

// Precise enough for a report figure: against fp64 sums in element order, each total is
// off by at most half a unit per term (2^(2k - 1) and 2^(2k - 13)), plus the fp32 squares'
// own rounding; on rows of decoded FP8 (E4M3 times E8M0 per 32) and of normal floats at
// many magnitudes and widths that is within 1e-3 (relative) of either sum.
TEST(Int8Quantize, SumsCloseToFp64) {
  std::mt19937 rng(14);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  double worst_error = 0.0, worst_source = 0.0;
  for (const int cols : {16, 256, 300, 2048, 7168, 18432}) {
    for (int trial = 0; trial < 12; ++trial) {
      std::vector<float> row(static_cast<size_t>(cols));
      if (trial % 2 == 0) {
        for (int c = 0; c < cols; ++c) {
          uint8_t code = uint8_t(rng());
          if (E4M3::is_nan(code)) code = 0;
          row[size_t(c)] = e4m3_to_float(code) * e8m0_to_float(uint8_t(110 + (c / 32 * 7 + trial) % 12));
        }
      } else {
        const float magnitude = std::ldexp(1.0f, trial * 9 - 50);
        for (float& v : row) v = normal(rng) * magnitude;
      }
      const Quantized q = quantize(row);
      const Int8RowSums want = fp64_sums(row, q.codes, q.scale);
      const int k = std::ilogb(q.scale);
      const double source_bound = std::ldexp(0.5, 2 * k) * cols + 1e-7 * want.source_sq;
      const double error_bound = std::ldexp(0.5, 2 * k - 12) * cols + 1e-7 * want.error_sq;
      EXPECT_LE(std::fabs(q.sums.source_sq - want.source_sq), source_bound) << cols << "/" << trial;
      EXPECT_LE(std::fabs(q.sums.error_sq - want.error_sq), error_bound) << cols << "/" << trial;
      const double source_error = std::fabs(q.sums.source_sq - want.source_sq) / want.source_sq;
      const double error_error = std::fabs(q.sums.error_sq - want.error_sq) / want.error_sq;
      EXPECT_LE(source_error, 1e-3) << cols << "/" << trial;
      EXPECT_LE(error_error, 1e-3) << cols << "/" << trial;
      worst_source = std::max(worst_source, source_error);
      worst_error = std::max(worst_error, error_error);
    }
  }
  EXPECT_GT(worst_error, 0.0) << "no term ever rounded: the test proves nothing";
  std::printf("worst relative error: source sum %.3g, error sum %.3g\n", worst_source, worst_error);
}

// An all-zero row (signed zeros too): scale 1.0, codes 0, flagged, sums 0.
TEST(Int8Quantize, AllZeroRow) {
  for (const float zero : {0.0f, -0.0f}) {
    std::vector<float> row(96, 0.0f);
    row[7] = zero;
    row[95] = -0.0f;
    const Quantized q = quantize(row);
    EXPECT_TRUE(same_bits(q.scale, 1.0f));
    EXPECT_TRUE(std::all_of(q.codes.begin(), q.codes.end(), [](int8_t c) { return c == 0; }));
    EXPECT_TRUE(q.sums.all_zero);
    EXPECT_EQ(q.sums.source_sq, 0.0);
    EXPECT_EQ(q.sums.error_sq, 0.0);
  }
  // A single tiny value is not an all-zero row: it is amax and takes 127. Here (2^-139)
  // amax / 127 is an fp32 subnormal that rounds to 2^-146, the quotient is 128 and the
  // clamp brings it back to 127 (a whole step off: subnormal scales lose the half-step
  // bound, out of reach of any FP8 / FP4 value with a sane E8M0 scale).
  std::vector<float> row(32, 0.0f);
  row[3] = -std::numeric_limits<float>::denorm_min() * 1024;
  const Quantized q = quantize(row);
  EXPECT_FALSE(q.sums.all_zero);
  EXPECT_EQ(q.codes[3], -127);
  EXPECT_TRUE(same_bits(q.scale, row[3] / -127.0f));
  EXPECT_EQ(row[3] / q.scale, -128.0f);
}

// One huge value (10^4 times the rest): it takes +-127, everything else rounds to 0; the
// error sum is the rest's squares.
TEST(Int8Quantize, OneHugeValue) {
  for (const float huge : {1e30f, -3.0e38f, 5.0e-30f}) {
    std::vector<float> row(256);
    for (size_t i = 0; i < row.size(); ++i) row[i] = float(int(i % 7) - 3) * 0.37f * std::fabs(huge) * 1e-4f;
    row[101] = huge;
    const Quantized q = quantize(row);
    EXPECT_TRUE(same_bits(q.scale, std::fabs(huge) / 127.0f)) << huge;
    for (size_t i = 0; i < row.size(); ++i) {
      EXPECT_EQ(int(q.codes[i]), i == 101 ? (huge > 0 ? 127 : -127) : 0) << huge << " at " << i;
    }
    const Int8RowSums want = expected_sums(row, q.codes, q.scale);
    EXPECT_TRUE(same_bits(q.sums.source_sq, want.source_sq)) << huge;
    EXPECT_TRUE(same_bits(q.sums.error_sq, want.error_sq)) << huge;
  }
}

// ---------------------------------------------------------------- quantizer, random rows

// Rows of many shapes and spreads: scale = amax / 127 (fp32 division) bit for bit, max |q|
// reaches 127 exactly, no -128 ever, every code the nearest integer to x / scale (fp64:
// within half a step plus the fp32 quotient's rounding), ties to even in fp32, and the
// row's sums equal to their definition recomputed here (expected_sums).
TEST(Int8Quantize, RandomRowsInvariants) {
  std::mt19937 rng(20251017);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> spread(-30.0f, 30.0f);
  int rows = 0;
  for (const int cols : {1, 2, 31, 32, 33, 96, 1000, 2048, 7168}) {
    for (int trial = 0; trial < 40; ++trial) {
      const float magnitude = std::exp2(spread(rng));
      std::vector<float> row(static_cast<size_t>(cols));
      for (float& v : row) v = normal(rng) * magnitude * (trial % 4 == 0 ? std::exp2(spread(rng) / 4) : 1.0f);
      if (trial % 5 == 1) row[rng() % row.size()] = -std::fabs(row[0]) * 50.0f; // a negative amax
      const Quantized q = quantize(row);
      float amax = 0.0f;
      for (float v : row) amax = std::max(amax, std::fabs(v));
      ASSERT_TRUE(same_bits(q.scale, amax / 127.0f)) << cols << "/" << trial;
      int largest = 0;
      for (size_t i = 0; i < row.size(); ++i) {
        ASSERT_NE(q.codes[i], -128);
        largest = std::max(largest, std::abs(int(q.codes[i])));
        const double exact = double(row[i]) / double(q.scale);
        ASSERT_LE(std::fabs(double(q.codes[i]) - exact), 0.5 + 0x1p-16) << cols << "/" << trial << " at " << i;
        const float quotient = row[i] / q.scale; // torch's fp32 division, then RNE
        ASSERT_EQ(int(q.codes[i]), int(std::clamp(std::nearbyint(quotient), -127.0f, 127.0f)));
      }
      ASSERT_EQ(largest, 127) << cols << "/" << trial;
      ASSERT_FALSE(q.sums.all_zero);
      const Int8RowSums want = expected_sums(row, q.codes, q.scale);
      ASSERT_TRUE(same_bits(q.sums.source_sq, want.source_sq)) << cols << "/" << trial;
      ASSERT_TRUE(same_bits(q.sums.error_sq, want.error_sq)) << cols << "/" << trial;
      ++rows;
    }
  }
  EXPECT_EQ(rows, 9 * 40);
}

// amax / (amax / 127) is not always 127 in fp32: whatever the quotient, the amax element
// itself must come out as exactly +-127 (never 126, never -128), for every amax mantissa of
// a binade sampled densely.
TEST(Int8Quantize, AmaxElementIsAlways127) {
  std::vector<float> row = {0.0f, 0.0f};
  int off = 0;
  for (uint32_t mantissa = 0; mantissa < (1u << 23); mantissa += 97) {
    const float amax = std::bit_cast<float>(uint32_t(127u << 23) | mantissa);
    off += amax / (amax / 127.0f) != 127.0f;
    for (const float sign : {1.0f, -1.0f}) {
      row[0] = sign * amax;
      row[1] = -sign * amax * 0.5f;
      int8_t codes[2];
      quantize_row_int8_ref(row.data(), 2, codes, nullptr); // sums are optional
      ASSERT_EQ(int(codes[0]), sign > 0 ? 127 : -127) << amax;
      ASSERT_LE(std::abs(int(codes[1]) + int(sign) * 64), 1) << amax; // -63.5 -> -64 or -63
    }
  }
  EXPECT_GT(off, 0) << "no amax whose fp32 quotient misses 127: the clamp is never exercised";
}

TEST(Int8Quantize, DequantizeIsCodeTimesScale) {
  const std::vector<int8_t> codes = as_codes({-127, -1, 0, 1, 64, 127});
  std::vector<float> out(codes.size());
  dequantize_row_int8(codes.data(), 0.0123f, int(codes.size()), out.data());
  for (size_t i = 0; i < codes.size(); ++i) EXPECT_TRUE(same_bits(out[i], float(codes[i]) * 0.0123f));
}

// ---------------------------------------------------------------- codecs

namespace {

constexpr int kFp8Block = 32;

// An FP8 linear of the source [rows, cols] with E8M0 scales [ceil(rows/32), ceil(cols/32)].
struct Fp8Linear {
  int rows = 0, cols = 0;
  std::vector<uint8_t> codes, scales;
  int scale_cols() const { return (cols + kFp8Block - 1) / kFp8Block; }
  // docs/formats.md: value = E4M3(code) * 2^(scale - 127), the scale of its 32x32 block.
  float value(int r, int c) const {
    return e4m3_to_float(codes[size_t(r) * size_t(cols) + size_t(c)]) *
           e8m0_to_float(scales[size_t(r / kFp8Block) * size_t(scale_cols()) + size_t(c / kFp8Block)]);
  }
};

Fp8Linear random_fp8_linear(int rows, int cols, uint32_t seed) {
  Fp8Linear l{rows, cols, std::vector<uint8_t>(size_t(rows) * size_t(cols)), {}};
  l.scales.resize(size_t((rows + 31) / 32) * size_t(l.scale_cols()));
  std::mt19937 rng(seed);
  for (auto& c : l.codes) {
    c = uint8_t(rng());
    if (E4M3::is_nan(c)) c = 0x7E; // the largest finite code instead of NaN
  }
  for (auto& s : l.scales) s = uint8_t(112 + rng() % 20);
  return l;
}

// A DeepSeek FP4 expert [rows, cols]: two E2M1 codes per byte (low nibble = even column),
// one E8M0 scale per 32 values of a row.
struct Fp4Expert {
  int rows = 0, cols = 0;
  std::vector<uint8_t> packed, scales;
  float value(int r, int c) const {
    static constexpr float e2m1[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                       -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
    const uint8_t byte = packed[size_t(r) * size_t(cols / 2) + size_t(c / 2)];
    const uint8_t nibble = c % 2 == 0 ? byte & 0xF : byte >> 4;
    return e2m1[nibble] * e8m0_to_float(scales[size_t(r) * size_t(cols / 32) + size_t(c / 32)]);
  }
};

Task int8_task(CodecKind codec, int rows, int cols, bool fp8) {
  Task task;
  task.name = fp8 ? "layers.0.attn.wq_b" : "layers.0.ffn.experts.0.w1";
  task.codec = codec;
  task.inputs = {task.name + ".weight", task.name + ".scale"};
  const bool bf16 = codec == CodecKind::fp8_to_bf16 || codec == CodecKind::fp4_to_bf16;
  if (bf16) {
    task.outputs = {{task.name + ".weight", Dtype::BF16, {uint64_t(rows), uint64_t(cols)}}};
  } else {
    task.outputs = {{task.name + ".weight", Dtype::I8, {uint64_t(rows), uint64_t(cols)}},
                    {task.name + ".weight_scale", Dtype::F32, {uint64_t(rows), 1}}};
  }
  task.rows = uint64_t(rows);
  task.cols = cols;
  task.row_alignment = fp8 ? kFp8Block : 1;
  task.rows_per_chunk = fp8 ? 64 : 16;
  if (fp8) task.input_row_groups = {1, uint32_t(kFp8Block)};
  return task;
}

// The chunk's rows decoded here, quantized by the reference: the codec's expected output
// (its figures on the report's rows only).
struct Expected {
  std::vector<uint8_t> codes, scales;
  ChunkStats stats;
};

template <class Source>
Expected expected_int8(const Source& source, uint64_t first, uint64_t rows) {
  Expected e;
  const int cols = source.cols;
  e.codes.resize(rows * uint64_t(cols));
  e.scales.resize(rows * 4);
  std::vector<float> x(static_cast<size_t>(cols));
  for (uint64_t r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) x[size_t(c)] = source.value(int(first + r), c);
    Int8RowSums sums;
    const float scale = quantize_row_int8_ref(x.data(), cols, reinterpret_cast<int8_t*>(e.codes.data() + r * uint64_t(cols)), &sums);
    std::memcpy(e.scales.data() + r * 4, &scale, 4);
    ++e.stats.rows;
    ++e.stats.blocks;
    e.stats.zero_blocks += sums.all_zero ? 1 : 0;
    if ((first + r) % 16 != 0) continue; // the report's sample: rows 0, 16, 32, ... of the tensor
    e.stats.reference_sq.add(sums.source_sq);
    e.stats.error_sq.add(sums.error_sq);
  }
  return e;
}

void expect_chunk(const EncodedChunk& got, const Expected& want, const std::string& where) {
  ASSERT_EQ(got.buffers.size(), 2u) << where;
  EXPECT_EQ(got.buffers[0], want.codes) << where << ": codes";
  EXPECT_EQ(got.buffers[1], want.scales) << where << ": scales";
  EXPECT_EQ(got.stats, want.stats) << where << ": figures";
  const int8_t* codes = reinterpret_cast<const int8_t*>(got.buffers[0].data());
  EXPECT_EQ(std::count(codes, codes + got.buffers[0].size(), int8_t(-128)), 0) << where;
}

bool encode(const Task& task, uint64_t first, uint64_t rows, std::span<const uint8_t> codes,
            std::span<const uint8_t> scales, EncodedChunk& out) {
  const CodecParams params;
  const EncodeContext context{params, 0.0f, nullptr};
  const ChunkInput chunk{task, first, rows, {codes, scales}, nullptr};
  return encode_chunk(chunk, context, out, nullptr);
}

// The StageError encoding the chunk throws, or "" (and a test failure) if it encodes.
std::string encode_error(const Task& task, uint64_t first, uint64_t rows, std::span<const uint8_t> codes,
                         std::span<const uint8_t> scales) {
  EncodedChunk out;
  try {
    encode(task, first, rows, codes, scales, out);
  } catch (const StageError& e) {
    return e.what();
  }
  ADD_FAILURE() << codec_name(task.codec) << ": the chunk was encoded";
  return "";
}

// The spans of an FP8 linear that chunk rows [first, first + rows) read.
struct Fp8ChunkSpans {
  std::span<const uint8_t> codes, scales;
};

Fp8ChunkSpans fp8_spans(const Task& task, const Fp8Linear& l, uint64_t first, uint64_t rows) {
  const uint64_t scale_first = task.input_first_row(1, first), scale_rows = task.input_row_count(1, first, rows);
  return {std::span<const uint8_t>(l.codes).subspan(first * uint64_t(l.cols), rows * uint64_t(l.cols)),
          std::span<const uint8_t>(l.scales).subspan(scale_first * uint64_t(l.scale_cols()), scale_rows * uint64_t(l.scale_cols()))};
}

} // namespace

// An FP8 linear [100, 96] (SIMD decode) and [100, 80] (a partial last column block, the
// scalar decode), chunk rows [32, 72) (scale rows 1 and 2, i.e. two 32-row blocks, the
// second partial) and the tail [64, 100): bytes and figures equal to the hand decode +
// the reference quantizer. Row 40 is all zero codes (scale 1, counted).
TEST(Int8Codec, Fp8BlockScaledChunkFromRow32) {
  for (const int cols : {96, 80, 33}) {
    Fp8Linear l = random_fp8_linear(100, cols, 7u + uint32_t(cols));
    std::fill_n(l.codes.begin() + 40 * cols, cols, uint8_t(0x80)); // -0.0 codes
    const Task task = int8_task(CodecKind::fp8_to_int8, 100, cols, true);
    for (const auto& [first, rows] : {std::pair<uint64_t, uint64_t>{32, 40}, {64, 36}, {0, 100}}) {
      const std::string where = "cols " + std::to_string(cols) + " rows [" + std::to_string(first) + ", " +
                                std::to_string(first + rows) + ")";
      const Fp8ChunkSpans spans = fp8_spans(task, l, first, rows);
      EncodedChunk out;
      ASSERT_TRUE(encode(task, first, rows, spans.codes, spans.scales, out)) << where;
      const Expected want = expected_int8(l, first, rows);
      expect_chunk(out, want, where);
      EXPECT_EQ(out.stats.zero_blocks, first <= 40 && 40 < first + rows ? 1u : 0u) << where;
      float zero_row_scale;
      if (first <= 40 && 40 < first + rows) {
        std::memcpy(&zero_row_scale, out.buffers[1].data() + (40 - first) * 4, 4);
        EXPECT_EQ(zero_row_scale, 1.0f) << where;
      }
    }
  }
}

// Small linears of one shape share a task (codec.h LinearSlots): a chunk of three FP8
// linears gives each linear's bytes in its slots, as three tasks of one would, and the sum
// of their figures; the same for BF16 (one output a linear). A NaN code in the second
// linear names that linear's tensor.
TEST(Int8Codec, LinearsSharingATaskEncodeAsEachAlone) {
  for (const CodecKind codec : {CodecKind::fp8_to_int8, CodecKind::fp8_to_bf16}) {
    const Task one = int8_task(codec, 64, 96, true);
    Task shared = one;
    shared.inputs.clear();
    shared.outputs.clear();
    shared.input_row_groups.clear();
    std::vector<Fp8Linear> linears;
    for (int l = 0; l < 3; ++l) {
      linears.push_back(random_fp8_linear(64, 96, 500u + uint32_t(l)));
      const std::string module = "layers.0.ffn.experts." + std::to_string(l) + ".w1";
      shared.inputs.insert(shared.inputs.end(), {module + ".weight", module + ".scale"});
      for (TensorSpec spec : one.outputs) {
        spec.name = module + spec.name.substr(one.name.size());
        shared.outputs.push_back(spec);
      }
      shared.input_row_groups.insert(shared.input_row_groups.end(), {1, uint32_t(kFp8Block)});
    }
    shared.stacked_tensors = 3;
    ASSERT_EQ(linear_count(shared), 3u);
    std::vector<std::span<const uint8_t>> inputs;
    for (const auto& l : linears) inputs.insert(inputs.end(), {l.codes, l.scales});
    const CodecParams params;
    const EncodeContext context{params, 0.0f, nullptr};
    EncodedChunk got;
    ASSERT_TRUE(encode_chunk(ChunkInput{shared, 0, 64, inputs, nullptr}, context, got, nullptr));
    ChunkStats want_stats;
    for (size_t l = 0; l < linears.size(); ++l) {
      EncodedChunk alone;
      ASSERT_TRUE(encode(one, 0, 64, linears[l].codes, linears[l].scales, alone));
      const LinearSlots slots = linear_slots(shared, l);
      EXPECT_EQ(got.buffers[slots.output], alone.buffers[0]) << codec_name(codec) << " linear " << l;
      if (slots.output_scale) {
        EXPECT_EQ(got.buffers[*slots.output_scale], alone.buffers[1]) << "linear " << l;
      }
      want_stats.merge(alone.stats);
    }
    EXPECT_EQ(got.buffers.size(), shared.outputs.size());
    EXPECT_EQ(got.stats, want_stats) << codec_name(codec);
    linears[1].codes[5 * 96 + 7] = 0x7F; // NaN
    inputs[2] = linears[1].codes;
    try {
      encode_chunk(ChunkInput{shared, 0, 64, inputs, nullptr}, context, got, nullptr);
      FAIL() << "a NaN code in a shared task went unnoticed";
    } catch (const StageError& e) {
      EXPECT_THAT(e.what(), HasSubstr("layers.0.ffn.experts.1.w1.weight: row 5 column 7"));
    }
  }
}

// Chunks add up: [32, 64) + [64, 100) give the bytes and the figures of [32, 100) in one.
TEST(Int8Codec, Fp8ChunksConcatenate) {
  const Fp8Linear l = random_fp8_linear(100, 96, 99);
  const Task task = int8_task(CodecKind::fp8_to_int8, 100, 96, true);
  EncodedChunk whole, a, b;
  auto spans = fp8_spans(task, l, 32, 68);
  ASSERT_TRUE(encode(task, 32, 68, spans.codes, spans.scales, whole));
  spans = fp8_spans(task, l, 32, 32);
  ASSERT_TRUE(encode(task, 32, 32, spans.codes, spans.scales, a));
  spans = fp8_spans(task, l, 64, 36);
  ASSERT_TRUE(encode(task, 64, 36, spans.codes, spans.scales, b));
  std::vector<uint8_t> codes = a.buffers[0], scales = a.buffers[1];
  codes.insert(codes.end(), b.buffers[0].begin(), b.buffers[0].end());
  scales.insert(scales.end(), b.buffers[1].begin(), b.buffers[1].end());
  EXPECT_EQ(codes, whole.buffers[0]);
  EXPECT_EQ(scales, whole.buffers[1]);
  ChunkStats merged = a.stats;
  merged.merge(b.stats);
  EXPECT_EQ(merged, whole.stats);
}

// DeepSeek FP4 expert rows [5, 21) of a [24, 128] expert: low nibble = even column, one
// E8M0 per 32 of a row (scale byte 0 = 2^-127 included); row 9 all zero codes (0x00 and
// 0x88 bytes: +-0) is an all-zero row.
TEST(Int8Codec, Fp4ExpertRows) {
  Fp4Expert e{24, 128, std::vector<uint8_t>(24 * 64), std::vector<uint8_t>(24 * 4)};
  std::mt19937 rng(4);
  for (auto& b : e.packed) b = uint8_t(rng());
  for (auto& s : e.scales) s = uint8_t(110 + rng() % 25);
  e.scales[6 * 4 + 2] = 0; // 2^-127: subnormal fp32 values
  for (int c = 0; c < 64; ++c) e.packed[9 * 64 + size_t(c)] = c % 2 ? 0x88 : 0x00;
  e.packed[12 * 64] = 0x71; // row 12: column 0 = +0.5, column 1 = +6 (low nibble first)
  EXPECT_EQ(e.value(12, 0), 0.5f * e8m0_to_float(e.scales[12 * 4]));
  EXPECT_EQ(e.value(12, 1), 6.0f * e8m0_to_float(e.scales[12 * 4]));
  const Task task = int8_task(CodecKind::fp4_to_int8, 24, 128, false);
  const uint64_t first = 5, rows = 16;
  EncodedChunk out;
  ASSERT_TRUE(encode(task, first, rows, std::span<const uint8_t>(e.packed).subspan(first * 64, rows * 64),
                     std::span<const uint8_t>(e.scales).subspan(first * 4, rows * 4), out));
  const Expected want = expected_int8(e, first, rows);
  expect_chunk(out, want, "fp4 rows [5, 21)");
  EXPECT_EQ(out.stats.zero_blocks, 1u);
  float scale9;
  std::memcpy(&scale9, out.buffers[1].data() + (9 - first) * 4, 4);
  EXPECT_EQ(scale9, 1.0f);
  // Row 12's column 1 (6 x its scale) is not necessarily the amax; its code is 127 iff it is.
  for (uint64_t r = 0; r < rows; ++r) {
    if (first + r == 9) continue;
    const int8_t* codes = reinterpret_cast<const int8_t*>(out.buffers[0].data() + r * 128);
    int largest = 0;
    for (int c = 0; c < 128; ++c) largest = std::max(largest, std::abs(int(codes[c])));
    EXPECT_EQ(largest, 127) << "row " << first + r;
  }
}

// Ignored modules: every value the RNE BF16 of the decoded source, little-endian.
TEST(Int8Codec, Bf16OfFp8AndFp4Rows) {
  const Fp8Linear l = random_fp8_linear(64, 80, 5);
  const Task task = int8_task(CodecKind::fp8_to_bf16, 64, 80, true);
  const auto spans = fp8_spans(task, l, 32, 32);
  EncodedChunk out;
  ASSERT_TRUE(encode(task, 32, 32, spans.codes, spans.scales, out));
  ASSERT_EQ(out.buffers.size(), 1u);
  ASSERT_EQ(out.buffers[0].size(), 32u * 80 * 2);
  for (int r = 0; r < 32; ++r) {
    for (int c = 0; c < 80; ++c) {
      const size_t at = (size_t(r) * 80 + size_t(c)) * 2;
      const uint16_t got = uint16_t(out.buffers[0][at] | out.buffers[0][at + 1] << 8);
      ASSERT_EQ(got, bf16_from_float(l.value(32 + r, c))) << r << ", " << c;
    }
  }
  Fp4Expert e{4, 64, std::vector<uint8_t>(4 * 32), std::vector<uint8_t>(4 * 2)};
  std::mt19937 rng(6);
  for (auto& b : e.packed) b = uint8_t(rng());
  for (auto& s : e.scales) s = uint8_t(100 + rng() % 40);
  const Task fp4 = int8_task(CodecKind::fp4_to_bf16, 4, 64, false);
  ASSERT_TRUE(encode(fp4, 1, 3, std::span<const uint8_t>(e.packed).subspan(32, 96), std::span<const uint8_t>(e.scales).subspan(2, 6), out));
  for (int r = 0; r < 3; ++r) {
    for (int c = 0; c < 64; ++c) {
      const size_t at = (size_t(r) * 64 + size_t(c)) * 2;
      ASSERT_EQ(uint16_t(out.buffers[0][at] | out.buffers[0][at + 1] << 8), bf16_from_float(e.value(1 + r, c)));
    }
  }
}

// Bad source bytes: a NaN E4M3 code or a NaN E8M0 scale is refused, naming the tensor and
// the absolute row and column.
TEST(Int8Codec, NanInputNamesTensorRowColumn) {
  Fp8Linear l = random_fp8_linear(96, 64, 8);
  const Task task = int8_task(CodecKind::fp8_to_int8, 96, 64, true);
  l.codes[size_t(37) * 64 + 7] = 0xFF;
  auto spans = fp8_spans(task, l, 32, 64);
  EncodedChunk out;
  try {
    encode(task, 32, 64, spans.codes, spans.scales, out);
    FAIL() << "a NaN code was accepted";
  } catch (const StageError& e) {
    EXPECT_NE(std::string(e.what()).find("layers.0.attn.wq_b.weight: row 37 column 7"), std::string::npos) << e.what();
  }
  l.codes[size_t(37) * 64 + 7] = 0x00;
  l.scales[size_t(2) * 2 + 1] = E8M0::nan_code; // scale row 2 (weight rows 64..95), column block 1
  spans = fp8_spans(task, l, 32, 64);
  try {
    encode(task, 32, 64, spans.codes, spans.scales, out);
    FAIL() << "a NaN scale was accepted";
  } catch (const StageError& e) {
    EXPECT_NE(std::string(e.what()).find("layers.0.attn.wq_b.scale: row 2 column 1"), std::string::npos) << e.what();
  }
}

// A code times its scale past fp32's range (448 x 2^123) is refused, INT8 or BF16, naming
// tensor, row, column and scale byte: it was written as an infinite weight_scale over zero
// codes (or an infinite BF16), with the run reporting success.
TEST(Int8Codec, ValuePastFp32RangeRefused) {
  Fp8Linear l = random_fp8_linear(96, 64, 10);
  for (size_t r = 32; r < 64; ++r) std::fill_n(l.codes.begin() + ptrdiff_t(r * 64), 32, uint8_t(0));
  l.scales[size_t(1) * 2 + 0] = 250;     // scale row 1 (weight rows 32..63), column block 0: 2^123
  l.codes[size_t(40) * 64 + 3] = 0x7E;   // 448
  for (const CodecKind codec : {CodecKind::fp8_to_int8, CodecKind::fp8_to_bf16}) {
    const Task task = int8_task(codec, 96, 64, true);
    const auto spans = fp8_spans(task, l, 32, 64);
    EXPECT_THAT(encode_error(task, 32, 64, spans.codes, spans.scales),
                ::testing::HasSubstr("layers.0.attn.wq_b.weight: row 40 column 3: decodes to inf "
                                     "(E8M0 scale byte 250 of 'layers.0.attn.wq_b.scale')"));
  }
  // An FP4 expert: 6 x 2^127 (scale byte 254) at row 2 column 37 (its second block).
  Fp4Expert e{4, 64, std::vector<uint8_t>(4 * 32, 0), std::vector<uint8_t>(4 * 2, 127)};
  e.scales[2 * 2 + 1] = 254;
  e.packed[2 * 32 + 37 / 2] = uint8_t(0x7 << 4); // odd column: the high nibble; E2M1 code 7 is 6
  for (const CodecKind codec : {CodecKind::fp4_to_int8, CodecKind::fp4_to_bf16}) {
    EXPECT_THAT(encode_error(int8_task(codec, 4, 64, false), 0, 4, e.packed, e.scales),
                ::testing::HasSubstr("layers.0.ffn.experts.0.w1.weight: row 2 column 37: decodes to inf "
                                     "(E8M0 scale byte 254 of 'layers.0.ffn.experts.0.w1.scale')"));
  }
}

// A cancelled chunk is dropped (false), not half-written as a success.
TEST(Int8Codec, CancelReturnsFalse) {
  const Fp8Linear l = random_fp8_linear(64, 32, 9);
  const Task task = int8_task(CodecKind::fp8_to_int8, 64, 32, true);
  const auto spans = fp8_spans(task, l, 0, 64);
  const CodecParams params;
  const EncodeContext context{params, 0.0f, nullptr};
  const ChunkInput chunk{task, 0, 64, {spans.codes, spans.scales}, nullptr};
  EncodedChunk out;
  const std::atomic<bool> cancel{true};
  EXPECT_FALSE(encode_chunk(chunk, context, out, &cancel));
}
