// The SIMD kernel tests hold every target the build generated to the scalar reference, not
// only the one this CPU would dispatch to.
#pragma once

#include <cstdint>
#include <string>

#include "hwy/targets.h"

namespace shardq::test {

// Runs `check(" on TARGET")` once per SIMD target the CPU supports and the build generated,
// then restores the normal dispatch.
template <class Check> void for_each_simd_target(Check check) {
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    check(std::string(" on ") + hwy::TargetName(target));
  }
  hwy::SetSupportedTargetsForTest(0);
}

} // namespace shardq::test
