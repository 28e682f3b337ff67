// The Engram MXFP4 quantizer (quantize_row_mxfp4_ref: ModelOpt's MXFP4QTensor.quantize) on
// Highway SIMD, dispatched at run time (foreach_target). Bit-identical to the ref on every
// input: the same scale byte (mxfp4_scale_code, decided from the bits where that is exact),
// the same fp32 quotient x * 2^-s, the same nibble (midpoints counted, ties toward zero,
// sign bit for q <= 0), the same fp32 dequantized value and the same fp64 terms folded in
// the ref's order (t[i] + t[i+16], then sum_block_fp64's halves; blocks added in order),
// built with -ffp-contract=off.
#include <algorithm>
#include <bit>
#include <cstring>

#include "kernels/mxfp4.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/mxfp4_simd.cpp"
#include "hwy/foreach_target.h" // IWYU pragma: keep
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace shardq {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// mxfp4_scale_code(amax) without libm wherever the bits decide it. With d = amax / 6 (the
// same fp32 division) a normal 2^k * (1 + f):
//   f == 0: log2 is exactly k (libm's log2 of a power of two), so the byte is k + 127, the
//           biased exponent of d;
//   f >= 2^-10: log2 is k + log2(1 + f) with log2(1 + f) >= 0.0014 and |k| <= 126, where
//           one fp32 ulp is at most 2^-17: the fp32 rounding stays strictly between k and
//           k + 1 (or lands on k + 1), so ceil gives k + 1 (no clamp reached: exponent <= 253).
// Zero gives byte 0 as in the ref. The rest (f in (0, 2^-10), where fp32 log2 may round down
// to k; subnormal d; inf; NaN) is the ref's own function: never for FP8-sourced blocks.
HWY_INLINE uint8_t ScaleCode(float amax) {
  const uint32_t bits = std::bit_cast<uint32_t>(amax / E2M1::max);
  const uint32_t exponent = bits >> 23, fraction = bits & 0x7FFFFFu;
  if (exponent - 1u < 253u) { // a positive normal with biased exponent 1..253
    if (fraction == 0) return uint8_t(exponent);
    if (fraction >= (1u << 13)) return uint8_t(exponent + 1);
  }
  if (bits == 0) return 0;
  return mxfp4_scale_code(amax);
}

#if HWY_TARGET != HWY_SCALAR // two halves of a vector widen to fp64
using DF = hn::CappedTag<float, 16>;
using DI = hn::RebindToSigned<DF>;
using DU = hn::RebindToUnsigned<DF>;
using DH = hn::Half<DF>;
using DD = hn::Repartition<double, DF>; // one half of DF's lanes, widened
using VF = hn::Vec<DF>;
using VI = hn::Vec<DI>;
using VD = hn::Vec<DD>;
constexpr size_t kLanes = hn::MaxLanes(DF());
constexpr size_t kVectors = Mxfp4::block / kLanes; // float vectors per block

// The ref's block amax: std::max(amax, |x|) skips NaN (a comparison with NaN is false).
HWY_INLINE VF AbsNotNaN(VF x) {
  const VF a = hn::Abs(x);
  return hn::IfThenElseZero(hn::Eq(a, a), a);
}

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
// AVX-512: the nibble and the E2M1 magnitude by two 32-entry table permutes. For a >= 0 and
// a midpoint m whose fp32 bits end in 21 zeros (0.25 ... 5 have at most two fraction bits),
// a > m exactly when key(a) > key(m), key(v) = (bits(v) + 0x1FFFFF) >> 21: so e2m1_index
// is a function of the key. Keys at or below key(0.25) = 500 give 0 (the permutes' zero
// mask), keys above key(5) = 517 give 7 (clamped to 531; NaN and inf included), and keys
// 501..531 land on distinct table slots key % 32.
constexpr uint32_t kKeyShift = 21;
constexpr uint32_t kQuarterKey = 0x3E800000u >> kKeyShift; // key(0.25)
constexpr uint32_t kTopKey = kQuarterKey + 31;

constexpr uint32_t KeyOf(float midpoint) { return std::bit_cast<uint32_t>(midpoint) >> kKeyShift; }

struct KeyTables {
  alignas(64) int32_t index[32];
  alignas(64) float magnitude[32];
};

constexpr KeyTables MakeKeyTables() {
  constexpr float kMidpoints[] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};
  KeyTables tables{};
  for (uint32_t key = kQuarterKey + 1; key <= kTopKey; ++key) {
    int32_t index = 0;
    for (float midpoint : kMidpoints) index += key > KeyOf(midpoint) ? 1 : 0;
    tables.index[key % 32] = index;
    tables.magnitude[key % 32] = E2M1::values[size_t(index)];
  }
  return tables;
}

// The keys' rule, checked here against the ref's e2m1_index at and around each midpoint.
constexpr bool KeyTablesMatchE2m1Index() {
  constexpr KeyTables tables = MakeKeyTables();
  constexpr float kProbes[] = {0.0f, 0.125f, 0.25f, 0.2500001f, 0.5f, 0.74999994f, 0.75f, 0.75000006f, 1.0f, 1.25f,
                               1.2500001f, 1.5f, 1.75f, 1.7500001f, 2.0f, 2.5f, 2.5000002f, 3.0f, 3.5f, 3.5000002f,
                               4.0f, 5.0f, 5.0000005f, 6.0f, 7.0f, 1e30f};
  for (float a : kProbes) {
    const uint32_t key = std::min((std::bit_cast<uint32_t>(a) + 0x1FFFFFu) >> kKeyShift, kTopKey);
    const int32_t index = key > kQuarterKey ? tables.index[key % 32] : 0;
    if (index != e2m1_index(a, E2M1Rounding::nearest_toward_zero)) return false;
  }
  return true;
}
static_assert(KeyTablesMatchE2m1Index());

alignas(64) constexpr KeyTables kKeyTables = MakeKeyTables();

HWY_INLINE VF QuantizeVector(VF x, VF inverse, VF scale, uint8_t* packed) {
  const __m512 q = _mm512_mul_ps(x.raw, inverse.raw);
  const __m512i magnitude_bits = _mm512_and_si512(_mm512_castps_si512(q), _mm512_set1_epi32(0x7FFFFFFF));
  const __m512i key = _mm512_min_epu32(
      _mm512_srli_epi32(_mm512_add_epi32(magnitude_bits, _mm512_set1_epi32(0x1FFFFF)), kKeyShift),
      _mm512_set1_epi32(int(kTopKey)));
  const __mmask16 above_quarter = _mm512_cmpgt_epu32_mask(key, _mm512_set1_epi32(int(kQuarterKey)));
  const __mmask16 not_positive = _mm512_cmp_ps_mask(q, _mm512_setzero_ps(), _CMP_NGT_UQ); // NaN too
  const __m512i index = _mm512_maskz_permutex2var_epi32(
      above_quarter, _mm512_load_si512(kKeyTables.index), key, _mm512_load_si512(kKeyTables.index + 16));
  const __m512 magnitude = _mm512_maskz_permutex2var_ps(above_quarter, _mm512_load_ps(kKeyTables.magnitude), key,
                                                        _mm512_load_ps(kKeyTables.magnitude + 16));
  const __m512i nibble = _mm512_mask_or_epi32(index, not_positive, index, _mm512_set1_epi32(8));
  // Lanes 2j, 2j+1 as one u64: its low byte gets n[2j] | n[2j+1] << 4; vpmovqb keeps it.
  const __m512i pairs = _mm512_or_si512(nibble, _mm512_srli_epi64(nibble, 28));
  _mm_storel_epi64(reinterpret_cast<__m128i*>(packed), _mm512_cvtepi64_epi8(pairs));
  const __m512 value = _mm512_castsi512_ps(_mm512_mask_or_epi32(_mm512_castps_si512(magnitude), not_positive,
                                                                _mm512_castps_si512(magnitude),
                                                                _mm512_set1_epi32(int(0x80000000u))));
  return VF{_mm512_mul_ps(value, scale.raw)};
}
#else
// One vector of a block: q = x * inverse, its nibbles packed into kLanes / 2 bytes at
// `packed` (low nibble = even element), and returns the dequantized values e2m1 * scale.
// Nibble: 7 minus the midpoints |q| is at or below (NaN, below none, gets 7 as in
// e2m1_index), sign bit 8 unless q > 0 (mxfp4_nibble).
HWY_INLINE VF QuantizeVector(VF x, VF inverse, VF scale, uint8_t* packed) {
  const DF df;
  const DI di;
  const VF q = hn::Mul(x, inverse);
  const VF a = hn::Abs(q);
  VI index = hn::Set(di, 7);
  const auto count = [&](float midpoint) {
    index = hn::Add(index, hn::VecFromMask(di, hn::RebindMask(di, hn::Le(a, hn::Set(df, midpoint)))));
  };
  count(0.25f);
  count(0.75f);
  count(1.25f);
  count(1.75f);
  count(2.5f);
  count(3.5f);
  count(5.0f);
  const auto positive = hn::Gt(q, hn::Zero(df));
  const VI nibble = hn::Or(index, hn::IfThenZeroElse(hn::RebindMask(di, positive), hn::Set(di, 8)));
  // Lanes 2j, 2j+1 as one u64: the byte at its bottom gets n[2j] | n[2j+1] << 4.
  const hn::Repartition<uint64_t, DF> d64;
  const hn::Rebind<uint8_t, decltype(d64)> d8;
  const auto pairs = hn::BitCast(d64, nibble);
  hn::StoreU(hn::TruncateTo(d8, hn::Or(pairs, hn::ShiftRight<28>(pairs))), d8, packed);
  // E2M1 magnitudes: index / 2 below 2, else the fp32 fields (index + 252) << 22.
  const VF small = hn::Mul(hn::ConvertTo(df, index), hn::Set(df, 0.5f));
  const VF large = hn::BitCast(df, hn::ShiftLeft<22>(hn::Add(index, hn::Set(di, 252))));
  const VF magnitude = hn::IfThenElse(hn::RebindMask(df, hn::Lt(index, hn::Set(di, 2))), small, large);
  return hn::Mul(hn::Or(magnitude, hn::IfThenZeroElse(positive, hn::Set(df, -0.0f))), scale);
}
#endif

// Element i of a block is lane i % (kLanes / 2) of half (i / (kLanes / 2)) % 2 of vector
// i / kLanes. The ref's fold pairs i with i + 16, then i + 8, ... i + 1: so vectors are
// combined first (a tree over vector indices, the top bit first), then the two halves, then
// the lanes in halves. Tree<start, stride, count> adds the terms of vectors start + k *
// stride, each half separately; leaves quantize their vector.
template <class Source, size_t kStart, size_t kStride, size_t kCount>
HWY_INLINE void Tree(const Source& source, VF inverse, VF scale, uint8_t* packed, VD& source_lo, VD& source_hi,
                     VD& dequant_lo, VD& dequant_hi, VD& error_lo, VD& error_hi) {
  if constexpr (kCount == 1) {
    const DD dd;
    const DH dh;
    const VF x = source.Load(kStart);
    const VF deq = QuantizeVector(x, inverse, scale, packed + kStart * kLanes / 2);
    const VD x_lo = hn::PromoteTo(dd, hn::LowerHalf(dh, x)), x_hi = hn::PromoteTo(dd, hn::UpperHalf(dh, x));
    const VD d_lo = hn::PromoteTo(dd, hn::LowerHalf(dh, deq)), d_hi = hn::PromoteTo(dd, hn::UpperHalf(dh, deq));
    source_lo = hn::Mul(x_lo, x_lo);
    source_hi = hn::Mul(x_hi, x_hi);
    dequant_lo = hn::Mul(d_lo, d_lo);
    dequant_hi = hn::Mul(d_hi, d_hi);
    const VD e_lo = hn::Sub(d_lo, x_lo), e_hi = hn::Sub(d_hi, x_hi);
    error_lo = hn::Mul(e_lo, e_lo);
    error_hi = hn::Mul(e_hi, e_hi);
  } else {
    Tree<Source, kStart, kStride * 2, kCount / 2>(source, inverse, scale, packed, source_lo, source_hi, dequant_lo,
                                                  dequant_hi, error_lo, error_hi);
    VD s_lo, s_hi, d_lo, d_hi, e_lo, e_hi;
    Tree<Source, kStart + kStride, kStride * 2, kCount / 2>(source, inverse, scale, packed, s_lo, s_hi, d_lo, d_hi,
                                                            e_lo, e_hi);
    source_lo = hn::Add(source_lo, s_lo);
    source_hi = hn::Add(source_hi, s_hi);
    dequant_lo = hn::Add(dequant_lo, d_lo);
    dequant_hi = hn::Add(dequant_hi, d_hi);
    error_lo = hn::Add(error_lo, e_lo);
    error_hi = hn::Add(error_hi, e_hi);
  }
}

// The lanes of v folded in halves (lane l + lane l + n/2, ...): the end of the ref's fold.
template <class D>
HWY_INLINE double FoldLanes(hn::Vec<D> v) {
  if constexpr (hn::MaxLanes(D()) == 1) {
    return hn::GetLane(v);
  } else {
    const hn::Half<D> dh;
    return FoldLanes<hn::Half<D>>(hn::Add(hn::LowerHalf(dh, v), hn::UpperHalf(dh, v)));
  }
}

// The ref's block amax (NaN skipped) and its scale byte.
template <class Source>
HWY_INLINE uint8_t BlockScaleCode(const Source& source) {
  const DF df;
  VF amax = hn::Zero(df);
  for (size_t m = 0; m < kVectors; ++m) amax = hn::Max(amax, AbsNotNaN(source.Load(m)));
  return ScaleCode(hn::GetLane(hn::MaxOfLanes(df, amax)));
}

// Row sums kept in registers (a struct written through the result pointer would be
// reloaded after every byte store).
struct RowSums {
  double source_sq = 0.0, dequant_sq = 0.0, error_sq = 0.0;
};

// quantize_block_mxfp4 with its scale byte `code` + pack + add_block_sums of the ref.
template <class Source>
HWY_INLINE void QuantizeBlock(const Source& source, uint8_t code, uint8_t* packed, RowSums& sums) {
  const DF df;
  const VF inverse = hn::Set(df, e8m0_to_float(uint8_t(E8M0::max_code - code)));
  const VF scale = hn::Set(df, e8m0_to_float(code));
  VD s_lo, s_hi, d_lo, d_hi, e_lo, e_hi;
  Tree<Source, 0, 1, kVectors>(source, inverse, scale, packed, s_lo, s_hi, d_lo, d_hi, e_lo, e_hi);
  sums.source_sq += FoldLanes<DD>(hn::Add(s_lo, s_hi));
  sums.dequant_sq += FoldLanes<DD>(hn::Add(d_lo, d_hi));
  sums.error_sq += FoldLanes<DD>(hn::Add(e_lo, e_hi));
}

// A row as the ref does it, blocks in groups: first every scale byte of the group (short
// independent chains: amax, fold, divide), then the blocks' quantization and sums.
template <class RowSource>
HWY_INLINE Mxfp4RowSums QuantizeRow(const RowSource& row, int cols, uint8_t* packed, uint8_t* scales) {
  constexpr int kGroup = 8;
  const int blocks = cols / Mxfp4::block;
  RowSums sums;
  for (int first = 0; first < blocks; first += kGroup) {
    const int count = std::min(kGroup, blocks - first);
    for (int b = first; b < first + count; ++b) scales[b] = BlockScaleCode(row.Block(b));
    for (int b = first; b < first + count; ++b)
      QuantizeBlock(row.Block(b), scales[b], packed + size_t(b) * Mxfp4::bytes_per_block, sums);
  }
  return Mxfp4RowSums{sums.source_sq, sums.dequant_sq, sums.error_sq};
}

// A block of fp32 values.
struct FloatBlock {
  const float* x;
  HWY_INLINE VF Load(size_t m) const { return hn::LoadU(DF(), x + m * kLanes); }
};

struct FloatRow {
  const float* x;
  HWY_INLINE FloatBlock Block(int b) const { return {x + size_t(b) * Mxfp4::block}; }
};

// A block of E4M3 codes with its E8M0 scale, decoded as DequantizeRowFp8 (nvfp4_simd.cpp)
// does: the E4M3 value from its fields, NaN for magnitude 0x7F, times the scale in fp32.
struct Fp8Block {
  const uint8_t* codes;
  float scale;
  HWY_INLINE VF Load(size_t m) const {
    const DF df;
    const DU du;
    const hn::Rebind<uint8_t, DF> d8;
    const auto code = hn::PromoteTo(du, hn::LoadU(d8, codes + m * kLanes));
    const auto magnitude = hn::And(code, hn::Set(du, 0x7Fu));
    const auto normal = hn::Add(hn::ShiftLeft<20>(magnitude), hn::Set(du, (127u - E4M3::bias) << 23));
    const auto subnormal =
        hn::BitCast(du, hn::Mul(hn::ConvertTo(df, hn::BitCast(DI(), magnitude)), hn::Set(df, E4M3::min_subnormal)));
    auto bits = hn::IfThenElse(hn::Lt(magnitude, hn::Set(du, 8u)), subnormal, normal);
    bits = hn::Or(bits, hn::ShiftLeft<24>(hn::And(code, hn::Set(du, 0x80u))));
    bits = hn::IfThenElse(hn::Eq(magnitude, hn::Set(du, 0x7Fu)), hn::Set(du, 0x7FC00000u), bits);
    return hn::Mul(hn::BitCast(df, bits), hn::Set(df, scale));
  }
};

struct Fp8Row {
  const uint8_t* codes;
  const uint8_t* scales;
  HWY_INLINE Fp8Block Block(int b) const { return {codes + size_t(b) * Mxfp4::block, e8m0_to_float(scales[b])}; }
};

// Vector-length agnostic targets may run with fewer lanes than the tree was built for.
HWY_INLINE bool LanesAsCompiled() { return hn::Lanes(DF()) == kLanes; }
#endif

Mxfp4RowSums QuantizeRowMxfp4(const float* x, int cols, uint8_t* packed, uint8_t* scales) {
#if HWY_TARGET != HWY_SCALAR
  if (LanesAsCompiled()) return QuantizeRow(FloatRow{x}, cols, packed, scales);
#endif
  return quantize_row_mxfp4_ref(x, cols, packed, scales);
}

Mxfp4RowSums QuantizeRowMxfp4FromFp8(const uint8_t* codes, const uint8_t* source_scales, int cols, uint8_t* packed,
                                     uint8_t* scales) {
#if HWY_TARGET != HWY_SCALAR
  if (LanesAsCompiled()) return QuantizeRow(Fp8Row{codes, source_scales}, cols, packed, scales);
#endif
  float x[Mxfp4::block];
  Mxfp4RowSums sums;
  for (int b = 0; b < cols / Mxfp4::block; ++b) {
    const float scale = e8m0_to_float(source_scales[b]);
    for (int i = 0; i < Mxfp4::block; ++i) x[i] = e4m3_to_float(codes[size_t(b) * Mxfp4::block + size_t(i)]) * scale;
    const Mxfp4RowSums block = quantize_row_mxfp4_ref(x, Mxfp4::block, packed + size_t(b) * Mxfp4::bytes_per_block,
                                                      scales + b);
    sums.source_sq += block.source_sq;
    sums.dequant_sq += block.dequant_sq;
    sums.error_sq += block.error_sq;
  }
  return sums;
}

} // namespace HWY_NAMESPACE
} // namespace shardq
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace shardq {

HWY_EXPORT(QuantizeRowMxfp4);
HWY_EXPORT(QuantizeRowMxfp4FromFp8);

Mxfp4RowSums quantize_row_mxfp4_simd(const float* x, int cols, uint8_t* packed, uint8_t* scales) {
  return HWY_DYNAMIC_DISPATCH(QuantizeRowMxfp4)(x, cols, packed, scales);
}

Mxfp4RowSums quantize_row_mxfp4_from_fp8_simd(const uint8_t* codes, const uint8_t* source_scales, int cols,
                                              uint8_t* packed, uint8_t* scales) {
  return HWY_DYNAMIC_DISPATCH(QuantizeRowMxfp4FromFp8)(codes, source_scales, cols, packed, scales);
}

} // namespace shardq
#endif
