#!/usr/bin/env bash
# The three products made on aarch64 (the DGX Spark's CPU) are the bytes made on x86-64:
# the shardq binary of the aarch64 build runs as 4 MPI ranks under qemu-user, started by this
# machine's mpirun, and its output is compared with the native binary's output of the same
# job on 1 rank (tests/resume/lib.sh same_output: every file, the report without its timing
# fields). Then the aarch64 binary verifies what it wrote, and one run is killed and resumed.
# The Engram product runs gptq-mse on the smaller fixture (vocab 600): under qemu a GPTQ
# chunk costs ~30x what it costs natively.
# Env: SHARDQ_BIN (the aarch64 binary as a command: a script that runs it under qemu),
# SHARDQ_NATIVE_BIN (the x86-64 one: the release preset's, which scripts/test.sh builds
# first), SHARDQ_SOURCE_DIR, QEMU_CPU.
set -euo pipefail

[ -n "${SHARDQ_BIN:-}" ] || { echo "SHARDQ_BIN is not set"; exit 77; }
[ -x "${SHARDQ_NATIVE_BIN:-}" ] || {
  echo "FAIL: no native shardq at '${SHARDQ_NATIVE_BIN:-}': build the release preset first"
  exit 1
}
: "${SHARDQ_SOURCE_DIR:=$(cd "$(dirname "$0")/../.." && pwd)}"
# shellcheck source=../resume/lib.sh
source "$SHARDQ_SOURCE_DIR/tests/resume/lib.sh"
# Cross-memory attach reads another process's memory at the address the sender names; under
# qemu that is a guest address, which the host kernel cannot resolve: copy through the FIFO.
export OMPI_MCA_btl_vader_single_copy_mechanism=none

"$SHARDQ_NATIVE_BIN" fixture --preset dsv41-mini --out "$WORK/src" >/dev/null
"$SHARDQ_NATIVE_BIN" fixture --preset dsv41-mini --engram-vocab 600 --out "$WORK/src-small" >/dev/null
"$SHARDQ_NATIVE_BIN" fixture --preset dsv41-mini-ref-nvfp4 --out "$WORK/ref-nvfp4" >/dev/null

check_product() { # name job src [--set ...]
  local name=$1 job=$2 src=$3
  shift 3
  local native="$WORK/$name-x86_64" spark="$WORK/$name-aarch64" start=$SECONDS
  "$SHARDQ_NATIVE_BIN" run "$SHARDQ_SOURCE_DIR/jobs/$job" --src "$src" --dst "$native" "$@" >"$native.log" 2>&1 ||
    fail "$name: the native run exited $?: $(tail -20 "$native.log")"
  run_shardq 4 "$spark.log" "$SHARDQ_SOURCE_DIR/jobs/$job" --src "$src" --dst "$spark" "$@" ||
    fail "$name: the aarch64 run exited $?: $(tail -20 "$spark.log")"
  same_output "$native" "$spark"
  "$SHARDQ_BIN" verify --src "$src" --dst "$spark" >"$spark.verify" 2>&1 ||
    fail "$name: verify on aarch64 exited $?: $(cat "$spark.verify")"
  echo "$name: $(find "$spark" -maxdepth 1 -type f | wc -l) files, same bytes on aarch64 (4 ranks) and x86-64 (1 rank), verified ($((SECONDS - start)) s)"
}

# The Engram run again on aarch64, killed (kill -9, mpirun and every rank) once its checkpoint
# records 12 chunks done, then resumed: the native bytes again, from an aarch64 checkpoint
# that this machine's h5dump reads too.
check_kill_resume() {
  local dst="$WORK/engram-nvfp4-aarch64-killed" log="$WORK/killed.log"
  local args=("$SHARDQ_SOURCE_DIR/jobs/demo-engram-nvfp4.toml" --src "$WORK/src-small" --dst "$dst"
    --set run.rows_per_chunk=512)
  # shellcheck disable=SC2046,SC2091 # the command line is a list of words on purpose
  SHARDQ_TEST_CHUNK_DELAY_MS=200 $(shardq_cmd 4 "${args[@]}") >"$log" 2>&1 &
  local pid=$!
  STARTED_PIDS+=("$pid")
  wait_for_done_chunks "$dst/.shardq/checkpoint.h5" "$pid" 12 300
  kill_tree "$pid"
  { wait "$pid"; } 2>/dev/null || true
  echo "killed with $(done_chunks "$dst/.shardq/checkpoint.h5" | wc -l) chunks recorded done"
  run_shardq 4 "$log.resume" "${args[@]}" || fail "the resume exited $?: $(tail -20 "$log.resume")"
  grep -q "resuming from" "$log.resume" || fail "the second run did not resume"
  same_output "$WORK/engram-nvfp4-x86_64" "$dst"
  echo "engram-nvfp4: killed and resumed on aarch64, same bytes"
}

check_product engram-nvfp4 demo-engram-nvfp4.toml "$WORK/src-small"
check_kill_resume
check_product nvfp4-1017 demo-1017-nvfp4.toml "$WORK/src" --set "quant.input_scales_from=\"$WORK/ref-nvfp4\""
check_product w8a8-int8 demo-w8a8-int8.toml "$WORK/src"
echo "PASS: aarch64 makes the x86-64 bytes for every product"
