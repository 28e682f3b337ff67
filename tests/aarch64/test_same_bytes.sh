#!/usr/bin/env bash
# The three products made on aarch64 (the DGX Spark's CPU) are the bytes made on x86-64:
# the shardq binary of the aarch64 build runs as 4 MPI ranks under qemu-user, started by this
# machine's mpirun, and its output is compared file by file with the native binary's output
# of the same job on 1 rank. Then the aarch64 binary verifies what it wrote, and one run is
# killed and resumed.
# Compared: sha256 of every output file except the reports (timings, hosts) and the run's
# .shardq/ folder. The Engram product runs gptq-mse on a smaller fixture (--engram-vocab
# 600): under qemu a GPTQ chunk costs ~30x what it costs natively.
# Env: SHARDQ_BIN (the aarch64 binary as a command: a script that runs it under qemu),
# SHARDQ_NATIVE_BIN (the x86-64 one: the release preset's, which scripts/test.sh builds
# first), SHARDQ_SOURCE_DIR, QEMU_CPU.
set -euo pipefail

[ -n "${SHARDQ_BIN:-}" ] || { echo "SHARDQ_BIN is not set"; exit 77; }
[ -x "${SHARDQ_NATIVE_BIN:-}" ] || {
  echo "FAIL: no native shardq at '${SHARDQ_NATIVE_BIN:-}': build the release preset first"
  exit 1
}
source_dir="${SHARDQ_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}"
# shellcheck source=../../scripts/mpi_env.sh
source "$source_dir/scripts/mpi_env.sh"
# Cross-memory attach reads another process's memory at the address the sender names; under
# qemu that is a guest address, which the host kernel cannot resolve: copy through the FIFO.
export OMPI_MCA_btl_vader_single_copy_mechanism=none
work=$(mktemp -d)
killed_pid=""
trap '[ -z "$killed_pid" ] || pkill -9 -s "$killed_pid"; rm -rf "$work"' EXIT

# sha256 of every output file but the report, by relative path.
file_hashes() { # dir report
  (cd "$1" && find . \( -path ./.shardq -prune \) -o \( -type f -not -name "$2" -print \) |
    LC_ALL=C sort | xargs sha256sum)
}

"$SHARDQ_NATIVE_BIN" fixture --preset dsv41-mini --out "$work/src" >/dev/null
"$SHARDQ_NATIVE_BIN" fixture --preset dsv41-mini --engram-vocab 600 --out "$work/src-small" >/dev/null
"$SHARDQ_NATIVE_BIN" fixture --preset dsv41-mini-ref-nvfp4 --out "$work/ref-nvfp4" >/dev/null

check_product() { # name (the recipe, its report's name) job src [--set ...]
  local name=$1 job=$2 src=$3
  shift 3
  local native="$work/$name-x86_64" spark="$work/$name-aarch64" start=$SECONDS
  "$SHARDQ_NATIVE_BIN" run "$source_dir/jobs/$job" --src "$src" --dst "$native" "$@" >"$native.log" 2>&1 ||
    { echo "FAIL: $name: native run exited $?"; tail -20 "$native.log"; exit 1; }
  mpirun -np 4 "$SHARDQ_BIN" run "$source_dir/jobs/$job" --src "$src" --dst "$spark" "$@" >"$spark.log" 2>&1 ||
    { echo "FAIL: $name: aarch64 run exited $?"; tail -20 "$spark.log"; exit 1; }
  file_hashes "$native" "$name.json" >"$native.sha256"
  file_hashes "$spark" "$name.json" >"$spark.sha256"
  [ "$(wc -l <"$native.sha256")" -gt 2 ] || { echo "FAIL: $name: the native run wrote no shards"; exit 1; }
  if ! diff "$native.sha256" "$spark.sha256"; then
    echo "FAIL: $name: aarch64 and x86-64 outputs differ (above)"
    exit 1
  fi
  "$SHARDQ_BIN" verify --src "$src" --dst "$spark" >"$spark.verify" 2>&1 ||
    { echo "FAIL: $name: verify on aarch64 exited $?"; cat "$spark.verify"; exit 1; }
  echo "$name: $(wc -l <"$spark.sha256") files, same bytes on aarch64 (4 ranks) and x86-64 (1 rank), verified ($((SECONDS - start)) s)"
}

# The Engram run again on aarch64, killed (SIGKILL, mpirun and every rank) once its checkpoint
# records some chunks done, then resumed: the native bytes again, from an aarch64 checkpoint
# that the native binary reads too.
check_kill_resume() {
  local dst="$work/engram-nvfp4-aarch64-killed" log="$work/killed.log" checkpoint done_chunks=0
  local args=(run "$source_dir/jobs/demo-engram-nvfp4.toml" --src "$work/src-small" --dst "$dst"
    --set run.rows_per_chunk=512)
  checkpoint="$dst/.shardq/checkpoint.h5"
  SHARDQ_TEST_CHUNK_DELAY_MS=200 setsid mpirun -np 4 "$SHARDQ_BIN" "${args[@]}" >"$log" 2>&1 &
  local pid=$!
  killed_pid=$pid
  while ((done_chunks < 12)) && kill -0 "$pid" 2>/dev/null; do
    sleep 1
    done_chunks=$({ "$SHARDQ_NATIVE_BIN" status "$checkpoint" 2>/dev/null || true; } |
      awk '$1 == "total" {split($2, n, "/"); print n[1]}')
    done_chunks=${done_chunks:-0}
  done
  # mpirun puts each rank in its own process group, all in the session setsid began.
  pkill -9 -s "$pid" || { echo "FAIL: the run ended before it was killed"; tail -20 "$log"; exit 1; }
  { wait "$pid"; } 2>/dev/null || true
  while pgrep -s "$pid" >/dev/null; do sleep 0.1; done
  killed_pid=""
  echo "killed with $done_chunks chunks recorded done"
  mpirun -np 4 "$SHARDQ_BIN" "${args[@]}" >"$log.resume" 2>&1 ||
    { echo "FAIL: the resume exited $?"; tail -20 "$log.resume"; exit 1; }
  grep -q "resuming from" "$log.resume" || { echo "FAIL: the second run did not resume"; exit 1; }
  file_hashes "$dst" engram-nvfp4.json | diff "$work/engram-nvfp4-x86_64.sha256" - ||
    { echo "FAIL: killed and resumed on aarch64, the output differs from the native one (above)"; exit 1; }
  echo "engram-nvfp4: killed and resumed on aarch64, same bytes"
}

check_product engram-nvfp4 demo-engram-nvfp4.toml "$work/src-small"
check_kill_resume
check_product nvfp4-1017 demo-1017-nvfp4.toml "$work/src" --set "quant.input_scales_from=\"$work/ref-nvfp4\""
check_product w8a8-int8 demo-w8a8-int8.toml "$work/src"
echo "PASS: aarch64 makes the x86-64 bytes for every product"
