#!/usr/bin/env bash
# slurm/sparks.sh on this machine (a hostfile of localhost, 2 ranks, loopback): Ctrl-C
# checkpoints and exits 75 with the resume command; --until-done reruns after a rank
# was stopped from outside; the result is byte-identical to a direct mpirun run.
#
# Env: SHARDQ_BIN, SHARDQ_SOURCE_DIR (from ctest).
set -euo pipefail

: "${SHARDQ_BIN:?set SHARDQ_BIN to the shardq binary}"
: "${SHARDQ_SOURCE_DIR:?set SHARDQ_SOURCE_DIR to the source tree}"
SHARDQ_BIN=$(realpath "$SHARDQ_BIN")
source "$SHARDQ_SOURCE_DIR/scripts/mpi_env.sh"
# shellcheck source=common.sh
source "$SHARDQ_SOURCE_DIR/tests/slurm/common.sh"

readonly sparks=$SHARDQ_SOURCE_DIR/slurm/sparks.sh
readonly job_file=$SHARDQ_SOURCE_DIR/jobs/demo-engram-nvfp4.toml
readonly report_name=engram-nvfp4.json # differs between runs (times); not compared
# Slow enough (~10 s on 2 idle cores) to be interrupted at the first saved progress.
readonly overrides=(--set quant.method=mse --set quant.mse_candidates=16 --set run.rows_per_chunk=256)
# Each chunk takes 20 ms longer, so the interrupt lands mid-run however fast the machine is.
export SHARDQ_TEST_CHUNK_DELAY_MS=20

tmp=$(mktemp -d /tmp/shardq-sparks-test.XXXXXX)
sparks_pid=""
cleanup() {
  set +e # every step runs, even after one fails
  if [ -n "$sparks_pid" ]; then # mpirun runs in its own session: end it first
    kill -TERM "$(pgrep -P "$sparks_pid" -x mpirun)" 2>/dev/null
    kill -KILL "$sparks_pid" 2>/dev/null
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT

fail() {
  echo "FAIL: $*"
  for log in "$tmp"/sparks*.log; do
    [ -f "$log" ] && { echo "--- $log (tail)"; tail -n 30 "$log"; }
  done
  exit 1
}

chunks_field() { # $1 checkpoint, $2: 1 = done, 2 = total
  "$SHARDQ_BIN" status "$1" 2>/dev/null | awk -v f="$2" '$1 == "total" { split($2, n, "/"); print n[f] }'
}

# Starts sparks.sh in the background on the local "cluster", log in $tmp/$1.
start_sparks() {
  local log=$1; shift
  echo "localhost slots=2" >"$tmp/hostfile"
  # A background job of a script starts with SIGINT ignored, and bash cannot trap a
  # signal ignored at entry; restore the default so SIGINT acts as Ctrl-C would.
  SHARDQ_BIN=$SHARDQ_BIN NP=2 MAP_BY=slot SPARK_IFNAME=lo \
    python3 -c 'import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execvp("bash", ["bash"] + sys.argv[1:])' \
    "$sparks" --hostfile "$tmp/hostfile" "$@" "$job_file" --src "$tmp/src" --dst "$tmp/out" \
    "${overrides[@]}" >"$tmp/$log" 2>&1 &
  sparks_pid=$!
}

finish_sparks() {
  local code=0
  wait "$sparks_pid" || code=$?
  sparks_pid=""
  return "$code"
}

progress_saved() { (($(chunks_field "$tmp/out/.shardq/checkpoint.h5" 1 || echo 0) >= 1)); }
mpirun_child() { pgrep -P "$sparks_pid" -x mpirun; }

"$SHARDQ_BIN" fixture --preset dsv41-mini --out "$tmp/src" >/dev/null
mpirun -np 2 "$SHARDQ_BIN" run "$job_file" --src "$tmp/src" --dst "$tmp/ref" "${overrides[@]}" \
  >"$tmp/ref.log" 2>&1 || { cat "$tmp/ref.log"; fail "the direct mpirun run failed"; }

echo "== Ctrl-C (SIGINT to sparks.sh) at the first saved progress"
start_sparks sparks1.log
wait_until 120 "saved progress" progress_saved
kill -INT "$sparks_pid"
code=0
finish_sparks || code=$?
((code == 75)) || fail "sparks.sh exited $code after Ctrl-C, expected 75"
grep -q 'resume with the same command: .*sparks.sh' "$tmp/sparks1.log" || fail "no resume command printed"
done1=$(chunks_field "$tmp/out/.shardq/checkpoint.h5" 1)
total=$(chunks_field "$tmp/out/.shardq/checkpoint.h5" 2)
((done1 > 0 && done1 < total)) || fail "expected a partial checkpoint after Ctrl-C, got $done1/$total"
echo "stopped at $done1/$total chunks, exit 75"

echo "== --until-done, one rank set stopped from outside (USR1 to mpirun)"
start_sparks sparks2.log --until-done --max-tries 3
progressed() { (($(chunks_field "$tmp/out/.shardq/checkpoint.h5" 1 || echo 0) > done1)); }
wait_until 120 "progress past $done1 chunks" progressed
mpirun_pid=$(mpirun_child) || fail "no mpirun under sparks.sh"
kill -USR1 "$mpirun_pid"
finish_sparks || fail "sparks.sh --until-done exited $? (log above)"
grep -q 'resuming, try 2 of 3' "$tmp/sparks2.log" || fail "--until-done did not rerun after exit 75"
(($(grep -c 'resuming from' "$tmp/sparks2.log") == 2)) || fail "both runs should have resumed from the checkpoint"

output_digest "$tmp/ref" >"$tmp/ref.sha256"
output_digest "$tmp/out" >"$tmp/out.sha256"
[ -s "$tmp/ref.sha256" ] || fail "no reference output"
diff "$tmp/ref.sha256" "$tmp/out.sha256" || fail "the resumed output differs from the direct run's"
echo "PASS: $(wc -l <"$tmp/out.sha256") files byte-identical after Ctrl-C and an --until-done rerun"
