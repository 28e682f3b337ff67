// NVFP4 row kernels on Highway SIMD, dispatched at run time (foreach_target): one binary
// runs AVX2 / AVX-512 on x86-64 and NEON / SVE on aarch64. Bit-identical to the _ref:
// the same fp32 division by the rounded scale, the same compare thresholds, the same
// fp64 terms folded in halves (sum_block_fp64's order), built with -ffp-contract=off.
#include <cstring>

#include "kernels/nvfp4.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/nvfp4_simd.cpp"
#include "hwy/foreach_target.h" // IWYU pragma: keep
#include "hwy/highway.h"

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

// sum (double(a) - double(b))^2, or sum double(a)^2 when b is null.
double block_sum_sq(const float* a, const float* b) {
  const DD dd;
  const DFD dfd;
  HWY_ALIGN double terms[Nvfp4::block];
  for (size_t i = 0; i < Nvfp4::block; i += hn::Lanes(dd)) {
    auto diff = hn::PromoteTo(dd, hn::LoadU(dfd, a + i));
    if (b != nullptr) diff = hn::Sub(diff, hn::PromoteTo(dd, hn::LoadU(dfd, b + i)));
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

void QuantizeRowNvfp4(const float* x, int cols, float global_scale, const ScaleSearch& search, uint8_t* packed,
                      uint8_t* scales, BlockStats& stats) {
  const auto alphas = search.alphas();
  HWY_ALIGN uint8_t nibbles[Nvfp4::block], best_nibbles[Nvfp4::block];
  HWY_ALIGN float deq[Nvfp4::block];
  for (int b = 0; b < cols / Nvfp4::block; ++b) {
    const float* block = x + b * Nvfp4::block;
    const float amax = block_amax(block);
    ++stats.blocks;
    if (amax == 0.0f) ++stats.zero_blocks;
    else if (amax / (E2M1::max * global_scale) < Nvfp4::min_scale) ++stats.scale_underflows;

    uint8_t best_code = 0;
    double best_error = 0.0;
    int best_k = -1;
    for (int k = search.candidates - 1; k >= 0; --k) {
      const uint8_t code = nvfp4_block_scale_code(amax, alphas[k], global_scale);
      if (best_k >= 0 && code == best_code) continue;
      quantize_block(block, code, global_scale, nibbles, deq);
      const double error = block_sum_sq(deq, block);
      if (best_k < 0 || error < best_error) {
        best_k = k;
        best_code = code;
        best_error = error;
        std::memcpy(best_nibbles, nibbles, sizeof nibbles);
      }
    }
    ++stats.candidate_wins[best_k];
    scales[b] = best_code;
    pack_block(best_nibbles, packed + b * Nvfp4::block / 2);
    stats.error_sq += best_error;
    stats.reference_sq += block_sum_sq(block, nullptr);
  }
}

} // namespace HWY_NAMESPACE
} // namespace shardq
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace shardq {

HWY_EXPORT(QuantizeRowNvfp4);

void quantize_row_nvfp4_simd(const float* x, int cols, float global_scale, const ScaleSearch& search,
                             uint8_t* packed, uint8_t* scales, BlockStats& stats) {
  HWY_DYNAMIC_DISPATCH(QuantizeRowNvfp4)(x, cols, global_scale, search, packed, scales, stats);
}

} // namespace shardq
#endif
