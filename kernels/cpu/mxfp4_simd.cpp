// The Engram MXFP4 quantizer (quantize_row_mxfp4_ref: ModelOpt's MXFP4QTensor.quantize) on
// Highway SIMD, dispatched at run time (foreach_target), and the codec's fused FP8 row
// (decode + quantize). Bit-identical to the ref on every input: the same scale byte
// (mxfp4_scale_code, decided from the bits where that is exact, the ref's function
// elsewhere), the same fp32 quotient x * 2^-s, the same nibble (ties toward zero, sign bit
// for q <= 0; AVX-512 looks it up from the quotient's bits, other targets count midpoints),
// the same fp32 dequantized value and the same fp64 terms folded in the ref's order
// (t[i] + t[i+16], then sum_block_fp64's halves; blocks added in order), built with
// -ffp-contract=off. kernels/mxfp4.h has the contract; tests/unit/test_mxfp4_simd.cpp holds
// every compiled target to the ref.
#include <algorithm>
#include <bit>
#include <cstring>

#include "kernels/mxfp4.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/mxfp4_simd.cpp"
// SVE only at 128 bits (SVE2_128: the DGX Spark), where 4 lanes are the whole vector. On
// wider SVE this Highway's ConcatEven of two 4-lane (capped) vectors takes the even lanes of
// the whole registers, so GroupScales paired the wrong blocks' amaxes:
// tests/unit/test_mxfp4_simd.cpp failed under qemu at 256 bits (SVE_256) and, on the generic
// SVE targets, at 512, 1024 and 2048 bits, where the runtime lanes equal the compiled 16.
// Wider SVE CPUs (Graviton 3, A64FX) run the NEON target, 128 bits on every aarch64 CPU.
#define HWY_DISABLED_TARGETS (HWY_SVE_256 | HWY_SVE | HWY_SVE2)
#include "hwy/foreach_target.h" // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/cpu/e4m3_simd-inl.h"

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
constexpr size_t kDoubles = kLanes / 2;             // lanes of DD

// The ref's block amax: std::max(amax, |x|) skips NaN (a comparison with NaN is false).
HWY_INLINE VF AbsNotNaN(VF x) {
  const VF a = hn::Abs(x);
  return hn::IfThenElseZero(hn::Eq(a, a), a);
}

// Phase one's per-block step: the amax vector so far with x folded in. On x86 the max
// instruction returns its second operand when either is NaN, which skips a NaN |x| as the
// ref's std::max(amax, |x|) does; elsewhere NaN lanes are zeroed first.
HWY_INLINE VF MaxAbs(VF amax, VF x) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_SSSE3
  return hn::Max(hn::Abs(x), amax);
#else
  return hn::Max(amax, AbsNotNaN(x));
#endif
}

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
// AVX-512: the nibble and the E2M1 magnitude by two 32-entry table permutes. For a >= 0 and
// a midpoint m whose fp32 bits end in 21 zeros (0.25 ... 5 have at most two fraction bits),
// a > m exactly when key(a) > key(m), key(v) = (bits(v) + 0x1FFFFF) >> 21: so e2m1_index
// is a function of the key. The bits of |q| are first clamped to [bits(0.25), bits(6)]
// (as integers: NaN and inf land on 6, index 7; anything up to 0.25 on 0.25, index 0), so
// the key takes 19 values, 500 ... 518, on distinct table slots key % 32.
constexpr uint32_t kKeyShift = 21;
constexpr uint32_t kLowBits = 0x3E800000u;  // 0.25f
constexpr uint32_t kHighBits = 0x40C00000u; // 6.0f

constexpr uint32_t KeyOf(uint32_t bits) { return (bits + (1u << kKeyShift) - 1) >> kKeyShift; }

struct KeyTables {
  alignas(64) int32_t index[32];
  alignas(64) float magnitude[32];
};

constexpr KeyTables MakeKeyTables() {
  constexpr float kMidpoints[] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};
  KeyTables tables{};
  for (uint32_t key = KeyOf(kLowBits); key <= KeyOf(kHighBits); ++key) {
    int32_t index = 0;
    for (float midpoint : kMidpoints) index += key > KeyOf(std::bit_cast<uint32_t>(midpoint)) ? 1 : 0;
    tables.index[key % 32] = index;
    tables.magnitude[key % 32] = E2M1::values[size_t(index)];
  }
  return tables;
}

// The keys' rule, checked here against the ref's e2m1_index at and around each midpoint.
constexpr bool KeyTablesMatchE2m1Index() {
  static_assert(KeyOf(kHighBits) - KeyOf(kLowBits) < 32);
  constexpr KeyTables tables = MakeKeyTables();
  constexpr float kProbes[] = {0.0f, 1e-40f, 0.125f, 0.24999999f, 0.25f, 0.2500001f, 0.5f, 0.74999994f, 0.75f,
                               0.75000006f, 1.0f, 1.25f, 1.2500001f, 1.5f, 1.75f, 1.7500001f, 2.0f, 2.5f, 2.5000002f,
                               3.0f, 3.5f, 3.5000002f, 4.0f, 5.0f, 5.0000005f, 6.0f, 6.0000005f, 7.0f, 1e30f};
  for (float a : kProbes) {
    const uint32_t bits = std::min(std::max(std::bit_cast<uint32_t>(a), kLowBits), kHighBits);
    if (tables.index[KeyOf(bits) % 32] != e2m1_index(a, E2M1Rounding::nearest_toward_zero)) return false;
  }
  return true;
}
static_assert(KeyTablesMatchE2m1Index());

alignas(64) constexpr KeyTables kKeyTables = MakeKeyTables();

HWY_INLINE VF QuantizeVector(VF x, VF inverse, VF scale, uint8_t* packed) {
  const __m512 q = _mm512_mul_ps(x.raw, inverse.raw);
  const __m512i magnitude_bits = _mm512_and_si512(_mm512_castps_si512(q), _mm512_set1_epi32(0x7FFFFFFF));
  const __m512i clamped = _mm512_min_epu32(_mm512_max_epu32(magnitude_bits, _mm512_set1_epi32(int(kLowBits))),
                                           _mm512_set1_epi32(int(kHighBits)));
  const __m512i key = _mm512_srli_epi32(_mm512_add_epi32(clamped, _mm512_set1_epi32((1 << kKeyShift) - 1)), kKeyShift);
  const __mmask16 not_positive = _mm512_cmp_ps_mask(q, _mm512_setzero_ps(), _CMP_NGT_UQ); // NaN too
  const __m512i index =
      _mm512_permutex2var_epi32(_mm512_load_si512(kKeyTables.index), key, _mm512_load_si512(kKeyTables.index + 16));
  const __m512 magnitude =
      _mm512_permutex2var_ps(_mm512_load_ps(kKeyTables.magnitude), key, _mm512_load_ps(kKeyTables.magnitude + 16));
  const __m512i nibble = _mm512_mask_or_epi32(index, not_positive, index, _mm512_set1_epi32(8));
  // Lanes 2j, 2j+1 as one u64: its low byte gets n[2j] | n[2j+1] << 4; vpmovqb keeps it.
  const __m512i pairs = _mm512_or_si512(nibble, _mm512_srli_epi64(nibble, 28));
  _mm512_mask_cvtepi64_storeu_epi8(packed, 0xFF, pairs);
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
// the lanes in halves (GroupFold). The trees below add the terms of vectors start + k *
// stride for k < count, each half separately.

// Phase one of a block at x: each vector widened to fp64 (stored at `wide`, the same
// element order), the source terms x^2 folded into lo / hi, |x| into amax.
template <size_t kStart, size_t kStride, size_t kCount>
HWY_INLINE void SourceTree(const float* x, double* wide, VF& amax, VD& lo, VD& hi) {
  if constexpr (kCount == 1) {
    const DD dd;
    const DH dh;
    const float* at = x + kStart * kLanes;
    amax = MaxAbs(amax, hn::LoadU(DF(), at));
    // Halves widened straight from memory: no shuffle for the upper one.
    const VD v_lo = hn::PromoteTo(dd, hn::LoadU(dh, at)), v_hi = hn::PromoteTo(dd, hn::LoadU(dh, at + kDoubles));
    hn::Store(v_lo, dd, wide + kStart * kLanes);
    hn::Store(v_hi, dd, wide + kStart * kLanes + kDoubles);
    lo = hn::Mul(v_lo, v_lo);
    hi = hn::Mul(v_hi, v_hi);
  } else {
    SourceTree<kStart, kStride * 2, kCount / 2>(x, wide, amax, lo, hi);
    VD lo2, hi2;
    SourceTree<kStart + kStride, kStride * 2, kCount / 2>(x, wide, amax, lo2, hi2);
    lo = hn::Add(lo, lo2);
    hi = hn::Add(hi, hi2);
  }
}

// Phase two of a block at x (widened at `wide`) with its inverse and scale: nibbles packed,
// the dequantized terms deq^2 and the error terms (deq - x)^2 folded.
template <size_t kStart, size_t kStride, size_t kCount>
HWY_INLINE void QuantTree(const float* x, const double* wide, VF inverse, VF scale, uint8_t* packed, VD& dequant_lo,
                          VD& dequant_hi, VD& error_lo, VD& error_hi) {
  if constexpr (kCount == 1) {
    const DD dd;
    const DH dh;
    const VF deq = QuantizeVector(hn::LoadU(DF(), x + kStart * kLanes), inverse, scale, packed + kStart * kLanes / 2);
    const VD d_lo = hn::PromoteTo(dd, hn::LowerHalf(dh, deq)), d_hi = hn::PromoteTo(dd, hn::UpperHalf(dh, deq));
    dequant_lo = hn::Mul(d_lo, d_lo);
    dequant_hi = hn::Mul(d_hi, d_hi);
    const VD e_lo = hn::Sub(d_lo, hn::Load(dd, wide + kStart * kLanes));
    const VD e_hi = hn::Sub(d_hi, hn::Load(dd, wide + kStart * kLanes + kDoubles));
    error_lo = hn::Mul(e_lo, e_lo);
    error_hi = hn::Mul(e_hi, e_hi);
  } else {
    QuantTree<kStart, kStride * 2, kCount / 2>(x, wide, inverse, scale, packed, dequant_lo, dequant_hi, error_lo,
                                               error_hi);
    VD d_lo, d_hi, e_lo, e_hi;
    QuantTree<kStart + kStride, kStride * 2, kCount / 2>(x, wide, inverse, scale, packed, d_lo, d_hi, e_lo, e_hi);
    dequant_lo = hn::Add(dequant_lo, d_lo);
    dequant_hi = hn::Add(dequant_hi, d_hi);
    error_lo = hn::Add(error_lo, e_lo);
    error_hi = hn::Add(error_hi, e_hi);
  }
}

// ------------------------------------------------------------ groups of blocks
// Blocks are taken kGroup at a time (QuantizeGroup): phase one gives every block's amax
// vector and source sum vector; the amax vectors are reduced and turned into scale bytes
// together; phase two quantizes each block, leaving its dequantized and error sums as one
// vector each; then the sum vectors are folded to the blocks' sums together. Across blocks
// the reductions are transposed (vectors of different blocks paired lane by lane), which
// does the horizontal work of several blocks in one shuffle.
constexpr int kGroup = 8;

// Vector-length agnostic targets may run with fewer lanes than the code was built for.
HWY_INLINE bool LanesAsCompiled() { return hn::Lanes(DF()) == kLanes && hn::Lanes(DD()) == kDoubles; }

// Max of v's lanes down to a 4-lane vector (halves: max is exact in any order).
using D4 = hn::CappedTag<float, 4>;
template <class D>
HWY_INLINE hn::Vec<D4> MaxTo4(hn::Vec<D> v) {
  if constexpr (hn::MaxLanes(D()) <= 4) {
    return v;
  } else {
    const hn::Half<D> dh;
    return MaxTo4<hn::Half<D>>(hn::Max(hn::LowerHalf(dh, v), hn::UpperHalf(dh, v)));
  }
}

// fp32 bits of e8m0_to_float(code) for codes 0..255 in int32 lanes.
template <class V>
HWY_INLINE V E8m0Bits(V code) {
  const hn::DFromV<V> d;
  const V bits = hn::IfThenElse(hn::Eq(code, hn::Zero(d)), hn::Set(d, 0x00400000), hn::ShiftLeft<23>(code));
  return hn::IfThenElse(hn::Eq(code, hn::Set(d, 0xFF)), hn::Set(d, 0x7FC00000), bits);
}

// Scale bytes of kGroup blocks from their amax vectors (block b's at amax_lanes[b * kLanes],
// reduced here: max is exact in any order), with the fp32 scale 2^(s - 127) and inverse
// 2^(127 - s) of each: ScaleCode's shortcut in vector form, ScaleCode itself for any block
// it does not decide. Everything stays in registers from the amax to the stored results.
HWY_INLINE void GroupScales(const float* amax_lanes, uint8_t* codes, float* inverses, float* scales) {
  const D4 d4;
  const hn::RebindToSigned<D4> di;
  const hn::Repartition<uint64_t, D4> d64;
  // Lane 0: the amax of block b, lane 2: of block b + 1.
  const auto pair = [&](int b) {
    const auto a = hn::BitCast(d64, MaxTo4<DF>(hn::Load(DF(), amax_lanes + size_t(b) * kLanes)));
    const auto c = hn::BitCast(d64, MaxTo4<DF>(hn::Load(DF(), amax_lanes + size_t(b + 1) * kLanes)));
    const auto m =
        hn::Max(hn::BitCast(d4, hn::InterleaveLower(d64, a, c)), hn::BitCast(d4, hn::InterleaveUpper(d64, a, c)));
    return hn::Max(m, hn::Shuffle2301(m));
  };
  for (int b = 0; b < kGroup; b += 4) {
    const auto amax = hn::ConcatEven(d4, pair(b + 2), pair(b)); // blocks b .. b + 3
    const auto bits = hn::BitCast(di, hn::Div(amax, hn::Set(d4, E2M1::max)));
    const auto exponent = hn::ShiftRight<23>(bits), fraction = hn::And(bits, hn::Set(di, 0x7FFFFF));
    const auto inexact = hn::Gt(fraction, hn::Zero(di));
    auto code = hn::Sub(exponent, hn::VecFromMask(di, inexact)); // + 1 where the fraction is not zero
    const auto normal = hn::And(hn::Gt(exponent, hn::Zero(di)), hn::Lt(exponent, hn::Set(di, 254)));
    const auto decided = hn::Or(hn::And(normal, hn::Or(hn::Not(inexact), hn::Gt(fraction, hn::Set(di, (1 << 13) - 1)))),
                                hn::Eq(bits, hn::Zero(di)));
    if (!hn::AllTrue(di, decided)) {
      HWY_ALIGN float lanes[4];
      HWY_ALIGN int32_t fixed[4];
      hn::Store(amax, d4, lanes);
      for (int i = 0; i < 4; ++i) fixed[i] = ScaleCode(lanes[i]);
      code = hn::Load(di, fixed);
    }
    HWY_ALIGN int32_t out[4];
    hn::Store(code, di, out);
    for (int i = 0; i < 4; ++i) codes[b + i] = uint8_t(out[i]);
    hn::Store(hn::BitCast(d4, E8m0Bits(code)), d4, scales + b);
    const auto inverse_code = hn::And(hn::Sub(hn::Set(di, E8M0::max_code), code), hn::Set(di, 0xFF));
    hn::Store(hn::BitCast(d4, E8m0Bits(inverse_code)), d4, inverses + b);
  }
}

// The ref's fold of lanes (l + l + n/2, down to one) of one stored sum vector.
HWY_INLINE double FoldInHalves(const double* lanes) {
  double folded[kDoubles];
  std::copy(lanes, lanes + kDoubles, folded);
  for (size_t half = kDoubles / 2; half >= 1; half /= 2)
    for (size_t i = 0; i < half; ++i) folded[i] = folded[i] + folded[i + half];
  return folded[0];
}

// The sum vectors of kGroup blocks (block b's at partial[b * kDoubles]) folded as
// FoldInHalves folds each, into totals[b]; vectors of different blocks share the shuffles.
HWY_INLINE void GroupFold(const double* partial, double* totals) {
  const DD dd;
  const auto load = [&](int b) { return hn::Load(dd, partial + size_t(b) * kDoubles); };
  // [l + l+n/2 of block b | of block b+1]
  const auto halves = [&](int b) {
    return hn::Add(hn::ConcatLowerLower(dd, load(b + 1), load(b)), hn::ConcatUpperUpper(dd, load(b + 1), load(b)));
  };
  if constexpr (kDoubles == 8 && HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
    // Four blocks per vector, one per 128-bit block: l + l+2 of the halves' four lanes.
    const auto quarters = [&](int b) {
      const VD a = halves(b), c = halves(b + 2);
      return VD{_mm512_add_pd(_mm512_shuffle_f64x2(a.raw, c.raw, _MM_SHUFFLE(2, 0, 2, 0)),
                              _mm512_shuffle_f64x2(a.raw, c.raw, _MM_SHUFFLE(3, 1, 3, 1)))};
    };
    const VD low = quarters(0), high = quarters(4);
    // Lane pairs: [b0, b4 | b1, b5 | b2, b6 | b3, b7].
    HWY_ALIGN double folded[kDoubles];
    hn::Store(hn::Add(hn::InterleaveLower(dd, low, high), hn::InterleaveUpper(dd, low, high)), dd, folded);
    for (int k = 0; k < 4; ++k) {
      totals[k] = folded[2 * k];
      totals[k + 4] = folded[2 * k + 1];
    }
#endif
  } else if constexpr (kDoubles == 4) {
    for (int b = 0; b < kGroup; b += 4) {
      const VD a = halves(b), c = halves(b + 2);
      // Lane pairs: [b, b+2 | b+1, b+3].
      HWY_ALIGN double folded[kDoubles];
      hn::Store(hn::Add(hn::InterleaveLower(dd, a, c), hn::InterleaveUpper(dd, a, c)), dd, folded);
      totals[b] = folded[0];
      totals[b + 1] = folded[2];
      totals[b + 2] = folded[1];
      totals[b + 3] = folded[3];
    }
  } else if constexpr (kDoubles == 2) {
    for (int b = 0; b < kGroup; b += 2)
      hn::Store(hn::Add(hn::InterleaveLower(dd, load(b), load(b + 1)), hn::InterleaveUpper(dd, load(b), load(b + 1))),
                dd, totals + b);
  } else {
    for (int b = 0; b < kGroup; ++b) totals[b] = FoldInHalves(partial + size_t(b) * kDoubles);
  }
}

// Row sums kept in registers (a struct written through the result pointer would be
// reloaded after every byte store).
struct RowSums {
  double source_sq = 0.0, dequant_sq = 0.0, error_sq = 0.0;
};

// The ref's row loop for `count` <= kGroup blocks of fp32 values at x: phase one (amax,
// widened x and the source sums, which need no scale: they overlap the scale bytes' chain),
// the scale bytes, phase two (nibbles, dequantized and error sums), then the folds and the
// blocks' sums added to the row's in block order.
HWY_INLINE void QuantizeGroup(const float* x, int count, uint8_t* packed, uint8_t* scales, RowSums& sums) {
  const DF df;
  const DD dd;
  HWY_ALIGN double wide[kGroup * Mxfp4::block];
  HWY_ALIGN double partial[3][kGroup * kDoubles];
  HWY_ALIGN double totals[3][kGroup];
  HWY_ALIGN float amax_lanes[kGroup * kLanes];
  HWY_ALIGN float inverses[kGroup], block_scales[kGroup];
  uint8_t codes[kGroup];
  for (int b = 0; b < count; ++b) {
    VF amax = hn::Zero(df);
    VD lo, hi;
    SourceTree<0, 1, kVectors>(x + size_t(b) * Mxfp4::block, wide + size_t(b) * Mxfp4::block, amax, lo, hi);
    hn::Store(amax, df, amax_lanes + size_t(b) * kLanes);
    hn::Store(hn::Add(lo, hi), dd, partial[0] + size_t(b) * kDoubles);
  }
  if (count < kGroup) { // the unused blocks: zeros (never read back, but defined)
    std::fill(amax_lanes + size_t(count) * kLanes, amax_lanes + kGroup * kLanes, 0.0f);
    for (auto& sum : partial) std::fill(sum + size_t(count) * kDoubles, sum + kGroup * kDoubles, 0.0);
  }
  GroupScales(amax_lanes, codes, inverses, block_scales);
  std::copy(codes, codes + count, scales);
  for (int b = 0; b < count; ++b) {
    VD d_lo, d_hi, e_lo, e_hi;
    QuantTree<0, 1, kVectors>(x + size_t(b) * Mxfp4::block, wide + size_t(b) * Mxfp4::block,
                              hn::Set(df, inverses[b]), hn::Set(df, block_scales[b]),
                              packed + size_t(b) * Mxfp4::bytes_per_block, d_lo, d_hi, e_lo, e_hi);
    hn::Store(hn::Add(d_lo, d_hi), dd, partial[1] + size_t(b) * kDoubles);
    hn::Store(hn::Add(e_lo, e_hi), dd, partial[2] + size_t(b) * kDoubles);
  }
  for (int t = 0; t < 3; ++t) GroupFold(partial[t], totals[t]);
  for (int b = 0; b < count; ++b) {
    sums.source_sq += totals[0][b];
    sums.dequant_sq += totals[1][b];
    sums.error_sq += totals[2][b];
  }
}

HWY_INLINE Mxfp4RowSums QuantizeRowFloat(const float* x, int cols, uint8_t* packed, uint8_t* scales) {
  const int blocks = cols / Mxfp4::block;
  RowSums sums;
  for (int first = 0; first < blocks; first += kGroup)
    QuantizeGroup(x + size_t(first) * Mxfp4::block, std::min(kGroup, blocks - first),
                  packed + size_t(first) * Mxfp4::bytes_per_block, scales + first, sums);
  return Mxfp4RowSums{sums.source_sq, sums.dequant_sq, sums.error_sq};
}

// kLanes E4M3 codes times an E8M0 scale as DequantizeRowFp8 (nvfp4_simd.cpp) decodes them:
// the value from its fields (NaN for magnitude 0x7F), times the scale in fp32.
HWY_INLINE VF DecodeFp8Fields(const uint8_t* codes, VF scale) {
  return hn::Mul(E4M3ToFloat(DF(), codes), scale);
}

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2 // F16C
// The same values for codes without NaN, where the CPU converts fp16 in hardware: s eeee
// mmm -> the fp16 s 0eeee mmm0000000, which is the E4M3 value times 2^-8 exactly (subnormals
// included: 0.mmm * 2^-14 = 0.mmm * 2^-6 * 2^-8). Then one fp32 product with 2^8 times the
// source scale, which rounds as the decoder's product does (the same real number): `scaled`
// is 2^(e + 8 - 127) for the source byte e, so e <= kLargestFp16Scale.
HWY_INLINE VF DecodeFp8NoNaN(const uint8_t* codes, VF scaled) {
  const DF df;
  const hn::Rebind<uint8_t, DF> d8;
  const hn::Rebind<int16_t, DF> d16;
  const hn::Rebind<hwy::float16_t, DF> dh;
  const auto high = hn::ShiftLeft<8>(hn::PromoteTo(d16, hn::LoadU(d8, codes)));          // code in bits 15..8
  const auto bits = hn::And(hn::ShiftRight<1>(high), hn::Set(d16, int16_t(0xBFFF))); // sign stays, bit 14 cleared
  return hn::Mul(hn::PromoteTo(df, hn::BitCast(dh, bits)), scaled);
}
constexpr uint8_t kLargestFp16Scale = E8M0::max_code - 8; // 2^8 times a larger scale is past fp32
#endif

// Whether any of the 32 codes of a block is a NaN (magnitude 0x7F).
HWY_INLINE bool HasNaNCode(const uint8_t* codes) {
  const hn::CappedTag<uint8_t, Mxfp4::block> d8;
  const auto magnitude = hn::Set(d8, uint8_t{0x7F});
  for (size_t i = 0; i < Mxfp4::block; i += hn::Lanes(d8))
    if (!hn::AllFalse(d8, hn::Eq(hn::And(hn::LoadU(d8, codes + i), magnitude), magnitude))) return true;
  return false;
}

// FP8 rows: each group of blocks decoded into `decoded`, then quantized from there.
HWY_INLINE Mxfp4RowSums QuantizeRowFp8(const uint8_t* codes, const uint8_t* source_scales, int cols, uint8_t* packed,
                                       uint8_t* scales) {
  const DF df;
  HWY_ALIGN float decoded[kGroup * Mxfp4::block];
  const int blocks = cols / Mxfp4::block;
  RowSums sums;
  for (int first = 0; first < blocks; first += kGroup) {
    const int count = std::min(kGroup, blocks - first);
    for (int b = 0; b < count; ++b) {
      const uint8_t* block_codes = codes + size_t(first + b) * Mxfp4::block;
      float* x = decoded + size_t(b) * Mxfp4::block;
      const uint8_t source_scale_code = source_scales[first + b];
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
      if (source_scale_code <= kLargestFp16Scale && !HasNaNCode(block_codes)) {
        const VF scaled = hn::Set(df, e8m0_to_float(uint8_t(source_scale_code + 8)));
        for (size_t v = 0; v < kVectors; ++v)
          hn::Store(DecodeFp8NoNaN(block_codes + v * kLanes, scaled), df, x + v * kLanes);
        continue;
      }
#endif
      const VF source_scale = hn::Set(df, e8m0_to_float(source_scale_code));
      for (size_t v = 0; v < kVectors; ++v)
        hn::Store(DecodeFp8Fields(block_codes + v * kLanes, source_scale), df, x + v * kLanes);
    }
    QuantizeGroup(decoded, count, packed + size_t(first) * Mxfp4::bytes_per_block, scales + first, sums);
  }
  return Mxfp4RowSums{sums.source_sq, sums.dequant_sq, sums.error_sq};
}
#endif

Mxfp4RowSums QuantizeRowMxfp4(const float* x, int cols, uint8_t* packed, uint8_t* scales) {
#if HWY_TARGET != HWY_SCALAR
  if (LanesAsCompiled()) return QuantizeRowFloat(x, cols, packed, scales);
#endif
  return quantize_row_mxfp4_ref(x, cols, packed, scales);
}

Mxfp4RowSums QuantizeRowMxfp4FromFp8(const uint8_t* codes, const uint8_t* source_scales, int cols, uint8_t* packed,
                                     uint8_t* scales) {
#if HWY_TARGET != HWY_SCALAR
  if (LanesAsCompiled()) return QuantizeRowFp8(codes, source_scales, cols, packed, scales);
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
