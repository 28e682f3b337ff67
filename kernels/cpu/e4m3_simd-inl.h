// E4M3 codes to fp32 on Highway SIMD: the one vector form of e4m3_to_float
// (kernels/formats.h), shared by the SIMD kernels that decode FP8 sources. Per-target code:
// included after hwy/foreach_target.h, like hwy's own -inl headers.
#if defined(SHARDQ_KERNELS_CPU_E4M3_SIMD_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef SHARDQ_KERNELS_CPU_E4M3_SIMD_INL_H_
#undef SHARDQ_KERNELS_CPU_E4M3_SIMD_INL_H_
#else
#define SHARDQ_KERNELS_CPU_E4M3_SIMD_INL_H_
#endif

#include <cstdint>

#include "hwy/highway.h"
#include "kernels/formats.h"

HWY_BEFORE_NAMESPACE();
namespace shardq {
namespace HWY_NAMESPACE {

// Lanes(d) codes as fp32: the value built from its fields (exact: every E4M3 value is an
// fp32 one), the subnormals (magnitude < 8) as magnitude * 2^-9, NaN for magnitude 0x7F.
template <class D>
HWY_INLINE hwy::HWY_NAMESPACE::Vec<D> E4M3ToFloat(D d, const uint8_t* codes) {
  namespace hn = hwy::HWY_NAMESPACE;
  const hn::RebindToUnsigned<D> du;
  const hn::Rebind<uint8_t, D> d8;
  const auto code = hn::PromoteTo(du, hn::LoadU(d8, codes));
  const auto magnitude = hn::And(code, hn::Set(du, 0x7Fu));
  const auto normal = hn::Add(hn::ShiftLeft<20>(magnitude), hn::Set(du, (127u - E4M3::bias) << 23));
  const auto subnormal = hn::BitCast(
      du, hn::Mul(hn::ConvertTo(d, hn::BitCast(hn::RebindToSigned<D>(), magnitude)), hn::Set(d, E4M3::min_subnormal)));
  auto bits = hn::IfThenElse(hn::Lt(magnitude, hn::Set(du, 8u)), subnormal, normal);
  bits = hn::Or(bits, hn::ShiftLeft<24>(hn::And(code, hn::Set(du, 0x80u))));
  bits = hn::IfThenElse(hn::Eq(magnitude, hn::Set(du, 0x7Fu)), hn::Set(du, 0x7FC00000u), bits);
  return hn::BitCast(d, bits);
}

} // namespace HWY_NAMESPACE
} // namespace shardq
HWY_AFTER_NAMESPACE();

#endif
