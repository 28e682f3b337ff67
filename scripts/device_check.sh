#!/usr/bin/env bash
# CUDA checks on a lent GPU machine that has a driver but none of our libraries and no way
# to fetch any. Two steps:
#   scripts/device_check.sh pack   (here) build the CUDA parity tests (shardq_cuda_tests) and
#                                  the kernel benchmarks (shardq_device_bench) in BUILD_DIR
#                                  (default build/device), copy them and every shared library
#                                  they need, except the C library and the driver's, into
#                                  .devicepkg/ (ignored, carried).
#   scripts/device_check.sh run    (on the GPU machine, from the repo root) nvidia-smi, the
#                                  CUDA parity tests (must run, not skip), the GPU benchmarks
#                                  (NVFP4, INT8) and the CPU kernels of the same products
#                                  beside them; logs into $OUT.
set -euo pipefail
cd "$(dirname "$0")/.."

pkg=.devicepkg
build_dir="${BUILD_DIR:-build/device}"
binaries=(shardq_cuda_tests shardq_device_bench)
max_pkg_bytes=$((48 * 1024 * 1024)) # the carried tree may total 64 MiB; leave room for the repo

# The C library and its loader come from the machine itself; libcuda and the other driver
# libraries must match its kernel driver, so they are never carried.
system_lib='^(linux-vdso|ld-linux|libc\.so|libm\.so|libpthread\.so|libdl\.so|librt\.so|libresolv\.so|libcuda\.so|libnvidia)'

needed_libs() {
  ldd "$@" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | sort -u | grep -Ev "$system_lib" | awk '{print $2}'
}

ignore_pkg() {
  local exclude
  exclude="$(git rev-parse --git-path info/exclude)"
  mkdir -p "$(dirname "$exclude")"
  grep -qxF "/$pkg/" "$exclude" 2>/dev/null || echo "/$pkg/" >>"$exclude"
}

pack() {
  cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSHARDQ_CUDA=ON >/dev/null
  cmake --build "$build_dir" -j2 --target "${binaries[@]}"
  ignore_pkg
  rm -rf "$pkg"
  mkdir -p "$pkg/bin" "$pkg/lib"
  local paths=()
  for binary in "${binaries[@]}"; do paths+=("$build_dir/tests/$binary"); done
  cp "${paths[@]}" "$pkg/bin/"
  needed_libs "${paths[@]}" | while read -r lib; do cp -L "$lib" "$pkg/lib/"; done
  if ldd "${paths[@]}" | grep -q 'not found'; then
    echo "device_check: unresolved libraries here:" >&2
    ldd "${paths[@]}" | grep 'not found' >&2
    exit 1
  fi
  local bytes
  bytes=$(du -sb "$pkg" | cut -f1)
  ls -l "$pkg/bin" "$pkg/lib"
  echo "device_check: $pkg holds $((bytes / 1024 / 1024)) MiB"
  if ((bytes > max_pkg_bytes)); then
    echo "device_check: $pkg is over $((max_pkg_bytes / 1024 / 1024)) MiB" >&2
    exit 1
  fi
}

# gtest prints "[  SKIPPED ]" for each skipped test; here every CUDA test must really run.
cuda_tests() {
  local log="$1" rc=0
  "$pkg/bin/shardq_cuda_tests" --gtest_filter='*Cuda*:*cuda*' --gtest_color=no 2>&1 | tee "$log" || rc=$?
  if ((rc != 0)); then
    echo "device_check: CUDA parity tests failed (exit $rc)" >&2
    return 1
  fi
  if grep -q '^\[  SKIPPED \]' "$log"; then
    echo "device_check: CUDA parity tests skipped on the device" >&2
    return 1
  fi
  if ! grep -q '^\[  PASSED  \] [1-9]' "$log"; then
    echo "device_check: no CUDA parity test ran" >&2
    return 1
  fi
}

run() {
  local out="${OUT:-out/device-check}" status=0
  mkdir -p "$out"
  nvidia-smi -L 2>&1 | tee "$out/nvidia-smi.txt" || status=1
  export LD_LIBRARY_PATH="$pkg/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  if ldd "$pkg"/bin/* | grep 'not found'; then
    echo "device_check: libraries missing on this machine (above)" >&2
    status=1
  fi
  cuda_tests "$out/cuda_tests.log" || status=1
  # GPU rows (NVFP4 1M x 256, INT8 128K x 2048; pageable and pinned input) and the CPU
  # kernels (ref and SIMD, one core) of the same products, in one run so the figures sit
  # side by side.
  "$pkg/bin/shardq_device_bench" --benchmark_filter='nvfp4|int8' --benchmark_min_time="${BENCH_MIN_TIME:-0.3}" \
    --benchmark_out="$out/bench.json" --benchmark_out_format=json 2>&1 | tee "$out/bench.log" || status=1
  if grep -q 'ERROR OCCURRED' "$out/bench.log"; then
    echo "device_check: a benchmark reported an error (above)" >&2
    status=1
  fi
  return "$status"
}

case "${1:-}" in
  pack) pack ;;
  run) run ;;
  *)
    echo "usage: $0 pack|run" >&2
    exit 2
    ;;
esac
