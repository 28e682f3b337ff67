// kernels/scan.h on Highway SIMD, dispatched at run time (foreach_target), and its scalar
// reference. A code is an E4M3 NaN when its low 7 bits are all set: adding 1 to
// (code & 0x7F) carries into bit 7 for exactly those codes, so the scan ORs those sums
// together and tests bit 7 once per 16 vectors (an early exit that costs nothing).
#include <algorithm>

#include "kernels/formats.h"
#include "kernels/scan.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/scan_simd.cpp"
#include "hwy/foreach_target.h" // IWYU pragma: keep
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace shardq {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

bool AnyE4m3NaN(const uint8_t* codes, size_t n) {
  const hn::ScalableTag<uint8_t> d;
  const size_t lanes = hn::Lanes(d), stride = 16 * lanes;
  const auto magnitude = hn::Set(d, uint8_t{0x7F}), one = hn::Set(d, uint8_t{1}), sign = hn::Set(d, uint8_t{0x80});
  size_t i = 0;
  for (; i + stride <= n; i += stride) {
    auto carried = hn::Zero(d);
    for (size_t v = 0; v < stride; v += lanes)
      carried = hn::Or(carried, hn::Add(hn::And(hn::LoadU(d, codes + i + v), magnitude), one));
    if (!hn::AllFalse(d, hn::TestBit(carried, sign))) return true;
  }
  for (; i < n; ++i)
    if (E4M3::is_nan(codes[i])) return true;
  return false;
}

} // namespace HWY_NAMESPACE
} // namespace shardq
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace shardq {

HWY_EXPORT(AnyE4m3NaN);

bool any_e4m3_nan_ref(const uint8_t* codes, size_t n) {
  return std::any_of(codes, codes + n, [](uint8_t code) { return E4M3::is_nan(code); });
}

bool any_e4m3_nan_simd(const uint8_t* codes, size_t n) { return HWY_DYNAMIC_DISPATCH(AnyE4m3NaN)(codes, n); }

} // namespace shardq
#endif
