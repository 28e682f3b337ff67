// W8A8 INT8 rows (kernels/int8.h) on Highway SIMD, dispatched at run time (foreach_target):
// the float row quantizer and the fused decode + quantize of FP8 and FP4 source rows.
// Bit-identical to quantize_row_int8_ref (after the scalar decode, for the fused rows):
// - the scale is the ref's own scalar expression of the amax (a max is exact in any order);
// - a code is the fp32 quotient x / scale (vector division is IEEE-exact) rounded half to
//   even by adding 1.5 * 2^23, where fp32 rounds at ulp 1: the code is the sum's low byte;
// - the report terms are exact in fp64 (kernels/int8.h), so a fused multiply-add rounds as
//   the ref's product then sum; lane l of the lanes vectors is the ref's lane l.
// Rows whose scale is not a normal fp32 number take the ref's element arithmetic instead.
// Built with -ffp-contract=off; tests/unit/test_int8_simd.cpp holds every compiled target
// to the ref.
#include <algorithm>
#include <cfloat>
#include <cmath>

#include "kernels/formats.h"
#include "kernels/int8.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/int8_simd.cpp"
#include "hwy/foreach_target.h" // IWYU pragma: keep
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace shardq {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

constexpr size_t kSumLanes = Int8::sum_lanes;
constexpr float kMaxCode = float(Int8::max_code);
constexpr int kSourceBlock = 32; // columns per E8M0 scale of a source row

// A row's report sums by lane (kernels/int8.h), kept between the passes over its tiles.
struct LaneSums {
  HWY_ALIGN double source_sq[kSumLanes] = {};
  HWY_ALIGN double error_sq[kSumLanes] = {};
};

Int8RowSums FoldLanes(const LaneSums& lanes, bool all_zero) {
  return {fold_int8_sum_lanes(lanes.source_sq), fold_int8_sum_lanes(lanes.error_sq), all_zero};
}

HWY_INLINE float ScaleOf(float amax) { return amax == 0.0f ? 1.0f : amax / kMaxCode; }

// With a normal scale every |x| <= amax has |x / scale| <= 127 * (1 + 2^-23) < 127.5: the
// rounding alone stays within [-127, 127] (no clamp) and no quotient is inf or NaN. A
// subnormal scale (amax below 127 * 2^-126) or an infinite one does not promise that.
HWY_INLINE bool VectorScale(float scale) { return scale >= FLT_MIN && scale <= FLT_MAX; }

// The ref's element at `column`: its code and its terms added to its lane.
HWY_INLINE void QuantizeElement(float x, size_t column, float scale, int8_t* codes, LaneSums& lanes) {
  const float q = std::clamp(std::nearbyint(x / scale), -kMaxCode, kMaxCode);
  codes[column] = int8_t(q);
  const double error = double(q * scale) - double(x);
  lanes.source_sq[column % kSumLanes] += double(x) * double(x);
  lanes.error_sq[column % kSumLanes] += error * error;
}

#if HWY_TARGET != HWY_SCALAR // two halves of a vector widen to fp64
using DF = hn::CappedTag<float, kSumLanes>;
using DH = hn::Half<DF>;
using DD = hn::Repartition<double, DF>; // one half of DF's lanes, widened
using DU = hn::RebindToUnsigned<DF>;
using DI = hn::RebindToSigned<DF>;
using D8 = hn::Rebind<uint8_t, DF>;
using VF = hn::Vec<DF>;
using VD = hn::Vec<DD>;

// y + 1.5 * 2^23 for |y| < 2^22 lies in [2^23, 2^24), where the fp32 ulp is 1: the add rounds
// y half to even (the constant is even), and the sum's bits are 0x4B400000 + round(y).
constexpr float kRoundingBias = 12582912.0f;

// max |x[i]| over the whole vectors of [0, count); returns how many columns it covered.
HWY_INLINE size_t MaxAbsVectors(const float* x, size_t count, float& amax) {
  const DF df;
  const size_t n = hn::Lanes(df);
  // Two maxima in turn: a single one's latency would bound the loop.
  VF max_even = hn::Zero(df), max_odd = hn::Zero(df);
  size_t i = 0;
  for (; i + 2 * n <= count; i += 2 * n) {
    max_even = hn::Max(max_even, hn::Abs(hn::LoadU(df, x + i)));
    max_odd = hn::Max(max_odd, hn::Abs(hn::LoadU(df, x + i + n)));
  }
  if (i + n <= count) {
    max_even = hn::Max(max_even, hn::Abs(hn::LoadU(df, x + i)));
    i += n;
  }
  amax = std::max(amax, hn::GetLane(hn::MaxOfLanes(df, hn::Max(max_even, max_odd))));
  return i;
}

// Columns [0, count) of x (count a multiple of kSumLanes, x at a column that is one too)
// with a normal scale: codes, and the terms added to `lanes`. Lane group g of every
// kSumLanes-column step is one vector; each group runs through the columns with its own
// accumulators (one pass on a target whose vector holds all the lanes).
HWY_INLINE void QuantizeVectors(const float* x, size_t count, float scale, int8_t* codes, LaneSums& lanes) {
  const DF df;
  const DH dh;
  const DD dd;
  const DU du;
  const D8 d8;
  const size_t n = hn::Lanes(df), half = n / 2;
  const VF divisor = hn::Set(df, scale), bias = hn::Set(df, kRoundingBias);
  uint8_t* bytes = reinterpret_cast<uint8_t*>(codes);
  for (size_t group = 0; group < kSumLanes; group += n) {
    VD source_lo = hn::Load(dd, lanes.source_sq + group), source_hi = hn::Load(dd, lanes.source_sq + group + half);
    VD error_lo = hn::Load(dd, lanes.error_sq + group), error_hi = hn::Load(dd, lanes.error_sq + group + half);
    for (size_t i = group; i < count; i += kSumLanes) {
      const VF v = hn::LoadU(df, x + i);
      const VF rounded = hn::Add(hn::Div(v, divisor), bias);
      hn::StoreU(hn::TruncateTo(d8, hn::BitCast(du, rounded)), d8, bytes + i);
      // q * scale - x is exact in fp32 (int8.h), so it widens to the ref's fp64 difference.
      const VF error = hn::Sub(hn::Mul(hn::Sub(rounded, bias), divisor), v);
      const VD v_lo = hn::PromoteTo(dd, hn::LoadU(dh, x + i)), v_hi = hn::PromoteTo(dd, hn::LoadU(dh, x + i + half));
      source_lo = hn::MulAdd(v_lo, v_lo, source_lo);
      source_hi = hn::MulAdd(v_hi, v_hi, source_hi);
      const VD e_lo = hn::PromoteTo(dd, hn::LowerHalf(dh, error)), e_hi = hn::PromoteTo(dd, hn::UpperHalf(dh, error));
      error_lo = hn::MulAdd(e_lo, e_lo, error_lo);
      error_hi = hn::MulAdd(e_hi, e_hi, error_hi);
    }
    hn::Store(source_lo, dd, lanes.source_sq + group);
    hn::Store(source_hi, dd, lanes.source_sq + group + half);
    hn::Store(error_lo, dd, lanes.error_sq + group);
    hn::Store(error_hi, dd, lanes.error_sq + group + half);
  }
}

// n E4M3 codes times their block's scale, as e4m3_to_float(code) * e8m0_to_float(scale):
// the value built from its fields (no NaN code: a precondition), then one fp32 product.
HWY_INLINE VF DecodeFp8(const uint8_t* codes, VF scale) {
  const DF df;
  const DU du;
  const auto code = hn::PromoteTo(du, hn::LoadU(D8(), codes));
  const auto magnitude = hn::And(code, hn::Set(du, 0x7Fu));
  const auto normal = hn::Add(hn::ShiftLeft<20>(magnitude), hn::Set(du, (127u - E4M3::bias) << 23));
  const auto subnormal =
      hn::BitCast(du, hn::Mul(hn::ConvertTo(df, hn::BitCast(DI(), magnitude)), hn::Set(df, E4M3::min_subnormal)));
  auto bits = hn::IfThenElse(hn::Lt(magnitude, hn::Set(du, 8u)), subnormal, normal);
  bits = hn::Or(bits, hn::ShiftLeft<24>(hn::And(code, hn::Set(du, 0x80u))));
  return hn::Mul(hn::BitCast(df, bits), scale);
}

// n E2M1 values (n / 2 bytes, low nibble first) times their block's scale, as
// e2m1_to_float(nibble) * e8m0_to_float(scale).
HWY_INLINE VF DecodeFp4(const uint8_t* packed, VF scale) {
  const DF df;
  const DU du;
  const hn::Rebind<uint16_t, DH> d16;
  const auto bytes = hn::PromoteTo(d16, hn::LoadU(hn::Rebind<uint8_t, DH>(), packed));
  // Each byte's low nibble into the low byte of its u16, the high one into the high byte:
  // nibbles in column order.
  const auto split = hn::Or(hn::And(bytes, hn::Set(d16, uint16_t{0x0F})),
                            hn::ShiftLeft<4>(hn::And(bytes, hn::Set(d16, uint16_t{0xF0}))));
  const auto nibble = hn::PromoteTo(du, hn::BitCast(D8(), split));
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  // 16 lanes: the nibbles index the E2M1 table in one permute.
  const VF value = hn::TableLookupLanes(hn::LoadU(df, E2M1::values.data()), hn::IndicesFromVec(df, hn::BitCast(DI(), nibble)));
#else
  const auto magnitude = hn::And(nibble, hn::Set(du, 7u));
  // 0 and 0.5 below code 2; from there the fp32 fields (code + 252) << 22: 1, 1.5, 2, 3, 4, 6.
  const VF small = hn::Mul(hn::ConvertTo(df, hn::BitCast(DI(), magnitude)), hn::Set(df, 0.5f));
  const VF large = hn::BitCast(df, hn::ShiftLeft<22>(hn::Add(magnitude, hn::Set(du, 252u))));
  VF value = hn::IfThenElse(hn::RebindMask(df, hn::Lt(magnitude, hn::Set(du, 2u))), small, large);
  value = hn::Or(value, hn::BitCast(df, hn::ShiftLeft<28>(hn::And(nibble, hn::Set(du, 8u)))));
#endif
  return hn::Mul(value, scale);
}

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2 // F16C
// The same values as DecodeFp8 where the CPU converts fp16 in hardware: s eeee mmm -> the
// fp16 s 0eeee mmm0000000, which is the E4M3 value times 2^-8 exactly (subnormals too).
// Then one fp32 product with 2^8 times the block scale, which rounds as the ref's product
// (the same real number): `scale` is e8m0_to_float(byte + 8), so byte <= kLargestFp16Scale.
HWY_INLINE VF DecodeFp8ViaFp16(const uint8_t* codes, VF scale) {
  const hn::Rebind<int16_t, DF> d16;
  const auto high = hn::ShiftLeft<8>(hn::PromoteTo(d16, hn::LoadU(D8(), codes)));      // code in bits 15..8
  const auto bits = hn::And(hn::ShiftRight<1>(high), hn::Set(d16, int16_t(0xBFFF))); // sign stays, bit 14 cleared
  return hn::Mul(hn::PromoteTo(DF(), hn::BitCast(hn::Rebind<hwy::float16_t, DF>(), bits)), scale);
}
constexpr uint8_t kLargestFp16Scale = E8M0::max_code - 8; // 2^8 times a larger scale is past fp32
#endif
#endif

// max |x[i]| over [0, count), folded into amax.
HWY_INLINE float MaxAbs(const float* x, size_t count, float amax) {
  size_t i = 0;
#if HWY_TARGET != HWY_SCALAR
  i = MaxAbsVectors(x, count, amax);
#endif
  for (; i < count; ++i) amax = std::max(amax, std::fabs(x[i]));
  return amax;
}

// Columns [first, first + count) of a row whose scale is known, x at column `first` (a
// multiple of kSumLanes): vectors where the scale allows, the ref's elements for the rest.
HWY_INLINE void QuantizeColumns(const float* x, size_t first, size_t count, float scale, int8_t* codes,
                                LaneSums& lanes) {
  size_t vectors = 0;
#if HWY_TARGET != HWY_SCALAR
  // A vector must hold a whole number of lane groups (a scalable vector of 12 floats would
  // not: its lanes would straddle the sums' lanes).
  if (VectorScale(scale) && kSumLanes % hn::Lanes(DF()) == 0) {
    vectors = count / kSumLanes * kSumLanes;
    QuantizeVectors(x, vectors, scale, codes + first, lanes);
  }
#endif
  for (size_t i = vectors; i < count; ++i) QuantizeElement(x[i], first + i, scale, codes, lanes);
}

float QuantizeRowInt8(const float* x, int cols, int8_t* codes, Int8RowSums* sums) {
  const float amax = MaxAbs(x, size_t(cols), 0.0f);
  const float scale = ScaleOf(amax);
  LaneSums lanes;
  QuantizeColumns(x, 0, size_t(cols), scale, codes, lanes);
  if (sums) *sums = FoldLanes(lanes, amax == 0.0f);
  return scale;
}

// ------------------------------------------------------------ source rows
// A source row is decoded a tile at a time into a stack buffer. A row of one tile is
// decoded once; a longer one twice (for the amax, then for the codes), which keeps the
// buffer in L1 whatever the width.
constexpr size_t kTileCols = 8192; // 32 KiB: a whole row of DeepSeek's 7168-wide linears
static_assert(kTileCols % kSourceBlock == 0 && kTileCols % kSumLanes == 0);

// decode(first, count, out, amax) writes columns [first, first + count) of the row (first a
// multiple of kTileCols) as fp32 and returns amax folded with their max |x|.
template <class Decode>
HWY_INLINE float QuantizeSourceRow(const Decode& decode, int cols, int8_t* codes, Int8RowSums* sums) {
  HWY_ALIGN float tile[kTileCols];
  const size_t width = size_t(cols);
  float amax = 0.0f;
  for (size_t first = 0; first < width; first += kTileCols)
    amax = decode(first, std::min(kTileCols, width - first), tile, amax);
  const float scale = ScaleOf(amax);
  LaneSums lanes;
  for (size_t first = 0; first < width; first += kTileCols) {
    const size_t count = std::min(kTileCols, width - first);
    if (width > kTileCols) decode(first, count, tile, 0.0f);
    QuantizeColumns(tile, first, count, scale, codes, lanes);
  }
  if (sums) *sums = FoldLanes(lanes, amax == 0.0f);
  return scale;
}

// Columns [first, first + count) of a source row into out, first a multiple of
// kSourceBlock; returns amax folded with their max |x|. Each block's whole vectors come from
// `vector(column, e8m0_to_float(scale byte + vector_scale_shift) in every lane)`, the rest
// from `element(column, e8m0_to_float(scale byte))`.
template <class Vector, class Element>
HWY_INLINE float DecodeBlocks(const uint8_t* scales, size_t first, size_t count, float* out,
                              [[maybe_unused]] int vector_scale_shift, [[maybe_unused]] const Vector& vector,
                              const Element& element, float amax) {
  const size_t end = first + count;
#if HWY_TARGET != HWY_SCALAR
  const DF df;
  const size_t n = hn::Lanes(df);
  // Two maxima in turn: a single one's latency would bound the loop.
  VF max_even = hn::Zero(df), max_odd = hn::Zero(df);
#endif
  for (size_t block = first; block < end; block += kSourceBlock) {
    const uint8_t scale_code = scales[block / kSourceBlock];
    const size_t block_end = std::min(block + kSourceBlock, end);
    size_t column = block;
#if HWY_TARGET != HWY_SCALAR
    const VF scale = hn::Set(df, e8m0_to_float(uint8_t(scale_code + vector_scale_shift)));
    for (; column + 2 * n <= block_end; column += 2 * n) {
      const VF even = vector(column, scale), odd = vector(column + n, scale);
      hn::StoreU(even, df, out + column - first);
      hn::StoreU(odd, df, out + column + n - first);
      max_even = hn::Max(max_even, hn::Abs(even));
      max_odd = hn::Max(max_odd, hn::Abs(odd));
    }
    for (; column + n <= block_end; column += n) {
      const VF even = vector(column, scale);
      hn::StoreU(even, df, out + column - first);
      max_even = hn::Max(max_even, hn::Abs(even));
    }
#endif
    const float element_scale = e8m0_to_float(scale_code);
    for (; column < block_end; ++column) {
      out[column - first] = element(column, element_scale);
      amax = std::max(amax, std::fabs(out[column - first]));
    }
  }
#if HWY_TARGET != HWY_SCALAR
  amax = std::max(amax, hn::GetLane(hn::MaxOfLanes(df, hn::Max(max_even, max_odd))));
#endif
  return amax;
}

// A source row's decode for QuantizeSourceRow.
template <class Vector, class Element>
HWY_INLINE auto SourceDecoder(const uint8_t* scales, int vector_scale_shift, const Vector& vector,
                              const Element& element) {
  return [=](size_t first, size_t count, float* tile, float amax) {
    return DecodeBlocks(scales, first, count, tile, vector_scale_shift, vector, element, amax);
  };
}

float QuantizeRowInt8FromFp8(const uint8_t* codes, const uint8_t* scales, int cols, int8_t* out, Int8RowSums* sums) {
  const auto element = [=](size_t column, float scale) { return e4m3_to_float(codes[column]) * scale; };
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
  uint8_t largest_scale = 0;
  for (int block = 0; block < (cols + kSourceBlock - 1) / kSourceBlock; ++block)
    largest_scale = std::max(largest_scale, scales[block]);
  if (largest_scale <= kLargestFp16Scale) {
    const auto vector = [=](size_t column, VF scale) { return DecodeFp8ViaFp16(codes + column, scale); };
    return QuantizeSourceRow(SourceDecoder(scales, 8, vector, element), cols, out, sums); // scales times 2^8
  }
#endif
#if HWY_TARGET != HWY_SCALAR
  const auto vector = [=](size_t column, VF scale) { return DecodeFp8(codes + column, scale); };
#else
  const auto vector = nullptr;
#endif
  return QuantizeSourceRow(SourceDecoder(scales, 0, vector, element), cols, out, sums);
}

float QuantizeRowInt8FromFp4(const uint8_t* packed, const uint8_t* scales, int cols, int8_t* out,
                             Int8RowSums* sums) {
  const auto element = [=](size_t column, float scale) {
    const uint8_t byte = packed[column / 2];
    return e2m1_to_float(column % 2 == 0 ? byte & 0xF : byte >> 4) * scale;
  };
#if HWY_TARGET != HWY_SCALAR
  const auto vector = [=](size_t column, VF scale) { return DecodeFp4(packed + column / 2, scale); };
#else
  const auto vector = nullptr;
#endif
  return QuantizeSourceRow(SourceDecoder(scales, 0, vector, element), cols, out, sums);
}

} // namespace HWY_NAMESPACE
} // namespace shardq
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace shardq {

HWY_EXPORT(QuantizeRowInt8);
HWY_EXPORT(QuantizeRowInt8FromFp8);
HWY_EXPORT(QuantizeRowInt8FromFp4);

float quantize_row_int8_simd(const float* x, int cols, int8_t* codes, Int8RowSums* sums) {
  return HWY_DYNAMIC_DISPATCH(QuantizeRowInt8)(x, cols, codes, sums);
}

float quantize_row_int8_from_fp8_simd(const uint8_t* codes, const uint8_t* scales, int cols, int8_t* out,
                                      Int8RowSums* sums) {
  return HWY_DYNAMIC_DISPATCH(QuantizeRowInt8FromFp8)(codes, scales, cols, out, sums);
}

float quantize_row_int8_from_fp4_simd(const uint8_t* packed, const uint8_t* scales, int cols, int8_t* out,
                                      Int8RowSums* sums) {
  return HWY_DYNAMIC_DISPATCH(QuantizeRowInt8FromFp4)(packed, scales, cols, out, sums);
}

} // namespace shardq
#endif
