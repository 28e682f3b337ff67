#!/usr/bin/env bash
# Stop signals on 4 ranks (docs/checkpoint.md "Signals and exit 75"; docs/cluster.md "Signals
# and launchers"). SIGTERM, SIGINT and SIGUSR1, each:
#   - delivered to every rank (what srun does): all ranks stop taking work, rank 0
#     flushes the checkpoint, every rank exits 75 and mpirun passes 75 on, within 10 s;
#   - SIGUSR1 to mpirun: Open MPI forwards it to the ranks; same result, mpirun exits 75;
#   - SIGTERM/SIGINT to mpirun: Open MPI sends SIGTERM to the ranks and SIGKILL 1 s later
#     and exits 1 whatever the ranks return (it refuses to forward TERM/INT as such);
#     whether the ranks flush in time varies, so only a readable checkpoint and the
#     resume are required; slurm/sparks.sh (TERM/INT -> USR1 to mpirun) gets 75 to its
#     caller with every rank flushed;
#   - a second signal 0.05 s after the first (GNU `timeout`, a launcher passing on what the
#     ranks also got) is the same stop: the ranks flush and exit 75 as for one. (A second
#     signal a second or more later ends a rank at once: tests/resume/test_run_lock.sh.)
# After every stop the checkpoint reads back (`shardq status` exit 0).
# Every interrupted run is resumed (on 4, 2 or 1 ranks) to the same bytes as an
# uninterrupted run. Prints each stop latency.
source "$(dirname "$0")/../resume/lib.sh"
command -v mpirun >/dev/null || { echo "no mpirun"; exit 77; }

MAX_LATENCY=10
make_fixture "$WORK/src"
COMMON=(--src "$WORK/src" --set quant.method=mse)
RPC=512
REF="$WORK/ref"
run_shardq 1 "$WORK/ref.log" "$JOB" "${COMMON[@]}" --set run.rows_per_chunk=$RPC --dst "$WORK/ref" || fail "uninterrupted run failed: $(tail -5 "$WORK/ref.log")"

# Starts the job in the background on 4 ranks and returns once quantize work is under way.
start_run() {
  local dst=$1 log=$2
  shift 2
  # Paced (every chunk 30 ms longer) so the run is surely still under way when signalled.
  SHARDQ_TEST_CHUNK_DELAY_MS=30 SHARDQ_LOG=debug "$@" >"$log" 2>&1 &
  RUN_PID=$!
  STARTED_PIDS+=("$RUN_PID")
  wait_for_log "$log" "$RUN_PID" "assign 2 task" 8
}

# signal_case NAME SIGNAL TARGET EXPECTED_RC [SECOND]: TARGET = ranks | mpirun | sparks.
signal_case() {
  local name=$1 signal=$2 target=$3 expected_rc=$4 second=${5:-}
  local dst="$WORK/$name" log="$WORK/$name.log"
  local args=("$JOB" "${COMMON[@]}" --set run.rows_per_chunk=$RPC --dst "$dst")
  local cmd=(mpirun -np 4 "$SHARDQ_BIN" run "${args[@]}")
  [[ $target == sparks ]] && cmd=(env HOSTFILE="$WORK/hostfile" SPARK_IFNAME=lo MAP_BY=slot NP=4
    "$SHARDQ_SOURCE_DIR/slurm/sparks.sh" "${args[@]}")
  start_run "$dst" "$log" "${cmd[@]}"
  local mpirun_pid=$RUN_PID
  [[ $target == sparks ]] && mpirun_pid=$(pgrep -P "$RUN_PID" -x mpirun)
  local ranks
  ranks=$(rank_pids "$mpirun_pid")
  [[ $(wc -w <<<"$ranks") == 4 ]] || fail "$name: expected 4 ranks under mpirun $mpirun_pid, found: $ranks"
  local targets=$RUN_PID
  [[ $target == ranks ]] && targets=$ranks
  local start rc=0
  start=$(now)
  kill -s "$signal" $targets
  if [[ -n $second ]]; then
    sleep 0.05
    kill -s "$signal" $targets 2>/dev/null || true
  fi
  wait "$RUN_PID" || rc=$?
  local latency
  latency=$(seconds_since "$start")
  echo "$name: SIG$signal to $target${second:+ twice}: exit $rc after $latency s"
  python3 -c "import sys; sys.exit(float(sys.argv[1]) >= float(sys.argv[2]))" "$latency" "$MAX_LATENCY" ||
    fail "$name: took $latency s to stop (limit $MAX_LATENCY s)"
  [[ $rc == "$expected_rc" ]] || fail "$name: exit $rc, expected $expected_rc: $(tail -5 "$log")"
  local stopped
  stopped=$(grep -c "stopped for a signal: exit 75" "$log" || true)
  if [[ $target == mpirun && $signal != USR1 ]]; then
    # Open MPI's own TERM/INT path: SIGTERM to the ranks, SIGKILL 1 s later; sometimes the
    # kill comes first. Only what every kill -9 leaves is required: a readable checkpoint.
    echo "$name: $stopped of 4 ranks flushed and said exit 75 before mpirun ended them"
  else
    grep -q "interrupted: checkpoint .* is saved" "$log" || fail "$name: rank 0 did not flush the checkpoint: $(tail -5 "$log")"
    [[ $stopped == 4 ]] || fail "$name: $stopped of 4 ranks said exit 75: $(tail -8 "$log")"
  fi
  "$SHARDQ_BIN" status "$dst/.shardq/checkpoint.h5" >"$WORK/$name.status" ||
    fail "$name: shardq status cannot read the checkpoint: $(cat "$WORK/$name.status")"
  grep -q "total" "$WORK/$name.status" || fail "$name: status shows no totals"
}

# resume_case NAME NP: the same command resumes to the uninterrupted bytes.
resume_case() {
  local dst="$WORK/$1"
  run_shardq "$2" "$WORK/$1.resume.log" "$JOB" "${COMMON[@]}" --set run.rows_per_chunk=$RPC --dst "$dst" ||
    fail "$1: resume on $2 ranks failed: $(tail -5 "$WORK/$1.resume.log")"
  grep -q "resuming from" "$WORK/$1.resume.log" || fail "$1: the resume did not load the checkpoint"
  same_output "$REF" "$dst"
  rm -rf "$dst"
}

signal_case ranks_term TERM ranks 75 && resume_case ranks_term 4
signal_case ranks_int INT ranks 75 && resume_case ranks_int 2
signal_case ranks_usr1 USR1 ranks 75 && resume_case ranks_usr1 1
signal_case mpirun_usr1 USR1 mpirun 75 && resume_case mpirun_usr1 4
# mpirun's own TERM/INT path reaches the ranks a second or more late: a longer run (the
# full-size miniature, small chunks) so that it is still under way then.
make_fixture "$WORK/src_big" 2000
COMMON=(--src "$WORK/src_big" --set quant.method=mse)
REF="$WORK/ref_big"
run_shardq 4 "$WORK/ref_big.log" "$JOB" "${COMMON[@]}" --dst "$REF" || fail "uninterrupted run failed: $(tail -5 "$WORK/ref_big.log")"
RPC=128
signal_case mpirun_term TERM mpirun 1 && resume_case mpirun_term 2
signal_case mpirun_int INT mpirun 1 && resume_case mpirun_int 4
COMMON=(--src "$WORK/src" --set quant.method=mse)
REF="$WORK/ref"
RPC=512
signal_case twice_term TERM ranks 75 second && resume_case twice_term 4
signal_case twice_usr1 USR1 mpirun 75 second && resume_case twice_usr1 1
if [[ -x "$SHARDQ_SOURCE_DIR/slurm/sparks.sh" ]]; then
  echo "localhost slots=4" >"$WORK/hostfile"
  signal_case sparks_term TERM sparks 75 && resume_case sparks_term 2
fi
echo "PASS: every signal stopped all ranks with a flushed checkpoint, and every resume gave the same bytes"
