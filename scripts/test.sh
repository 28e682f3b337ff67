#!/usr/bin/env bash
# Installs what is missing, builds the release preset, runs every test through ctest,
# then the aarch64 preset's tests under qemu, the asan preset's unit tests and a
# short fuzz run of the header parser.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh

jobs=$(nproc)
cmake --preset release >/dev/null
cmake --build --preset release -j "$jobs"
ctest --preset release -j "$jobs" --output-on-failure

# The aarch64 build (the DGX Spark's CPU) and its tests under qemu: NEON and SVE against the
# scalar reference, which no x86 run can check, and the three products made by the aarch64
# binary on 4 ranks against the native bytes. On an aarch64 machine the release build above
# was that build.
if [ "${SHARDQ_SKIP_AARCH64:-0}" != 1 ] && [ "$(uname -m)" != aarch64 ]; then
  cmake --preset aarch64 >/dev/null
  cmake --build --preset aarch64 -j "$jobs"
  ctest --preset aarch64 -j "$jobs" --output-on-failure
fi

if [ "${SHARDQ_SKIP_ASAN:-0}" != 1 ]; then
  cmake --preset asan >/dev/null
  cmake --build --preset asan -j "$jobs" --target shardq_unit_tests shardq
  ctest --preset asan -j "$jobs" --output-on-failure
fi

if [ "${SHARDQ_SKIP_FUZZ:-0}" != 1 ]; then
  cmake --preset fuzz >/dev/null
  cmake --build --preset fuzz -j "$jobs" --target fuzz_safetensors_header
  # A short run on every push; longer runs: docs/formats.md "Untrusted input". New inputs and crash
  # files go to a scratch folder (printed on failure); tests/fuzz/corpus only seeds.
  fuzz_dir=$(mktemp -d)
  build/fuzz/tests/fuzz/fuzz_safetensors_header -max_total_time="${SHARDQ_FUZZ_SECONDS:-60}" \
    -rss_limit_mb=2048 -artifact_prefix="$fuzz_dir/" "$fuzz_dir" tests/fuzz/corpus \
    || { echo "fuzz finding kept in $fuzz_dir" >&2; exit 1; }
  rm -rf "$fuzz_dir"
fi
echo "scripts/test.sh: all tests passed"
