// NVFP4 row kernels on Highway SIMD, dispatched at run time (foreach_target): one binary
// runs AVX2 / AVX-512 on x86-64 and NEON / SVE on aarch64. Bit-identical to the _ref:
// the same fp32 division by the rounded scale, the same compare thresholds, the same
// terms folded in halves (sum_block_fp64's and sum_block_fp32's order), built with
// -ffp-contract=off.
#include <algorithm>
#include <bit>
#include <cstring>

#include "kernels/nvfp4.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/nvfp4_simd.cpp"
#include "hwy/foreach_target.h" // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/cpu/e4m3_simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace shardq {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::CappedTag<float, Nvfp4::block>;
using DD = hn::CappedTag<double, Nvfp4::block>;
using DFD = hn::Rebind<float, DD>; // floats that widen to one DD vector

float block_amax(const float* x) {
  const DF df;
  auto amax = hn::Zero(df);
  for (size_t i = 0; i < Nvfp4::block; i += hn::Lanes(df)) amax = hn::Max(amax, hn::Abs(hn::LoadU(df, x + i)));
  return hn::GetLane(hn::MaxOfLanes(df, amax));
}

// Folds 16 terms in place in sum_block_fp64's order: whole vectors while a half is at
// least one vector wide, then lane by lane.
double fold_block(double* terms) {
  const DD dd;
  const size_t lanes = hn::Lanes(dd);
  size_t half = Nvfp4::block / 2;
  for (; half >= lanes; half /= 2)
    for (size_t i = 0; i < half; i += lanes)
      hn::StoreU(hn::Add(hn::LoadU(dd, terms + i), hn::LoadU(dd, terms + i + half)), dd, terms + i);
  for (; half >= 1; half /= 2)
    for (size_t i = 0; i < half; ++i) terms[i] = terms[i] + terms[i + half];
  return terms[0];
}

// block_error_nvfp4 from dequantized values: sum (double(deq) - double(x))^2.
double block_error_of(const float* deq, const float* x) {
  const DD dd;
  const DFD dfd;
  HWY_ALIGN double terms[Nvfp4::block];
  for (size_t i = 0; i < Nvfp4::block; i += hn::Lanes(dd)) {
    const auto diff = hn::Sub(hn::PromoteTo(dd, hn::LoadU(dfd, deq + i)), hn::PromoteTo(dd, hn::LoadU(dfd, x + i)));
    hn::Store(hn::Mul(diff, diff), dd, terms + i);
  }
  return fold_block(terms);
}

// Quantizes one block with a given scale code: nibbles (one per byte) and the dequantized
// values (e2m1 * scale) * global, as the ref computes them.
void quantize_block(const float* x, uint8_t scale_code, float global_scale, uint8_t* nibbles, float* deq) {
  const DF df;
  const hn::Rebind<int32_t, DF> di;
  const hn::Rebind<uint8_t, DF> du8;
  const float scale = e4m3_to_float(scale_code);
  const auto divisor = hn::Set(df, scale * global_scale);
  const auto scale_v = hn::Set(df, scale), global_v = hn::Set(df, global_scale);
  const auto half = hn::Set(df, 0.5f), one = hn::Set(df, 1.0f), two = hn::Set(df, 2.0f);
  for (size_t i = 0; i < Nvfp4::block; i += hn::Lanes(df)) {
    const auto q = hn::Div(hn::LoadU(df, x + i), divisor);
    const auto a = hn::Abs(q);
    // The ref's e2m1_index, written as 7 minus the thresholds a is at or below (so NaN,
    // below none of them, lands on 6.0 as in the ref). Each step's value increment is
    // subtracted alongside: magnitudes stay exact small fp32 sums.
    auto index = hn::Set(di, 7);
    auto magnitude = hn::Set(df, 6.0f);
    const auto step = [&](auto below, auto value_step) {
      index = hn::Add(index, hn::VecFromMask(di, hn::RebindMask(di, below)));
      magnitude = hn::Sub(magnitude, hn::IfThenElseZero(below, value_step));
    };
    step(hn::Le(a, hn::Set(df, 5.0f)), two);
    step(hn::Lt(a, hn::Set(df, 3.5f)), one);
    step(hn::Le(a, hn::Set(df, 2.5f)), one);
    step(hn::Lt(a, hn::Set(df, 1.75f)), half);
    step(hn::Le(a, hn::Set(df, 1.25f)), half);
    step(hn::Lt(a, hn::Set(df, 0.75f)), half);
    step(hn::Le(a, hn::Set(df, 0.25f)), half);
    const auto negative = hn::Lt(q, hn::Zero(df));
    const auto code = hn::Or(index, hn::IfThenElseZero(hn::RebindMask(di, negative), hn::Set(di, 8)));
    hn::StoreU(hn::DemoteTo(du8, code), du8, nibbles + i);
    const auto value = hn::IfThenElse(negative, hn::Neg(magnitude), magnitude);
    hn::StoreU(hn::Mul(hn::Mul(value, scale_v), global_v), df, deq + i);
  }
}

// 16 nibbles (one per byte) -> 8 bytes, low nibble = even element, with 64-bit shifts.
void pack_block(const uint8_t* nibbles, uint8_t* packed) {
  for (int half = 0; half < 2; ++half) {
    uint64_t v;
    std::memcpy(&v, nibbles + 8 * half, 8);
    v = (v | (v >> 4)) & 0x00FF00FF00FF00FFull;  // byte 2j = n[2j] | n[2j+1] << 4
    v = (v | (v >> 8)) & 0x0000FFFF0000FFFFull;  // gather bytes 0,2 and 4,6
    v = (v | (v >> 16)) & 0x00000000FFFFFFFFull; // gather the two 16-bit pairs
    const uint32_t bytes = uint32_t(v);
    std::memcpy(packed + 4 * half, &bytes, 4);
  }
}

// E2M1 value of nibbles (0..15 in int32 lanes of D's shape): +-{0, .5, 1, 1.5, 2, 3, 4, 6};
// indices >= 2 are fp32 fields ((index + 252) << 22: exponent index/2 - 1, mantissa bit
// index & 1).
template <class D>
HWY_INLINE hn::Vec<D> E2m1Value(D d, hn::Vec<hn::RebindToSigned<D>> nibble) {
  const hn::RebindToSigned<D> di;
  const auto index = hn::And(nibble, hn::Set(di, 7));
  const auto small = hn::Mul(hn::ConvertTo(d, index), hn::Set(d, 0.5f));
  const auto large = hn::BitCast(d, hn::ShiftLeft<22>(hn::Add(index, hn::Set(di, 252))));
  const auto magnitude = hn::IfThenElse(hn::RebindMask(d, hn::Lt(index, hn::Set(di, 2))), small, large);
  return hn::Or(magnitude, hn::BitCast(d, hn::ShiftLeft<28>(hn::And(nibble, hn::Set(di, 8)))));
}

#if HWY_TARGET != HWY_SCALAR // the lane layout needs vectors that split into halves
// ------------------------------------------------------------ blocks as lanes
// The fast path: lane l of every vector belongs to block l, element e of all blocks is one
// vector (columns[e * stride + l]). Amax, scale codes, the E2M1 pass and the fp64 fold of
// sum_block_fp64 are then all vertical, for any vector width. No vector is kept in an array
// or a struct (SVE vectors are sizeless): the fold is a template recursion over elements.
using DL = hn::CappedTag<float, 16>;   // lanes = blocks
using DLI = hn::RebindToSigned<DL>;
using DLU = hn::RebindToUnsigned<DL>;
using DLH = hn::Half<DL>;
using DLD = hn::Repartition<double, DL>; // one half of the lanes, widened
using VL = hn::Vec<DL>;
using VLI = hn::Vec<DLI>;
using VLU = hn::Vec<DLU>;
using VLD = hn::Vec<DLD>;
constexpr size_t kMaxLanes = hn::MaxLanes(DL());

// e4m3_from_float for s in [2^-9, 448]: subnormals by one RNE rounding of s * 2^9 (exact),
// normals by rounding the fp32 mantissa to 3 bits (ties to even) in the integer bits.
HWY_INLINE VLI E4m3CodeOfClamped(VL s) {
  const DL dl;
  const DLI di;
  const DLU du;
  const VLU bits = hn::BitCast(du, s);
  const VLU odd = hn::And(hn::ShiftRight<20>(bits), hn::Set(du, 1u));
  const VLU rounded = hn::ShiftRight<20>(hn::Add(bits, hn::Add(hn::Set(du, 0x7FFFFu), odd)));
  const VLI normal = hn::Sub(hn::BitCast(di, rounded), hn::Set(di, (127 - E4M3::bias) << 3));
  const VLI subnormal = hn::ConvertTo(di, hn::Round(hn::Mul(s, hn::Set(dl, 512.0f))));
  const auto is_subnormal = hn::RebindMask(di, hn::Lt(s, hn::Set(dl, E4M3::min_normal)));
  return hn::Min(hn::IfThenElse(is_subnormal, subnormal, normal), hn::Set(di, E4M3::max_code));
}

// e4m3_to_float of positive codes 0..0x7E.
HWY_INLINE VL E4m3ValueOfPositive(VLI code) {
  const DL dl;
  const DLI di;
  const VL normal = hn::BitCast(dl, hn::Add(hn::ShiftLeft<20>(code), hn::Set(di, (127 - E4M3::bias) << 23)));
  const VL subnormal = hn::Mul(hn::ConvertTo(dl, code), hn::Set(dl, E4M3::min_subnormal));
  return hn::IfThenElse(hn::RebindMask(dl, hn::Lt(code, hn::Set(di, 8))), subnormal, normal);
}

// The ref's e2m1_from_float on finite q, and value = its +-E2M1 value. |q|, clamped to 8
// (so the sum below stays in its magic number's binade), is rounded to the E2M1 grid by
// one fp32 addition of a magic number whose ulp is the grid step there (2^22: step 0.5
// below 2; 2^23: 1 below 4; 2^24: 2 above), so the hardware's ties-to-even on the sum's
// mantissa lands exactly where the ref's thresholds do (0.25 -> 0, 0.75 -> 1, 1.75 -> 2,
// 2.5 -> 2, 3.5 -> 4, 5 -> 4). The
// magic numbers carry an offset in their mantissa (0, 2 and 4 steps) that makes the sum's
// mantissa field the E2M1 index itself: round(2a), round(a) + 2, round(a / 2) + 4, then
// saturated at 7 (value 6).
HWY_INLINE VLI E2m1Nibble(VL q, VL& value) {
  const DL dl;
  const DLI di;
  const VL a = hn::Min(hn::Abs(q), hn::Set(dl, 8.0f));
  const VL magic = hn::IfThenElse(hn::Lt(a, hn::Set(dl, 2.0f)), hn::Set(dl, 0x1p22f),
                                  hn::IfThenElse(hn::Lt(a, hn::Set(dl, 4.0f)), hn::Set(dl, 0x1p23f + 2.0f),
                                                 hn::Set(dl, 0x1p24f + 8.0f)));
  const VL sum = hn::Add(a, magic);
  const VL magnitude = hn::Min(hn::Sub(sum, magic), hn::Set(dl, 6.0f));
  const VLI index = hn::Min(hn::And(hn::BitCast(di, sum), hn::Set(di, 0xF)), hn::Set(di, 7));
  const auto negative = hn::Lt(q, hn::Zero(dl));
  value = hn::Or(magnitude, hn::IfThenElseZero(negative, hn::Set(dl, -0.0f)));
  return hn::Or(index, hn::IfThenElseZero(hn::RebindMask(di, negative), hn::Set(di, 8)));
}

// (double(a) - double(b))^2 per lane, as two halves.
HWY_INLINE void SquaredDifferences(VL a, VL b, VLD& lo, VLD& hi) {
  const DLD dd;
  const DLH dh;
  const VLD d_lo = hn::Sub(hn::PromoteTo(dd, hn::LowerHalf(dh, a)), hn::PromoteTo(dd, hn::LowerHalf(dh, b)));
  const VLD d_hi = hn::Sub(hn::PromoteTo(dd, hn::UpperHalf(dh, a)), hn::PromoteTo(dd, hn::UpperHalf(dh, b)));
  lo = hn::Mul(d_lo, d_lo);
  hi = hn::Mul(d_hi, d_hi);
}

// One candidate scale over the elements of N lane blocks. Elements are visited in the
// order of the fold in halves (sum_block_fp64's and sum_block_fp32's: the pairwise tree
// over elements 0,8,4,12,2,10,6,14,1,...): Tree<start, stride, count> sums elements
// start + i * stride. Each element also ORs its nibble into the packed words (low word:
// elements 0..7). kError: the fp64 error terms of the MSE search into lo / hi. kReport:
// block_report_sums_nvfp4's fp32 terms (scaled by down) into error32 / reference32.
template <bool kError, bool kReport, int kStart, int kStride, int kCount>
HWY_INLINE void CandidateTree(const float* columns, size_t stride, VL divisor, VL scale, VL global, VL down,
                              VLU& low_word, VLU& high_word, VLD& lo, VLD& hi, VL& error32, VL& reference32) {
  if constexpr (kCount == 1) {
    const DLU du;
    const VL x = hn::LoadU(DL(), columns + size_t(kStart) * stride);
    VL value;
    const VLU nibble = hn::BitCast(du, E2m1Nibble(hn::Div(x, divisor), value));
    if constexpr (kStart < 8) low_word = hn::Or(low_word, hn::ShiftLeft<4 * kStart>(nibble));
    else high_word = hn::Or(high_word, hn::ShiftLeft<4 * (kStart - 8)>(nibble));
    const VL deq = hn::Mul(hn::Mul(value, scale), global);
    if constexpr (kError) SquaredDifferences(deq, x, lo, hi);
    if constexpr (kReport) {
      const VL diff = hn::Mul(hn::Sub(deq, x), down), scaled = hn::Mul(x, down);
      error32 = hn::Mul(diff, diff);
      reference32 = hn::Mul(scaled, scaled);
    }
  } else {
    VLD lo2, hi2;
    VL error2, reference2;
    CandidateTree<kError, kReport, kStart, kStride * 2, kCount / 2>(columns, stride, divisor, scale, global, down,
                                                                   low_word, high_word, lo, hi, error32, reference32);
    CandidateTree<kError, kReport, kStart + kStride, kStride * 2, kCount / 2>(
        columns, stride, divisor, scale, global, down, low_word, high_word, lo2, hi2, error2, reference2);
    if constexpr (kError) {
      lo = hn::Add(lo, lo2);
      hi = hn::Add(hi, hi2);
    }
    if constexpr (kReport) {
      error32 = hn::Add(error32, error2);
      reference32 = hn::Add(reference32, reference2);
    }
  }
}

// Where the report sums find the dequantized values: nibbles in the packed words (low word
// = elements 0..7), nibble bytes in lane layout, or the values themselves in lane layout.
enum class DeqFrom { words, nibbles, values };
struct DeqPointers {
  const uint8_t* nibbles; // DeqFrom::nibbles
  const float* values;    // DeqFrom::values
};

// Element kElement's dequantized values per lane block: (e2m1 * scale) * global of its
// nibble, or the given value.
template <DeqFrom kFrom, int kElement>
HWY_INLINE VL DequantizedElement(DeqPointers at, size_t stride, VLU low, VLU high, VL scale, VL global) {
  const DLI di;
  VLI nibble;
  if constexpr (kFrom == DeqFrom::values) {
    return hn::LoadU(DL(), at.values + size_t(kElement) * stride);
  } else if constexpr (kFrom == DeqFrom::words) {
    const VLU word = kElement < 8 ? low : high;
    nibble = hn::BitCast(di, hn::And(hn::ShiftRight<4 * (kElement % 8)>(word), hn::Set(DLU(), 0xFu)));
  } else {
    nibble = hn::PromoteTo(di, hn::LoadU(hn::Rebind<uint8_t, DL>(), at.nibbles + size_t(kElement) * stride));
  }
  return hn::Mul(hn::Mul(E2m1Value(DL(), nibble), scale), global);
}

// block_report_sums_nvfp4 per lane block, before widening: fp32 terms ((deq - x) * down)^2
// and (x * down)^2 summed in sum_block_fp32's order (the tree of CandidateTree).
template <DeqFrom kFrom, int kStart, int kStride, int kCount>
HWY_INLINE void ReportTree(const float* columns, DeqPointers at, size_t stride, VLU low, VLU high, VL scale, VL global,
                           VL down, VL& error, VL& reference) {
  if constexpr (kCount == 1) {
    const VL x = hn::LoadU(DL(), columns + size_t(kStart) * stride);
    const VL deq = DequantizedElement<kFrom, kStart>(at, stride, low, high, scale, global);
    const VL diff = hn::Mul(hn::Sub(deq, x), down), value = hn::Mul(x, down);
    error = hn::Mul(diff, diff);
    reference = hn::Mul(value, value);
  } else {
    VL error2, reference2;
    ReportTree<kFrom, kStart, kStride * 2, kCount / 2>(columns, at, stride, low, high, scale, global, down, error,
                                                       reference);
    ReportTree<kFrom, kStart + kStride, kStride * 2, kCount / 2>(columns, at, stride, low, high, scale, global, down,
                                                                 error2, reference2);
    error = hn::Add(error, error2);
    reference = hn::Add(reference, reference2);
  }
}

// Lane sums widened to fp64 and multiplied twice by up (exact: a power of two), out[0..N).
HWY_INLINE void StoreWidened(VL sum, VL up, double* out) {
  const DLD dd;
  const DLH dh;
  const VLD up_lo = hn::PromoteTo(dd, hn::LowerHalf(dh, up)), up_hi = hn::PromoteTo(dd, hn::UpperHalf(dh, up));
  hn::StoreU(hn::Mul(hn::Mul(hn::PromoteTo(dd, hn::LowerHalf(dh, sum)), up_lo), up_lo), dd, out);
  hn::StoreU(hn::Mul(hn::Mul(hn::PromoteTo(dd, hn::UpperHalf(dh, sum)), up_hi), up_hi), dd, out + hn::Lanes(dd));
}

// report_scale_of_amax per lane: E = clamp(biased exponent, 1, 253), down = 2^(127 - E),
// up = 2^(E - 127).
HWY_INLINE void ReportScales(VL amax, VL& down, VL& up) {
  const DL dl;
  const DLU du;
  const VLU exponent = hn::Min(hn::Max(hn::ShiftRight<23>(hn::BitCast(du, amax)), hn::Set(du, 1u)), hn::Set(du, 253u));
  down = hn::BitCast(dl, hn::ShiftLeft<23>(hn::Sub(hn::Set(du, 254u), exponent)));
  up = hn::BitCast(dl, hn::ShiftLeft<23>(exponent));
}

// block_report_sums_nvfp4 of N lane blocks whose amax is known, into errors / references
// (code and global_scale are not used with DeqFrom::values).
template <DeqFrom kFrom>
HWY_INLINE void ReportLanes(const float* columns, DeqPointers at, size_t stride, VLU low, VLU high, VLI code, VL amax,
                            float global_scale, double* errors, double* references) {
  const DL dl;
  VL down, up;
  ReportScales(amax, down, up);
  VL error, reference;
  ReportTree<kFrom, 0, 1, Nvfp4::block>(columns, at, stride, low, high, E4m3ValueOfPositive(code),
                                        hn::Set(dl, global_scale), down, error, reference);
  StoreWidened(error, up, errors);
  StoreWidened(reference, up, references);
}

HWY_INLINE VL BlockAmax(const float* columns, size_t stride) {
  const DL dl;
  VL amax = hn::Zero(dl);
  for (int e = 0; e < Nvfp4::block; ++e) amax = hn::Max(amax, hn::Abs(hn::LoadU(dl, columns + size_t(e) * stride)));
  return amax;
}

// A double-lane mask pair as one float-lane mask (lo half = lanes 0..N/2-1).
HWY_INLINE hn::Mask<DL> CombineMasks(hn::Mask<DLD> lo, hn::Mask<DLD> hi) {
  const DL dl;
  const DLD dd;
  const DLH dh;
  const VLD one = hn::Set(dd, 1.0), zero = hn::Zero(dd);
  const VL both = hn::Combine(dl, hn::DemoteTo(dh, hn::IfThenElse(hi, one, zero)),
                              hn::DemoteTo(dh, hn::IfThenElse(lo, one, zero)));
  return hn::Eq(both, hn::Set(dl, 1.0f));
}

// nvfp4_block_scale_code per lane for one alpha.
HWY_INLINE VLI ScaleCodes(VL amax, hn::Mask<DL> zero, VL six_global, float alpha) {
  const DL dl;
  const DLI di;
  const VL unclamped = hn::Div(hn::Mul(hn::Set(dl, alpha), amax), six_global);
  const VL clamped = hn::Min(hn::Max(unclamped, hn::Set(dl, Nvfp4::min_scale)), hn::Set(dl, Nvfp4::max_scale));
  return hn::IfThenElse(hn::RebindMask(di, zero), hn::Set(di, kNvfp4ZeroBlockScaleCode), E4m3CodeOfClamped(clamped));
}

// Scale codes of every candidate (nvfp4_block_scale_code per lane), walked from the largest
// alpha down and compacted per lane: slot s holds the lane's s-th distinct code and the
// first k that gave it; slots past a lane's last distinct code repeat its last slot (same
// code, same error: never a strict improvement). Returns the number of slots to evaluate.
HWY_INLINE int DistinctCodeSlots(VL amax, hn::Mask<DL> zero, VL six_global, const float* alphas, int candidates,
                                 int32_t* slot_codes, int32_t* slot_ks) {
  const DL dl;
  const DLI di;
  const size_t n = hn::Lanes(dl);
  VLI previous = hn::Set(di, -1), count = hn::Zero(di);
  for (int walk = 0; walk < candidates; ++walk) {
    const int k = candidates - 1 - walk;
    const VLI code = ScaleCodes(amax, zero, six_global, alphas[k]);
    const auto fresh = hn::Ne(code, previous);
    count = hn::Sub(count, hn::VecFromMask(di, fresh)); // 1-based slot of this code
    previous = code;
    for (int slot = 0; slot <= walk; ++slot) {
      const auto here = hn::And(fresh, hn::Eq(count, hn::Set(di, slot + 1)));
      int32_t* codes_at = slot_codes + size_t(slot) * n;
      int32_t* ks_at = slot_ks + size_t(slot) * n;
      const VLI old_code = slot == walk ? hn::Zero(di) : hn::Load(di, codes_at);
      const VLI old_k = slot == walk ? hn::Zero(di) : hn::Load(di, ks_at);
      hn::Store(hn::IfThenElse(here, code, old_code), di, codes_at);
      hn::Store(hn::IfThenElse(here, hn::Set(di, k), old_k), di, ks_at);
    }
  }
  const int slots = int(hn::GetLane(hn::MaxOfLanes(di, count)));
  for (int slot = 1; slot < slots; ++slot) {
    const auto past_last = hn::Lt(count, hn::Set(di, slot + 1));
    int32_t* codes_at = slot_codes + size_t(slot) * n;
    int32_t* ks_at = slot_ks + size_t(slot) * n;
    hn::Store(hn::IfThenElse(past_last, hn::Load(di, codes_at - n), hn::Load(di, codes_at)), di, codes_at);
    hn::Store(hn::IfThenElse(past_last, hn::Load(di, ks_at - n), hn::Load(di, ks_at)), di, ks_at);
  }
  return slots;
}

// What the lane chooser hands back; all optional except codes.
struct LaneOutputs {
  uint8_t* codes;      // N scale codes
  uint32_t* packed;    // N x 2 words of packed nibbles (8 bytes per block), or null
  double* errors;      // N block_report_sums_nvfp4 of the chosen nibbles, or null
  double* references;  // (with errors)
};

// Block counters of N lane blocks, for lanes < counted.
HWY_INLINE void CountBlocks(VL amax, hn::Mask<DL> zero, VL six_global, size_t counted, BlockStats& stats) {
  const DL dl;
  const auto counted_mask = hn::FirstN(dl, counted);
  const auto underflow = hn::AndNot(zero, hn::Lt(hn::Div(amax, six_global), hn::Set(dl, Nvfp4::min_scale)));
  stats.blocks += counted;
  stats.zero_blocks += hn::CountTrue(dl, hn::And(zero, counted_mask));
  stats.scale_underflows += hn::CountTrue(dl, hn::And(underflow, counted_mask));
}

HWY_INLINE void StoreCodesAndNibbles(VLI code, VLU low, VLU high, const LaneOutputs& out) {
  const hn::Rebind<uint8_t, DLI> d8;
  hn::StoreU(hn::DemoteTo(d8, code), d8, out.codes);
  if (out.packed != nullptr) hn::StoreInterleaved2(low, high, DLU(), out.packed);
}

// One candidate (RTN): its code, nibbles and, with kReport, its report terms straight from
// its values.
template <bool kReport>
HWY_INLINE void QuantizeLanesAtAlpha(const float* columns, size_t stride, VL amax, hn::Mask<DL> zero, VL six_global,
                                     VL global, float alpha, const LaneOutputs& out) {
  const DLU du;
  const VLI code = ScaleCodes(amax, zero, six_global, alpha);
  const VL scale = E4m3ValueOfPositive(code);
  VLU low = hn::Zero(du), high = hn::Zero(du);
  VLD unused_lo, unused_hi;
  VL down = hn::Zero(DL()), up = hn::Zero(DL()), error, reference;
  if constexpr (kReport) ReportScales(amax, down, up);
  CandidateTree<false, kReport, 0, 1, Nvfp4::block>(columns, stride, hn::Mul(scale, global), scale, global, down, low,
                                                    high, unused_lo, unused_hi, error, reference);
  StoreCodesAndNibbles(code, low, high, out);
  if constexpr (kReport) {
    StoreWidened(error, up, out.errors);
    StoreWidened(reference, up, out.references);
  }
}

// The MSE search. Candidates are walked from the largest alpha down and a lane moves only on
// a strictly smaller fp64 error, so exact ties keep the larger alpha; a candidate whose code
// equals the lane's best gives the same error and never moves it (the ref's skip). With
// kReport, the chosen nibbles' report sums from the packed words. Returns each lane's k.
template <bool kReport>
HWY_INLINE VLI SearchLanes(const float* columns, size_t stride, VL amax, hn::Mask<DL> zero, VL six_global, VL global,
                           float global_scale, const float* alphas, int candidates, const LaneOutputs& out) {
  const DL dl;
  const DLI di;
  const DLU du;
  const DLD dd;
  // Distinct codes per lane: a candidate whose code equals the previous one's gives the
  // same error and never wins (codes fall as alpha falls, so repeats are adjacent), so each
  // lane only evaluates its distinct codes, in walk order, each with its first (largest) k.
  HWY_ALIGN int32_t slot_codes[kMaxMseCandidates * kMaxLanes], slot_ks[kMaxMseCandidates * kMaxLanes];
  const size_t n = hn::Lanes(dl);
  const int slots = DistinctCodeSlots(amax, zero, six_global, alphas, candidates, slot_codes, slot_ks);

  VLI best_code = hn::Zero(di), best_k = hn::Zero(di);
  VLU best_low = hn::Zero(du), best_high = hn::Zero(du);
  VLD best_lo = hn::Zero(dd), best_hi = hn::Zero(dd);
  const VL no_down = hn::Zero(dl); // no report terms during the search
  for (int slot = 0; slot < slots; ++slot) {
    const VLI code = hn::Load(di, slot_codes + size_t(slot) * n);
    const VLI k = hn::Load(di, slot_ks + size_t(slot) * n);
    const VL scale = E4m3ValueOfPositive(code);
    VLU low = hn::Zero(du), high = hn::Zero(du);
    VLD lo = hn::Zero(dd), hi = hn::Zero(dd);
    VL unused_error, unused_reference;
    CandidateTree<true, false, 0, 1, Nvfp4::block>(columns, stride, hn::Mul(scale, global), scale, global, no_down,
                                                   low, high, lo, hi, unused_error, unused_reference);
    if (slot == 0) {
      best_code = code;
      best_k = k;
      best_low = low;
      best_high = high;
      best_lo = lo;
      best_hi = hi;
      continue;
    }
    // A strictly smaller error only: exact ties keep the larger alpha, as the ref's walk.
    const auto better_lo = hn::Lt(lo, best_lo), better_hi = hn::Lt(hi, best_hi);
    const auto better = CombineMasks(better_lo, better_hi);
    const auto better_i = hn::RebindMask(di, better);
    const auto better_u = hn::RebindMask(du, better);
    best_code = hn::IfThenElse(better_i, code, best_code);
    best_k = hn::IfThenElse(better_i, k, best_k);
    best_low = hn::IfThenElse(better_u, low, best_low);
    best_high = hn::IfThenElse(better_u, high, best_high);
    best_lo = hn::IfThenElse(better_lo, lo, best_lo);
    best_hi = hn::IfThenElse(better_hi, hi, best_hi);
  }
  StoreCodesAndNibbles(best_code, best_low, best_high, out);
  if constexpr (kReport)
    ReportLanes<DeqFrom::words>(columns, {}, stride, best_low, best_high, best_code, amax, global_scale, out.errors,
                                out.references);
  return best_k;
}

// choose_and_quantize_block_nvfp4 on N lane blocks at once, counters for lanes < counted.
// kError: the candidates' fp64 errors decide (the MSE search); without it there is one
// candidate. kReport: out.errors / out.references get the chosen nibbles'
// block_report_sums_nvfp4.
template <bool kError, bool kReport>
void ChooseLanes(const float* columns, size_t stride, float global_scale, const float* alphas, int candidates,
                 size_t counted, const LaneOutputs& out, BlockStats& stats) {
  const DL dl;
  const DLI di;
  const VL amax = BlockAmax(columns, stride);
  const VL six_global = hn::Set(dl, E2M1::max * global_scale), global = hn::Set(dl, global_scale);
  const auto zero = hn::Eq(amax, hn::Zero(dl));
  CountBlocks(amax, zero, six_global, counted, stats);
  if constexpr (!kError) {
    QuantizeLanesAtAlpha<kReport>(columns, stride, amax, zero, six_global, global, alphas[0], out);
    stats.candidate_wins[0] += counted;
  } else {
    const VLI best_k =
        SearchLanes<kReport>(columns, stride, amax, zero, six_global, global, global_scale, alphas, candidates, out);
    const auto counted_i = hn::RebindMask(di, hn::FirstN(dl, counted));
    for (int k = 0; k < candidates; ++k)
      stats.candidate_wins[k] += hn::CountTrue(di, hn::And(hn::Eq(best_k, hn::Set(di, k)), counted_i));
  }
}

// N consecutive blocks of a row into lane layout: columns[e * N + l] = x[16 l + e], by two
// rounds of 4-way de-interleaving (x[16 l + 4 j + k]: first k, then j).
void TransposeBlocks(const float* x, float* columns) {
  const DL dl;
  const size_t n = hn::Lanes(dl);
  HWY_ALIGN float by_k[4 * 4 * kMaxLanes]; // by_k[k * 4N + 4 l + j] = x[16 l + 4 j + k]
  for (size_t c = 0; c < 4; ++c) {
    VL v0, v1, v2, v3;
    hn::LoadInterleaved4(dl, x + 4 * n * c, v0, v1, v2, v3);
    hn::StoreU(v0, dl, by_k + 0 * 4 * n + n * c);
    hn::StoreU(v1, dl, by_k + 1 * 4 * n + n * c);
    hn::StoreU(v2, dl, by_k + 2 * 4 * n + n * c);
    hn::StoreU(v3, dl, by_k + 3 * 4 * n + n * c);
  }
  for (size_t k = 0; k < 4; ++k) {
    VL w0, w1, w2, w3;
    hn::LoadInterleaved4(dl, by_k + k * 4 * n, w0, w1, w2, w3);
    hn::StoreU(w0, dl, columns + (0 + k) * n);
    hn::StoreU(w1, dl, columns + (4 + k) * n);
    hn::StoreU(w2, dl, columns + (8 + k) * n);
    hn::StoreU(w3, dl, columns + (12 + k) * n);
  }
}

// Block sums of n lane blocks into stats in block order, as the ref's add_sums; in registers
// (stats may alias errors as far as the compiler knows).
HWY_INLINE void AddLaneSums(const double* errors, const double* references, size_t n, BlockStats& stats) {
  double error_sq = stats.error_sq, reference_sq = stats.reference_sq;
  for (size_t l = 0; l < n; ++l) {
    error_sq += errors[l];
    reference_sq += references[l];
  }
  stats.error_sq = error_sq;
  stats.reference_sq = reference_sq;
}

// The hardware prefetcher alone left the first touch of each group (the transpose) waiting
// on DRAM for a fifth of the RTN kernel's time. 2 KiB ahead measured best (1, 2, 4 and 8 KiB
// tried). A prefetch past the end of the input never faults; the address is formed as an
// integer, since a pointer past the end of the caller's buffer would be undefined.
constexpr size_t kPrefetchAheadBytes = 2048;

HWY_INLINE void PrefetchAhead(const float* group, size_t blocks) {
  constexpr size_t kLineBytes = 64;
  const uintptr_t ahead = reinterpret_cast<uintptr_t>(group) + kPrefetchAheadBytes;
  for (size_t at = 0; at < blocks * Nvfp4::block * sizeof(float); at += kLineBytes)
    __builtin_prefetch(reinterpret_cast<const void*>(ahead + at));
}

// Blocks [b, b + N) of a row through the lane chooser; stats added in block order.
void QuantizeLaneBlocks(const float* x, float global_scale, const float* alphas, int candidates, uint8_t* packed,
                        uint8_t* scales, BlockStats& stats) {
  const size_t n = hn::Lanes(DL());
  HWY_ALIGN float columns[Nvfp4::block * kMaxLanes];
  HWY_ALIGN double errors[kMaxLanes], references[kMaxLanes];
  TransposeBlocks(x, columns);
  // The row's bytes are 4-byte words on every Highway target (x86 and Arm, little-endian).
  const LaneOutputs out{scales, reinterpret_cast<uint32_t*>(packed), errors, references};
  if (candidates == 1) ChooseLanes<false, true>(columns, n, global_scale, alphas, 1, n, out, stats);
  else ChooseLanes<true, true>(columns, n, global_scale, alphas, candidates, n, out, stats);
  AddLaneSums(errors, references, n, stats);
}

// block_report_sums_nvfp4 of N lane blocks from nibble bytes.
void LaneBlockErrors(const float* columns, const uint8_t* nibbles, size_t stride, const uint8_t* codes,
                     float global_scale, double* errors, double* references) {
  const DLU du;
  const VLI code = hn::PromoteTo(DLI(), hn::LoadU(hn::Rebind<uint8_t, DL>(), codes));
  ReportLanes<DeqFrom::nibbles>(columns, {nibbles, nullptr}, stride, hn::Zero(du), hn::Zero(du), code,
                                BlockAmax(columns, stride), global_scale, errors, references);
}

// add_row_report_sums_nvfp4 of the row's first blocks, N at a time; returns how many.
size_t RowReportSumsLanes(const float* x, const float* deq, size_t blocks, BlockStats& stats) {
  const DLU du;
  const size_t n = hn::Lanes(DL());
  if (n < 4) return 0; // halves of at least two lanes
  HWY_ALIGN float x_columns[Nvfp4::block * kMaxLanes], deq_columns[Nvfp4::block * kMaxLanes];
  HWY_ALIGN double errors[kMaxLanes], references[kMaxLanes];
  size_t b = 0;
  for (; b + n <= blocks; b += n) {
    TransposeBlocks(x + b * Nvfp4::block, x_columns);
    TransposeBlocks(deq + b * Nvfp4::block, deq_columns);
    ReportLanes<DeqFrom::values>(x_columns, {nullptr, deq_columns}, n, hn::Zero(du), hn::Zero(du), hn::Zero(DLI()),
                                 BlockAmax(x_columns, n), 0.0f, errors, references);
    AddLaneSums(errors, references, n, stats);
  }
  return b;
}

#endif // HWY_TARGET != HWY_SCALAR

// One block at a time (row tails shorter than a vector of blocks).
void QuantizeBlock(const float* block, float global_scale, const float* alphas, int candidates, uint8_t* packed,
                   uint8_t* scale_code, BlockStats& stats) {
  HWY_ALIGN uint8_t nibbles[Nvfp4::block], best_nibbles[Nvfp4::block];
  HWY_ALIGN float deq[Nvfp4::block], best_deq[Nvfp4::block];
  const float amax = block_amax(block);
  ++stats.blocks;
  if (amax == 0.0f) ++stats.zero_blocks;
  else if (amax / (E2M1::max * global_scale) < Nvfp4::min_scale) ++stats.scale_underflows;

  uint8_t best_code = 0;
  double best_error = 0.0;
  int best_k = -1;
  for (int k = candidates - 1; k >= 0; --k) {
    const uint8_t code = nvfp4_block_scale_code(amax, alphas[k], global_scale);
    if (best_k >= 0 && code == best_code) continue;
    quantize_block(block, code, global_scale, nibbles, deq);
    const double error = candidates == 1 ? 0.0 : block_error_of(deq, block);
    if (best_k < 0 || error < best_error) {
      best_k = k;
      best_code = code;
      best_error = error;
      std::memcpy(best_nibbles, nibbles, sizeof nibbles);
      std::memcpy(best_deq, deq, sizeof deq);
    }
  }
  ++stats.candidate_wins[best_k];
  *scale_code = best_code;
  pack_block(best_nibbles, packed);
  stats.add_sums(block_report_sums_nvfp4(block, best_deq));
}

void QuantizeRowNvfp4(const float* x, int cols, float global_scale, const ScaleSearch& search, uint8_t* packed,
                      uint8_t* scales, BlockStats& stats) {
  const auto alphas = search.alphas();
  const size_t blocks = size_t(cols) / Nvfp4::block;
  size_t b = 0;
#if HWY_TARGET != HWY_SCALAR
  const size_t n = hn::Lanes(DL());
  if (n >= 4) // halves of at least two lanes
    for (; b + n <= blocks; b += n) {
      PrefetchAhead(x + b * Nvfp4::block, n);
      QuantizeLaneBlocks(x + b * Nvfp4::block, global_scale, alphas.data(), search.candidates,
                         packed + b * Nvfp4::block / 2, scales + b, stats);
    }
#endif
  for (; b < blocks; ++b)
    QuantizeBlock(x + b * Nvfp4::block, global_scale, alphas.data(), search.candidates,
                  packed + b * Nvfp4::block / 2, scales + b, stats);
}

// GPTQ tile: blocks already lane-wise; lanes % 16 == 0 (so a multiple of N).
void ChooseBlockScalesLanes(const float* columns, size_t stride, int lanes, int counted, float global_scale,
                            const ScaleSearch& search, uint8_t* codes, BlockStats& stats) {
#if HWY_TARGET != HWY_SCALAR
  const auto alphas = search.alphas();
  const size_t n = hn::Lanes(DL());
  if (n >= 4) {
    for (size_t l = 0; l < size_t(lanes); l += n) {
      const size_t lanes_counted = size_t(counted) > l ? std::min(n, size_t(counted) - l) : 0;
      const LaneOutputs out{codes + l, nullptr, nullptr, nullptr};
      if (search.candidates == 1)
        ChooseLanes<false, false>(columns + l, stride, global_scale, alphas.data(), 1, lanes_counted, out, stats);
      else
        ChooseLanes<true, false>(columns + l, stride, global_scale, alphas.data(), search.candidates, lanes_counted,
                                 out, stats);
    }
    return;
  }
#endif
  float block[Nvfp4::block];
  uint8_t nibbles[Nvfp4::block];
  BlockStats uncounted;
  for (int l = 0; l < lanes; ++l) {
    for (int e = 0; e < Nvfp4::block; ++e) block[e] = columns[size_t(e) * stride + size_t(l)];
    codes[l] = choose_and_quantize_block_nvfp4(block, global_scale, search, nibbles, l < counted ? stats : uncounted);
  }
}

// GPTQ tile stats: per lane block, the error of its nibbles and its reference sum.
void BlockErrorsLanes(const float* columns, const uint8_t* nibbles, size_t stride, int lanes, const uint8_t* codes,
                      float global_scale, double* errors, double* references) {
#if HWY_TARGET != HWY_SCALAR
  const size_t n = hn::Lanes(DL());
  if (n >= 4) {
    for (size_t l = 0; l < size_t(lanes); l += n)
      LaneBlockErrors(columns + l, nibbles + l, stride, codes + l, global_scale, errors + l, references + l);
    return;
  }
#endif
  float block[Nvfp4::block];
  uint8_t block_nibbles[Nvfp4::block];
  for (int l = 0; l < lanes; ++l) {
    for (int e = 0; e < Nvfp4::block; ++e) {
      block[e] = columns[size_t(e) * stride + size_t(l)];
      block_nibbles[e] = nibbles[size_t(e) * stride + size_t(l)];
    }
    const BlockSums sums = block_report_sums_nvfp4(block, block_nibbles, codes[l], global_scale);
    errors[l] = sums.error_sq;
    references[l] = sums.reference_sq;
  }
}

void RowReportSums(const float* x, const float* deq, int cols, BlockStats& stats) {
  const size_t blocks = size_t(cols) / Nvfp4::block;
  size_t b = 0;
#if HWY_TARGET != HWY_SCALAR
  b = RowReportSumsLanes(x, deq, blocks, stats);
#endif
  for (; b < blocks; ++b) stats.add_sums(block_report_sums_nvfp4(x + b * Nvfp4::block, deq + b * Nvfp4::block));
}

// E4M3 codes times one E8M0 scale per 32: exact (one fp32 product, as the scalar loop).
void DequantizeRowFp8(const uint8_t* codes, const uint8_t* scales, int cols, float* out) {
  using D = hn::CappedTag<float, 32>; // 32 % N == 0: one scale per vector
  const D d;
  const size_t n = hn::Lanes(d);
  int g = 0;
  for (; (g + 1) * 32 <= cols; ++g) {
    const uint32_t scale_code = scales[g];
    // 2^(code - 127) as fp32 bits; code 0 is the subnormal 2^-127.
    const uint32_t scale_bits = scale_code == E8M0::nan_code ? 0x7FC00000u
                                : scale_code == 0           ? 0x00400000u
                                                            : scale_code << 23;
    const auto scale = hn::Set(d, std::bit_cast<float>(scale_bits));
    for (size_t i = 0; i < 32; i += n) {
      const size_t at = size_t(g) * 32 + i;
      hn::StoreU(hn::Mul(E4M3ToFloat(d, codes + at), scale), d, out + at);
    }
  }
  for (int i = g * 32; i < cols; ++i) out[i] = e4m3_to_float(codes[i]) * e8m0_to_float(scales[i / 32]);
}

// dequantize_row_nvfp4: each value e2m1 * scale * global_scale in that order (the
// scalar rule), even elements from low nibbles, odd from high, stored interleaved.
void DequantizeRowNvfp4(const uint8_t* packed, const uint8_t* scales, int cols, float global_scale, float* out) {
  using D = hn::CappedTag<float, Nvfp4::block / 2>; // N divides a block's 8 bytes
  const D d;
  const hn::RebindToSigned<D> di;
  const hn::Rebind<uint8_t, D> d8;
  const size_t n = hn::Lanes(d);
  const auto global = hn::Set(d, global_scale);
  const int blocks = cols / Nvfp4::block;
  for (int b = 0; b < blocks; ++b) {
    const auto scale = hn::Set(d, e4m3_to_float(scales[b]));
    for (size_t i = 0; i < Nvfp4::block / 2; i += n) {
      const size_t byte = size_t(b) * (Nvfp4::block / 2) + i;
      const auto codes = hn::PromoteTo(di, hn::LoadU(d8, packed + byte));
      const auto even = E2m1Value(d, hn::And(codes, hn::Set(di, 0xF)));
      const auto odd = E2m1Value(d, hn::ShiftRight<4>(codes));
      hn::StoreInterleaved2(hn::Mul(hn::Mul(even, scale), global), hn::Mul(hn::Mul(odd, scale), global), d,
                            out + 2 * byte);
    }
  }
}

} // namespace HWY_NAMESPACE
} // namespace shardq
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace shardq {

HWY_EXPORT(QuantizeRowNvfp4);
HWY_EXPORT(ChooseBlockScalesLanes);
HWY_EXPORT(DequantizeRowFp8);
HWY_EXPORT(BlockErrorsLanes);
HWY_EXPORT(RowReportSums);
HWY_EXPORT(DequantizeRowNvfp4);

void quantize_row_nvfp4_simd(const float* x, int cols, float global_scale, const ScaleSearch& search,
                             uint8_t* packed, uint8_t* scales, BlockStats& stats) {
  HWY_DYNAMIC_DISPATCH(QuantizeRowNvfp4)(x, cols, global_scale, search, packed, scales, stats);
}

void choose_block_scales_nvfp4_lanes(const float* columns, size_t stride, int lanes, int counted,
                                     float global_scale, const ScaleSearch& search, uint8_t* codes,
                                     BlockStats& stats) {
  HWY_DYNAMIC_DISPATCH(ChooseBlockScalesLanes)(columns, stride, lanes, counted, global_scale, search, codes, stats);
}

void block_errors_nvfp4_lanes(const float* columns, const uint8_t* nibbles, size_t stride, int lanes,
                              const uint8_t* codes, float global_scale, double* errors, double* references) {
  HWY_DYNAMIC_DISPATCH(BlockErrorsLanes)(columns, nibbles, stride, lanes, codes, global_scale, errors, references);
}

void add_row_report_sums_nvfp4_simd(const float* x, const float* deq, int cols, BlockStats& stats) {
  HWY_DYNAMIC_DISPATCH(RowReportSums)(x, deq, cols, stats);
}

void dequantize_row_fp8_e8m0_32_simd(const uint8_t* codes, const uint8_t* scales, int cols, float* out) {
  HWY_DYNAMIC_DISPATCH(DequantizeRowFp8)(codes, scales, cols, out);
}

void dequantize_row_nvfp4_simd(const uint8_t* packed, const uint8_t* scales, int cols, float global_scale, float* out) {
  HWY_DYNAMIC_DISPATCH(DequantizeRowNvfp4)(packed, scales, cols, global_scale, out);
}

} // namespace shardq
#endif
