#!/usr/bin/env bash
# Benchmarks, one function per benchmark; `scripts/bench.sh` runs them all,
# `scripts/bench.sh <name>` runs one (e.g. `scripts/bench.sh kernels`).
# BUILD_DIR (default build/release) must hold a built shardq_bench.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir="${BUILD_DIR:-build/release}"

# NVFP4 row kernels on one core vs memcpy of the same fp32 input bytes (1 KiB per row of
# 256 values); prints each kernel's GB/s and its ratio to memcpy.
bench_kernels() {
  local json
  json=$(mktemp)
  taskset -c 0 "$build_dir/tests/shardq_bench" --benchmark_filter='memcpy|nvfp4' \
    --benchmark_min_time="${BENCH_MIN_TIME:-0.5}" --benchmark_out="$json" --benchmark_out_format=json >/dev/null 2>&1
  python3 - "$json" <<'PY'
import json, sys
runs = {b["name"]: b["GB/s"] for b in json.load(open(sys.argv[1]))["benchmarks"]}
base = runs["BM_memcpy_fp32_rows"]
print(f"{'benchmark':28s} {'GB/s (fp32 in)':>15s} {'x memcpy':>9s}")
for name, gbs in runs.items():
    print(f"{name:28s} {gbs:15.3f} {gbs / base:9.3f}")
PY
  rm -f "$json"
}

# GPTQ on one core: rows/s for rtn, mse, gptq, gptq-mse, and GPTQ's FLOP rate (2 * 32,640
# flops per row) next to single-thread SGEMM 256^3 measured in the same run, same BLAS.
bench_gptq() {
  local json
  json=$(mktemp)
  OPENBLAS_NUM_THREADS=1 taskset -c 0 "$build_dir/tests/shardq_bench" \
    --benchmark_filter='sgemm_single|BM_gptq|row_quantizer' --benchmark_min_time="${BENCH_MIN_TIME:-0.5}" \
    --benchmark_out="$json" --benchmark_out_format=json >/dev/null 2>&1
  python3 - "$json" <<'PY'
import json, sys
runs = json.load(open(sys.argv[1]))["benchmarks"]
names = {"BM_row_quantizer/cand:1": "rtn", "BM_row_quantizer/cand:8": "mse"}
print(f"{'benchmark':34s} {'method':9s} {'rows/s':>10s} {'GFLOP/s':>8s} {'sgemm':>7s} {'x sgemm':>8s}")
for b in runs:
    name = b["name"]
    if name.startswith("BM_sgemm"):
        print(f"{name:34s} {'sgemm':9s} {'':>10s} {b['GFLOP/s']:8.2f}")
        continue
    method = names.get(name) or ("gptq-mse" if "cand:8" in name else "gptq")
    line = f"{name:34s} {method:9s} {b['rows/s']:10.0f}"
    if "sgemm_GFLOP/s" in b:
        line += f" {b['GFLOP/s']:8.2f} {b['sgemm_GFLOP/s']:7.2f} {b['GFLOP/s'] / b['sgemm_GFLOP/s']:8.3f}"
    print(line)
PY
  rm -f "$json"
}

main() {
  local benches=(bench_kernels bench_gptq)
  if [ $# -ge 1 ]; then
    "bench_$1"
  else
    for bench in "${benches[@]}"; do "$bench"; done
  fi
}

main "$@"
