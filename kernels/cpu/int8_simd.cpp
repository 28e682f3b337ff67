// W8A8 INT8 rows (kernels/int8.h) on Highway SIMD, dispatched at run time (foreach_target):
// the float row quantizer and the fused decode + quantize of FP8 and FP4 source rows.
// Bit-identical to quantize_row_int8_ref (after the scalar decode, for the fused rows):
// - the scale is the ref's own scalar expression of the amax (a max is exact in any order);
// - a code is the fp32 quotient x / scale (vector division is IEEE-exact; for decoded
//   FP8 / FP4 values a table of quotients, QuotientTable) rounded half to even by adding
//   1.5 * 2^23, where fp32 rounds at ulp 1: the code is the sum's low byte;
// - the report terms are the ref's fp32 operations, each lane's fma a fused multiply-add
//   (lane l of the lanes vectors is the ref's lane l), blocks widened to fp64 as the ref.
// Rows whose scale is not a normal fp32 number, and targets without a native fused
// multiply-add, take the ref's element arithmetic instead. Built with -ffp-contract=off;
// tests/unit/test_int8_simd.cpp holds every compiled target to the ref.
#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstring>

#include "kernels/formats.h"
#include "kernels/int8.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/int8_simd.cpp"
#include "hwy/foreach_target.h" // IWYU pragma: keep
#include "hwy/cache_control.h"
#include "hwy/highway.h"
#include "kernels/cpu/e4m3_simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace shardq {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

constexpr size_t kSumLanes = Int8::sum_lanes;
constexpr size_t kSumBlock = Int8::sum_block;
constexpr float kMaxCode = float(Int8::max_code);
constexpr int kSourceBlock = 32; // columns per E8M0 scale of a source row

// A row's scale and the unit of its report terms (kernels/int8.h).
struct RowScale {
  explicit RowScale(float row_scale)
      : scale(row_scale), k(Int8::sum_exponent(row_scale)), unit(std::ldexp(1.0f, -k)), m(row_scale * unit) {}
  float scale;
  int k;
  float unit; // 2^-k
  float m;    // scale * 2^-k
};

// A row's report sums by fp64 lane, kept between its blocks and tiles.
struct LaneSums {
  HWY_ALIGN double source_sq[kSumLanes] = {};
  HWY_ALIGN double error_sq[kSumLanes] = {};
};

// One sum block's fp32 lanes.
struct BlockLanes {
  HWY_ALIGN float source_sq[kSumLanes] = {};
  HWY_ALIGN float error_sq[kSumLanes] = {};
};

// Each fp32 lane widened and added to its fp64 lane.
HWY_INLINE void AddBlock(const BlockLanes& block, LaneSums& lanes) {
#if HWY_TARGET != HWY_SCALAR
  const hn::CappedTag<float, kSumLanes> df;
  const hn::Half<decltype(df)> dh;
  const hn::Repartition<double, decltype(df)> dd;
  const size_t n = hn::Lanes(df), half = n / 2;
  if (kSumLanes % n == 0 && half > 0) {
    for (size_t group = 0; group < kSumLanes; group += n) {
      const auto source = hn::Load(df, block.source_sq + group), error = hn::Load(df, block.error_sq + group);
      double* source_sq = lanes.source_sq + group;
      double* error_sq = lanes.error_sq + group;
      hn::Store(hn::Add(hn::Load(dd, source_sq), hn::PromoteTo(dd, hn::LowerHalf(dh, source))), dd, source_sq);
      hn::Store(hn::Add(hn::Load(dd, source_sq + half), hn::PromoteTo(dd, hn::UpperHalf(dh, source))), dd, source_sq + half);
      hn::Store(hn::Add(hn::Load(dd, error_sq), hn::PromoteTo(dd, hn::LowerHalf(dh, error))), dd, error_sq);
      hn::Store(hn::Add(hn::Load(dd, error_sq + half), hn::PromoteTo(dd, hn::UpperHalf(dh, error))), dd, error_sq + half);
    }
    return;
  }
#endif
  for (size_t l = 0; l < kSumLanes; ++l) {
    lanes.source_sq[l] += double(block.source_sq[l]);
    lanes.error_sq[l] += double(block.error_sq[l]);
  }
}

Int8RowSums FoldLanes(const LaneSums& lanes, const RowScale& row, bool all_zero) {
  return {std::ldexp(fold_int8_sum_lanes(lanes.source_sq), 2 * row.k),
          std::ldexp(fold_int8_sum_lanes(lanes.error_sq), 2 * row.k), all_zero};
}

HWY_INLINE float ScaleOf(float amax) { return amax == 0.0f ? 1.0f : amax / kMaxCode; }

// With a normal scale every |x| <= amax has |x / scale| <= 127 * (1 + 2^-23) < 127.5: the
// rounding alone stays within [-127, 127] (no clamp) and no quotient is inf or NaN. A
// subnormal scale (amax below 127 * 2^-126) or an infinite one does not promise that.
HWY_INLINE bool VectorScale(float scale) { return scale >= FLT_MIN && scale <= FLT_MAX; }

// The ref's element at `column`: its code and its terms added to its lane.
HWY_INLINE void QuantizeElement(float x, size_t column, const RowScale& row, int8_t* codes, BlockLanes& lanes) {
  const float q = std::clamp(std::nearbyint(x / row.scale), -kMaxCode, kMaxCode);
  codes[column] = int8_t(q);
  const float source = x * row.unit, error = q * row.m - source;
  const size_t lane = column % kSumLanes;
  lanes.source_sq[lane] = std::fma(source, source, lanes.source_sq[lane]);
  lanes.error_sq[lane] = std::fma(error, error, lanes.error_sq[lane]);
}

#if HWY_TARGET != HWY_SCALAR
using DF = hn::CappedTag<float, kSumLanes>;
using DH = hn::Half<DF>;
using DU = hn::RebindToUnsigned<DF>;
using DI = hn::RebindToSigned<DF>;
using D8 = hn::Rebind<uint8_t, DF>;
using VF = hn::Vec<DF>;

// y + 1.5 * 2^23 for |y| < 2^22 lies in [2^23, 2^24), where the fp32 ulp is 1: the add rounds
// y half to even (the constant is even), and the sum's bits are 0x4B400000 + round(y).
constexpr float kRoundingBias = 12582912.0f;

// x / scale without a division, for x = M * 2^E whose significand M has at most 3 fraction
// bits (every decoded FP8 / FP4 value: a small float times a power of two), or x an fp32
// subnormal or zero: T[j] * 2^E with T[j] = fl(M_j / scale), M_j = 1 + j / 8, j the top 3
// fraction bits of x (one lane lookup), 2^E = x with its fraction cleared (and +-0 for a
// zero or a subnormal x). Exact, as scaling by a power of two commutes with the rounding
// while fl(M_j / scale) and the quotient are normal, given 2^-120 <= scale <= 2^122:
// - T[j] is in [2^-122, 2^121]: normal;
// - a quotient below 2^-126 in magnitude (and every subnormal x's: |x| < 2^-126 <
//   scale / 2) rounds to code 0 either way.
// Needs a vector of 8 lanes or more (the 8 entries of T repeat across a wider one).
constexpr float kSmallestTableScale = 0x1p-120f;
struct QuotientTable {
  VF table;
  explicit QuotientTable(float scale) {
    const DF df;
    HWY_ALIGN float entries[hn::MaxLanes(DF())];
    for (size_t l = 0; l < hn::Lanes(df); ++l) entries[l] = (1.0f + float(l % 8) * 0.125f) / scale;
    table = hn::Load(df, entries);
  }
  HWY_INLINE VF Quotient(VF x) const {
    const DF df;
    const DU du;
    const auto bits = hn::BitCast(du, x);
    const VF power = hn::BitCast(df, hn::And(bits, hn::Set(du, 0xFF800000u)));
#if HWY_TARGET <= HWY_AVX3
    // vpermps reads the index's low 4 bits only (exponent bit 0 and the top 3 fraction bits).
    return hn::Mul(VF{_mm512_permutexvar_ps(hn::ShiftRight<20>(bits).raw, table.raw)}, power);
#elif HWY_TARGET <= HWY_AVX2
    // vpermps reads the index's low 3 bits only (the top 3 fraction bits).
    return hn::Mul(VF{_mm256_permutevar8x32_ps(table.raw, hn::ShiftRight<20>(bits).raw)}, power);
#else
    const auto index = hn::And(hn::ShiftRight<20>(bits), hn::Set(du, uint32_t(hn::Lanes(df) - 1)));
    return hn::Mul(hn::TableLookupLanes(table, hn::IndicesFromVec(df, hn::BitCast(DI(), index))), power);
#endif
  }
};

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

// Columns [0, count) of x (count a multiple of kSumLanes, x at a column that is one too,
// all in one sum block) with a normal scale: codes, and the terms added to `lanes`. Lane
// group g of every kSumLanes-column step is one vector; each group runs through the
// columns with its own accumulators (one pass where a vector holds all the lanes).
// `table`: the quotients from a QuotientTable, else by division.
HWY_INLINE void QuantizeVectors(const float* x, size_t count, const RowScale& row, const QuotientTable* table,
                                int8_t* codes, BlockLanes& lanes) {
  const DF df;
  const D8 d8;
  const size_t n = hn::Lanes(df);
  const VF divisor = hn::Set(df, row.scale), bias = hn::Set(df, kRoundingBias);
  const VF unit = hn::Set(df, row.unit), m = hn::Set(df, row.m);
  uint8_t* bytes = reinterpret_cast<uint8_t*>(codes);
  for (size_t group = 0; group < kSumLanes; group += n) {
    VF source_sq = hn::Load(df, lanes.source_sq + group), error_sq = hn::Load(df, lanes.error_sq + group);
    for (size_t i = group; i < count; i += kSumLanes) {
      const VF v = hn::LoadU(df, x + i);
      const VF rounded = hn::Add(table ? table->Quotient(v) : hn::Div(v, divisor), bias);
      hn::StoreU(hn::TruncateTo(d8, hn::BitCast(DU(), rounded)), d8, bytes + i);
      const VF source = hn::Mul(v, unit);
      const VF error = hn::Sub(hn::Mul(hn::Sub(rounded, bias), m), source);
      source_sq = hn::MulAdd(source, source, source_sq);
      error_sq = hn::MulAdd(error, error, error_sq);
    }
    hn::Store(source_sq, df, lanes.source_sq + group);
    hn::Store(error_sq, df, lanes.error_sq + group);
  }
}

// n E4M3 codes times their block's scale, as e4m3_to_float(code) * e8m0_to_float(scale):
// the value built from its fields (E4M3ToFloat; no NaN code: a precondition), then one
// fp32 product.
HWY_INLINE VF DecodeFp8(const uint8_t* codes, VF scale) {
  return hn::Mul(E4M3ToFloat(DF(), codes), scale);
}

// n E2M1 values (n / 2 bytes, low nibble first) times their block's scale, as
// e2m1_to_float(nibble) * e8m0_to_float(scale).
HWY_INLINE VF DecodeFp4(const uint8_t* packed, VF scale) {
  const DF df;
  const DU du;
  const hn::Rebind<uint16_t, DH> d16;
  const auto bytes = hn::PromoteTo(d16, hn::LoadU(hn::Rebind<uint8_t, DH>(), packed));
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  // byte | byte << 4: the high byte of each u16 is the high nibble, the low byte's low 4
  // bits the low nibble (its high bits hold a copy of it, which vpermps does not read):
  // nibbles in column order, each indexing the 16 E2M1 values in one permute.
  const auto split = hn::Or(bytes, hn::ShiftLeft<4>(bytes));
  const auto index = hn::PromoteTo(du, hn::BitCast(D8(), split));
  const VF value{_mm512_permutexvar_ps(index.raw, hn::LoadU(df, E2M1::values.data()).raw)};
#else
  // Each byte's low nibble into the low byte of its u16, the high one into the high byte:
  // nibbles in column order.
  const auto split = hn::Or(hn::And(bytes, hn::Set(d16, uint16_t{0x0F})),
                            hn::ShiftLeft<4>(hn::And(bytes, hn::Set(d16, uint16_t{0xF0}))));
  const auto nibble = hn::PromoteTo(du, hn::BitCast(D8(), split));
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
  // Sign-extended, the code's sign is in bits 15..7; shifted by 7 it is in bits 15 and 14,
  // eeee mmm in 13..7: bit 14 cleared leaves s 0eeee mmm0000000.
  const auto wide = hn::PromoteTo(d16, hn::LoadU(hn::Rebind<int8_t, DF>(), reinterpret_cast<const int8_t*>(codes)));
  const auto bits = hn::And(hn::ShiftLeft<7>(wide), hn::Set(d16, int16_t(0xBFFF)));
  return hn::Mul(hn::PromoteTo(DF(), hn::BitCast(hn::Rebind<hwy::float16_t, DF>(), bits)), scale);
}
constexpr uint8_t kLargestFp16Scale = E8M0::max_code - 8; // 2^8 times a larger scale is past fp32
#if HWY_TARGET <= HWY_AVX3
// DecodeFp8ViaFp16 of a whole block of 32 codes, widened to 16 bits in one vector.
HWY_INLINE void DecodeFp8BlockViaFp16(const uint8_t* codes, VF scale, VF& low, VF& high) {
  const hn::Full512<int16_t> d16;
  const hn::Full256<hwy::float16_t> dh;
  const auto wide = hn::PromoteTo(d16, hn::LoadU(hn::Full256<int8_t>(), reinterpret_cast<const int8_t*>(codes)));
  const auto bits = hn::BitCast(hn::Full512<hwy::float16_t>(), hn::And(hn::ShiftLeft<7>(wide), hn::Set(d16, int16_t(0xBFFF))));
  low = hn::Mul(hn::PromoteTo(DF(), hn::LowerHalf(dh, bits)), scale);
  high = hn::Mul(hn::PromoteTo(DF(), hn::UpperHalf(dh, bits)), scale);
}
#endif
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
// multiple of kSumBlock): vectors where the target and the scale allow, the ref's
// elements for the rest. `decoded`: x holds decoded FP8 / FP4 values (QuotientTable).
HWY_INLINE void QuantizeColumns(const float* x, size_t first, size_t count, const RowScale& row, [[maybe_unused]] bool decoded,
                                int8_t* codes, LaneSums& lanes) {
  [[maybe_unused]] bool vectors = false;
#if HWY_TARGET != HWY_SCALAR && HWY_NATIVE_FMA
  // A vector must hold a whole number of lane groups (a scalable vector of 12 floats would
  // not: its lanes would straddle the sums' lanes).
  const size_t n = hn::Lanes(DF());
  vectors = VectorScale(row.scale) && kSumLanes % n == 0;
  const bool use_table = vectors && decoded && n >= 8 && row.scale >= kSmallestTableScale;
  const QuotientTable table(use_table ? row.scale : 1.0f);
#endif
  for (size_t block = 0; block < count; block += kSumBlock) {
    const size_t size = std::min(kSumBlock, count - block);
    BlockLanes block_lanes;
    size_t done = 0;
#if HWY_TARGET != HWY_SCALAR && HWY_NATIVE_FMA
    if (vectors) {
      done = size / kSumLanes * kSumLanes;
      QuantizeVectors(x + block, done, row, use_table ? &table : nullptr, codes + first + block, block_lanes);
    }
#endif
    for (size_t i = done; i < size; ++i) QuantizeElement(x[block + i], first + block + i, row, codes, block_lanes);
    AddBlock(block_lanes, lanes);
  }
}

float QuantizeRowInt8(const float* x, int cols, int8_t* codes, Int8RowSums* sums) {
  const float amax = MaxAbs(x, size_t(cols), 0.0f);
  const RowScale row(ScaleOf(amax));
  LaneSums lanes;
  QuantizeColumns(x, 0, size_t(cols), row, false, codes, lanes);
  if (sums) *sums = FoldLanes(lanes, row, amax == 0.0f);
  return row.scale;
}

// ------------------------------------------------------------ source rows
// A source row is decoded a tile at a time into a stack buffer. A row of one tile is
// decoded once; a longer one twice (for the amax, then for the codes), which keeps the
// buffer in L1 whatever the width.
constexpr size_t kTileCols = 8192; // 32 KiB: a whole row of DeepSeek's 7168-wide linears
static_assert(kTileCols % kSourceBlock == 0 && kTileCols % kSumBlock == 0);

// decode(first, count, out, amax) writes columns [first, first + count) of the row (first a
// multiple of kTileCols) as fp32 and returns amax folded with their max |x|.
template <class Decode>
HWY_INLINE float QuantizeSourceRow(const Decode& decode, int cols, int8_t* codes, Int8RowSums* sums) {
  HWY_ALIGN float tile[kTileCols];
  const size_t width = size_t(cols);
  float amax = 0.0f;
  for (size_t first = 0; first < width; first += kTileCols)
    amax = decode(first, std::min(kTileCols, width - first), tile, amax);
  const RowScale row(ScaleOf(amax));
  LaneSums lanes;
  for (size_t first = 0; first < width; first += kTileCols) {
    const size_t count = std::min(kTileCols, width - first);
    if (width > kTileCols) decode(first, count, tile, 0.0f);
    QuantizeColumns(tile, first, count, row, true, codes, lanes);
  }
  if (sums) *sums = FoldLanes(lanes, row, amax == 0.0f);
  return row.scale;
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

// ------------------------------------------------------------ fused source rows
// Rows of whole 32-column blocks on x86 (AVX2 and up: F16C and FMA) in two light passes and
// no tile: the amax from the codes' bytes (a key per code, Fp8KeyAmax / Fp4KeyAmax), then
// each vector decoded straight to x' = x * 2^-k (the report terms' unit, kernels/int8.h)
// and quantized by a QuotientTable of m = scale * 2^-k. The ref's numbers, given:
// - every non-zero x and x' is a normal fp32 number and every block's 2^(b - 127 - k) too
//   (checked per row from the smallest and largest scale byte): the decode's one product
//   is then exact, as the ref's x and its x * 2^-k are;
// - x' / m is x / scale, the same real number, so the same fp32 quotient.
// Other rows take the tile path above.
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2 && HWY_NATIVE_FMA
constexpr size_t kFusedBlocks = kTileCols / kSourceBlock; // blocks per stack chunk of scales

#if HWY_TARGET <= HWY_AVX3
// The largest key of a row's blocks in bytes, as key - k0 * smallest b (k0 = 8 for FP8, 2
// for FP4), where that fits a byte: a 64-byte vector holds `per` blocks (2 of FP8's 32
// codes, 4 of FP4's 16 bytes); `magnitude` turns its bytes into each one's key without the
// scale (at most 119 for FP8, 5 for FP4), and each block's k0 * (b - smallest) is spread
// over its bytes from a broadcast of the vector's scale bytes (one byte shuffle). Folds
// the largest key into `key`; `done`: the blocks covered (whole vectors; the caller takes
// the rest). Returns false where a key would not fit in a byte.
template <class Magnitude>
HWY_INLINE bool MaxByteKey(const uint8_t* bytes, const uint8_t* scales, size_t blocks, size_t per, uint32_t k0,
                           uint32_t top, uint8_t smallest, uint8_t largest, const Magnitude& magnitude, uint32_t& key,
                           size_t& done) {
  const hn::Full512<uint8_t> d8;
  const hn::Full512<uint32_t> d32;
  if (top + k0 * uint32_t(largest - smallest) > 255) return false;
  HWY_ALIGN static constexpr uint8_t kSpread[2][64] = {
      {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
       1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1},
      {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
       2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3}};
  const auto spread = hn::Load(d8, kSpread[per == 4 ? 1 : 0]);
  HWY_ALIGN uint8_t offsets[kFusedBlocks + 4] = {};
  auto keys = hn::Zero(d8);
  done = blocks / per * per;
  for (size_t chunk = 0; chunk < done; chunk += kFusedBlocks) {
    const size_t count = std::min(kFusedBlocks, done - chunk);
    for (size_t b = 0; b < count; ++b) offsets[b] = uint8_t(k0 * uint32_t(scales[chunk + b] - smallest));
    for (size_t b = 0; b < count; b += per) {
      uint32_t four;
      std::memcpy(&four, offsets + b, sizeof(four));
      const auto offset = hn::TableLookupBytes(hn::BitCast(d8, hn::Set(d32, four)), spread);
      keys = hn::Max(keys, hn::Add(magnitude(hn::LoadU(d8, bytes + (chunk + b) / per * 64)), offset));
    }
  }
  HWY_ALIGN uint8_t lanes[64];
  hn::Store(keys, d8, lanes);
  uint32_t largest_key = 0;
  for (uint8_t lane : lanes) largest_key = std::max(largest_key, uint32_t(lane));
  key = std::max(key, largest_key + k0 * smallest);
  return true;
}
#endif

// The amax of a row of FP8 blocks by a 16-bit key per code: key = (|code| - 8, at least 0)
// + 8 * b. For a normal code (|code| = e << 3 | mmm, e >= 1) that is 8 (e - 1 + b) + mmm:
// the value's exponent, then its mantissa, so keys order values exactly across blocks; a
// subnormal code (|code| < 8) gets its block's key of |code| 8, above its value. So a
// largest key K > 8 * (largest b) is a normal code's and the row's amax: (1 + mmm / 8) *
// 2^(K / 8 - 133), whose fp32 bits are K << 20 - 6 << 23 (when that is a normal number).
// Returns false where it cannot tell (the amax may be a subnormal code's, or not normal).
HWY_INLINE bool Fp8KeyAmax(const uint8_t* codes, const uint8_t* scales, size_t blocks, uint8_t smallest_b,
                           uint8_t largest_b, float& amax) {
  const hn::CappedTag<uint16_t, kSourceBlock> d16;
  const hn::Rebind<uint8_t, decltype(d16)> d8;
  const size_t n = hn::Lanes(d16);
  auto keys = hn::Zero(d16);
  uint32_t byte_key = 0;
  size_t first = 0;
#if HWY_TARGET <= HWY_AVX3
  const auto magnitude = [](hn::Vec<hn::Full512<uint8_t>> v) {
    const hn::Full512<uint8_t> d;
    return hn::SaturatedSub(hn::And(v, hn::Set(d, uint8_t{0x7F})), hn::Set(d, uint8_t{8}));
  };
  if (!MaxByteKey(codes, scales, blocks, 2, 8, 119, smallest_b, largest_b, magnitude, byte_key, first)) first = 0;
#else
  (void)smallest_b;
#endif
  for (size_t block = first; block < blocks; ++block) {
    const auto offset = hn::Set(d16, uint16_t(8 * scales[block]));
    for (size_t column = block * kSourceBlock; column < (block + 1) * kSourceBlock; column += n) {
      const auto magnitude = hn::And(hn::PromoteTo(d16, hn::LoadU(d8, codes + column)), hn::Set(d16, uint16_t{0x7F}));
      keys = hn::Max(keys, hn::Add(hn::SaturatedSub(magnitude, hn::Set(d16, uint16_t{8})), offset));
    }
  }
  const uint32_t key = std::max(byte_key, uint32_t(hn::GetLane(hn::MaxOfLanes(d16, keys))));
  const uint32_t biased_exponent = (key >> 3) - 6;
  if (key <= 8u * largest_b || key >> 3 < 7 || biased_exponent > 254) return false;
  amax = std::bit_cast<float>((key << 20) - (6u << 23));
  return true;
}

// The same for FP4 blocks (16 bytes, two E2M1 codes each): key = (|code| - 2, at least 0)
// + 2 * b; a normal code (|code| = e << 1 | mant, e >= 1: 1, 1.5, 2, 3, 4, 6) has key
// 2 (e - 1 + b) + mant, |code| 1 (0.5) its block's key of |code| 2. The amax: (1 + mant /
// 2) * 2^(K / 2 - 127), fp32 bits K << 22.
HWY_INLINE bool Fp4KeyAmax(const uint8_t* packed, const uint8_t* scales, size_t blocks, uint8_t smallest_b,
                           uint8_t largest_b, float& amax) {
  const hn::CappedTag<uint16_t, kSourceBlock / 2> d16;
  const hn::Rebind<uint8_t, decltype(d16)> d8;
  const size_t n = hn::Lanes(d16);
  auto keys = hn::Zero(d16);
  uint32_t byte_key = 0;
  size_t first = 0;
#if HWY_TARGET <= HWY_AVX3
  const auto magnitude = [](hn::Vec<hn::Full512<uint8_t>> v) {
    const hn::Full512<uint8_t> d;
    const hn::Full512<uint16_t> dw;
    const auto low = hn::And(v, hn::Set(d, uint8_t{7}));
    const auto high = hn::And(hn::BitCast(d, hn::ShiftRight<4>(hn::BitCast(dw, v))), hn::Set(d, uint8_t{7}));
    return hn::SaturatedSub(hn::Max(low, high), hn::Set(d, uint8_t{2}));
  };
  if (!MaxByteKey(packed, scales, blocks, 4, 2, 5, smallest_b, largest_b, magnitude, byte_key, first)) first = 0;
#else
  (void)smallest_b;
#endif
  for (size_t block = first; block < blocks; ++block) {
    const auto offset = hn::Set(d16, uint16_t(2 * scales[block]));
    for (size_t byte = block * kSourceBlock / 2; byte < (block + 1) * kSourceBlock / 2; byte += n) {
      const auto pair = hn::PromoteTo(d16, hn::LoadU(d8, packed + byte));
      const auto magnitude = hn::Max(hn::And(pair, hn::Set(d16, uint16_t{7})), hn::And(hn::ShiftRight<4>(pair), hn::Set(d16, uint16_t{7})));
      keys = hn::Max(keys, hn::Add(hn::SaturatedSub(magnitude, hn::Set(d16, uint16_t{2})), offset));
    }
  }
  const uint32_t key = std::max(byte_key, uint32_t(hn::GetLane(hn::MaxOfLanes(d16, keys))));
  const uint32_t biased_exponent = key >> 1;
  if (key <= 2u * largest_b || biased_exponent < 1 || biased_exponent > 254) return false;
  amax = std::bit_cast<float>(key << 22);
  return true;
}

// Quantizes columns [0, cols) (a multiple of kSourceBlock) of a fused row: decode(column,
// unit) returns the n values x' at column, given unit = 2^(b - 127 - k + shift) of the
// column's block in every lane. `shift`: what the decode leaves out of the value (8 for the
// fp16 decode, which yields the value times 2^-8).
// The same span of bytes after the row's `source_bytes` (the next row, in a tensor) is
// prefetched a sum block's share at a time: the next row's amax pass then finds it in cache
// rather than waiting for memory (a prefetch past the end of a buffer is harmless).
// decode_block(column, unit, low, high): the block's two vectors at once, where a vector is
// half a block (AVX-512).
template <class Decode, class DecodeBlock>
HWY_INLINE void QuantizeFusedRow(const Decode& decode, const DecodeBlock& decode_block, const uint8_t* source, size_t source_bytes, const uint8_t* scales,
                                 size_t cols, int shift, const RowScale& row, int8_t* codes, LaneSums& lanes) {
  const DF df;
  const D8 d8;
  const size_t n = hn::Lanes(df);
  const QuotientTable table(row.m);
  const VF bias = hn::Set(df, kRoundingBias), m = hn::Set(df, row.m);
  const DH dh;
  const hn::Repartition<double, DF> dd;
  auto source_low = hn::Zero(dd), source_high = hn::Zero(dd), error_low = hn::Zero(dd), error_high = hn::Zero(dd);
  uint8_t* bytes = reinterpret_cast<uint8_t*>(codes);
  HWY_ALIGN float units[kFusedBlocks];
  for (size_t chunk = 0; chunk < cols; chunk += kTileCols) {
    const size_t chunk_end = std::min(cols, chunk + kTileCols);
    for (size_t block = chunk / kSourceBlock; block < chunk_end / kSourceBlock; ++block)
      units[block % kFusedBlocks] = std::bit_cast<float>(uint32_t(int(scales[block]) + shift - row.k) << 23);
    for (size_t first = chunk; first < chunk_end; first += kSumBlock) {
      const size_t end = std::min(chunk_end, first + kSumBlock);
      for (size_t line = first * source_bytes / cols; line < end * source_bytes / cols; line += 64)
        hwy::Prefetch(source + source_bytes + line);
      BlockLanes block_lanes;
      for (size_t group = 0; group < kSumLanes; group += n) {
        VF source_sq = hn::Zero(df), error_sq = hn::Zero(df);
        const auto quantize = [&](VF x, size_t column) {
          const VF rounded = hn::Add(table.Quotient(x), bias);
          hn::StoreU(hn::TruncateTo(d8, hn::BitCast(DU(), rounded)), d8, bytes + column);
          const VF error = hn::Sub(hn::Mul(hn::Sub(rounded, bias), m), x);
          source_sq = hn::MulAdd(x, x, source_sq);
          error_sq = hn::MulAdd(error, error, error_sq);
        };
        if (2 * n == kSourceBlock) { // one lane group: a block's two vectors decoded together
          for (size_t column = first; column < end; column += kSourceBlock) {
            VF low, high;
            decode_block(column, hn::Set(df, units[column / kSourceBlock % kFusedBlocks]), low, high);
            quantize(low, column);
            quantize(high, column + n);
          }
          // The fp64 lanes stay in registers (AddBlock's widening, without the memory trip).
          source_low = hn::Add(source_low, hn::PromoteTo(dd, hn::LowerHalf(dh, source_sq)));
          source_high = hn::Add(source_high, hn::PromoteTo(dd, hn::UpperHalf(dh, source_sq)));
          error_low = hn::Add(error_low, hn::PromoteTo(dd, hn::LowerHalf(dh, error_sq)));
          error_high = hn::Add(error_high, hn::PromoteTo(dd, hn::UpperHalf(dh, error_sq)));
          continue;
        } else {
          for (size_t column = first + group; column < end; column += kSumLanes)
            quantize(decode(column, hn::Set(df, units[column / kSourceBlock % kFusedBlocks])), column);
        }
        hn::Store(source_sq, df, block_lanes.source_sq + group);
        hn::Store(error_sq, df, block_lanes.error_sq + group);
      }
      if (2 * n != kSourceBlock) AddBlock(block_lanes, lanes);
    }
  }
  if (2 * n == kSourceBlock) {
    hn::Store(hn::Add(hn::Load(dd, lanes.source_sq), source_low), dd, lanes.source_sq);
    hn::Store(hn::Add(hn::Load(dd, lanes.source_sq + n / 2), source_high), dd, lanes.source_sq + n / 2);
    hn::Store(hn::Add(hn::Load(dd, lanes.error_sq), error_low), dd, lanes.error_sq);
    hn::Store(hn::Add(hn::Load(dd, lanes.error_sq + n / 2), error_high), dd, lanes.error_sq + n / 2);
  }
}

// The smallest and largest scale byte of `blocks`.
HWY_INLINE void ScaleRange(const uint8_t* scales, size_t blocks, uint8_t& smallest, uint8_t& largest) {
  smallest = 255;
  largest = 0;
  for (size_t block = 0; block < blocks; ++block) {
    smallest = std::min(smallest, scales[block]);
    largest = std::max(largest, scales[block]);
  }
}

// A fused row where the checks above hold (`smallest_x`: the least b whose smallest
// non-zero code times 2^(b - 127) is normal, 10 for E4M3's 2^-9, 2 for E2M1's 0.5): its
// scale, else NaN (the row takes the tile path).
// `source`, `source_bytes`: the row's codes (for QuantizeFusedRow's prefetch).
template <class KeyAmax, class Decode, class DecodeBlock>
HWY_INLINE float FusedRow(const KeyAmax& key_amax, const Decode& decode, const DecodeBlock& decode_block, const uint8_t* source, size_t source_bytes,
                          const uint8_t* scales, int cols, int smallest_x, int shift, int8_t* out, Int8RowSums* sums) {
  if (cols <= 0 || cols % kSourceBlock != 0 || kSumLanes % hn::Lanes(DF()) != 0 || hn::Lanes(DF()) < 8) return NAN;
  const size_t blocks = size_t(cols) / kSourceBlock;
  uint8_t smallest, largest;
  ScaleRange(scales, blocks, smallest, largest);
  float amax = 0.0f;
  if (smallest < smallest_x || !key_amax(blocks, smallest, largest, amax)) return NAN;
  const RowScale row(ScaleOf(amax));
  if (!VectorScale(row.scale) || smallest - row.k < smallest_x || largest + shift - row.k > 254) return NAN;
  LaneSums lanes;
  QuantizeFusedRow(decode, decode_block, source, source_bytes, scales, size_t(cols), shift, row, out, lanes);
  if (sums) *sums = FoldLanes(lanes, row, false);
  return row.scale;
}
#endif

float QuantizeRowInt8FromFp8(const uint8_t* codes, const uint8_t* scales, int cols, int8_t* out, Int8RowSums* sums) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2 && HWY_NATIVE_FMA
  {
    const auto key_amax = [=](size_t blocks, uint8_t smallest, uint8_t largest, float& amax) {
      return Fp8KeyAmax(codes, scales, blocks, smallest, largest, amax);
    };
    const auto decode = [=](size_t column, VF unit) { return DecodeFp8ViaFp16(codes + column, unit); };
    const auto decode_block = [=](size_t column, VF unit, VF& low, VF& high) {
#if HWY_TARGET <= HWY_AVX3
      DecodeFp8BlockViaFp16(codes + column, unit, low, high);
#else
      low = DecodeFp8ViaFp16(codes + column, unit);
      high = DecodeFp8ViaFp16(codes + column + hn::Lanes(DF()), unit);
#endif
    };
    const float scale = FusedRow(key_amax, decode, decode_block, codes, size_t(std::max(cols, 0)), scales, cols, 10, 8, out, sums);
    if (!std::isnan(scale)) return scale;
  }
#endif
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
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2 && HWY_NATIVE_FMA
  {
    const auto key_amax = [=](size_t blocks, uint8_t smallest, uint8_t largest, float& amax) {
      return Fp4KeyAmax(packed, scales, blocks, smallest, largest, amax);
    };
    const auto decode = [=](size_t column, VF unit) { return DecodeFp4(packed + column / 2, unit); };
    const auto decode_block = [=](size_t column, VF unit, VF& low, VF& high) {
      low = DecodeFp4(packed + column / 2, unit);
      high = DecodeFp4(packed + (column + hn::Lanes(DF())) / 2, unit);
    };
    const float scale = FusedRow(key_amax, decode, decode_block, packed, size_t(std::max(cols, 0)) / 2, scales, cols, 2, 0, out, sums);
    if (!std::isnan(scale)) return scale;
  }
#endif
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
