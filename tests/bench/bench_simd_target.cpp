// SHARDQ_BENCH_SIMD=<target> (a Highway target name this build generated and this CPU
// runs, e.g. SSE4): every SIMD kernel in the benchmarks dispatches to that target instead
// of the best one. SSE4's 128-bit vectors stand in for Arm NEON's (the DGX Spark's) where
// no Arm machine is at hand: same width, same byte-table lookups.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "hwy/targets.h"

namespace {

bool choose_simd_target() {
  const char* wanted = std::getenv("SHARDQ_BENCH_SIMD");
  if (wanted == nullptr || *wanted == '\0') return false;
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    if (std::string(hwy::TargetName(target)) == wanted) {
      hwy::SetSupportedTargetsForTest(target);
      return true;
    }
  }
  std::fprintf(stderr, "SHARDQ_BENCH_SIMD=%s: not a target this build generated and this CPU runs\n", wanted);
  std::exit(2);
}

const bool kSimdTargetChosen = choose_simd_target();

} // namespace
