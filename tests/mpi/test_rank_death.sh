#!/usr/bin/env bash
# A rank that dies mid-run (kill -9 of rank 1 or rank 2 of 3): the others do not hang;
# mpirun ends the job with a non-zero exit and a message naming the dead rank, well
# within the timeout; the checkpoint still reads back and the same command resumes to
# the uninterrupted bytes.
source "$(dirname "$0")/../resume/lib.sh"
command -v mpirun >/dev/null || { echo "no mpirun"; exit 77; }

TIMEOUT=60
make_fixture "$WORK/src"
COMMON=(--src "$WORK/src" --set quant.method=mse --set run.rows_per_chunk=256)
run_shardq 0 "$WORK/ref.log" "$JOB" "${COMMON[@]}" --dst "$WORK/ref" || fail "uninterrupted run failed"

for victim in 1 2; do
  DST="$WORK/out$victim"
  log="$WORK/death$victim.log"
  SHARDQ_LOG=debug mpirun -np 3 "$SHARDQ_BIN" run "$JOB" "${COMMON[@]}" --dst "$DST" >"$log" 2>&1 &
  RUN=$!
  STARTED_PIDS+=("$RUN")
  wait_for_log "$log" "$RUN" "assign 2 task" 10
  pid=$(rank_pid "$RUN" "$victim") || fail "rank $victim not found under mpirun $RUN"
  start=$(now)
  kill -9 "$pid"
  rc=0
  for i in $(seq 1 $((TIMEOUT * 10))); do
    kill -0 "$RUN" 2>/dev/null || break
    sleep 0.1
  done
  kill -0 "$RUN" 2>/dev/null && { kill_tree "$RUN"; fail "the job still runs $TIMEOUT s after rank $victim died (hang)"; }
  wait "$RUN" || rc=$?
  echo "rank $victim killed: mpirun exit $rc after $(seconds_since "$start") s"
  ((rc != 0)) || fail "the job exited 0 although rank $victim died"
  grep -qiE "rank $victim .*(exited|killed|signal 9)" "$log" ||
    fail "no message names the dead rank: $(tail -12 "$log")"
  grep -iE "rank $victim .*(exited|killed|signal 9)" "$log" | head -n 2
  "$SHARDQ_BIN" status "$DST/.shardq/checkpoint.h5" >/dev/null || fail "the checkpoint does not read back"
  run_shardq 2 "$WORK/resume$victim.log" "$JOB" "${COMMON[@]}" --dst "$DST" ||
    fail "resume after the rank died failed: $(tail -3 "$WORK/resume$victim.log")"
  same_output "$WORK/ref" "$DST"
done
echo "PASS: a dead rank ends the job without a hang, and the job resumes"
