#!/usr/bin/env bash
# The shutdown handshake. A message can cross rank 0's stop on the wire (an idle rank's
# work request sent just before the stop reached it); were it never received, MPI_Finalize
# would end with it pending, and over TCP Open MPI hung there (the ranks reconnecting to
# rank 0 that had gone). That crossing is rare and timing-bound, so a test hook makes it
# certain: SHARDQ_TEST_CROSSING_REQUEST=1 has ranks 1-3 send rank 0 one more request after
# the stop (pipeline/test_hooks.h). Over TCP, as between hosts, on 4 ranks:
#  1. the run ends (exit 0) within its time limit, a job that finishes and one interrupted
#     (exit 75) alike;
#  2. rank 0 received and dropped each rank's late request (its debug line);
#  3. the bytes equal a run's without the hook.
# shellcheck source=../resume/lib.sh
source "$(dirname "$0")/../resume/lib.sh"

make_fixture "$WORK/src"
COMMON=(--src "$WORK/src" --set 'quant.method="rtn"')
run_shardq 4 "$WORK/plain.log" "$JOB" "${COMMON[@]}" --dst "$WORK/plain" || fail "without the hook: $(tail -3 "$WORK/plain.log")"

export OMPI_MCA_btl=self,tcp OMPI_MCA_btl_tcp_if_include=lo SHARDQ_LOG=debug SHARDQ_TEST_CROSSING_REQUEST=1

# late_requests_dropped LOG: rank 0's debug lines name a dropped request from ranks 1, 2, 3.
late_requests_dropped() {
  local rank
  for rank in 1 2 3; do
    grep -q "\[rank 0\] \[debug\] after the stop: dropped a request message from rank $rank$" "$1" ||
      fail "rank 0 did not receive rank $rank's request sent after the stop ($1)"
  done
}

rc=0
# shellcheck disable=SC2046
timeout 120 $(shardq_cmd 4 "$JOB" "${COMMON[@]}" --dst "$WORK/crossing") >"$WORK/crossing.log" 2>&1 || rc=$?
((rc == 0)) || fail "with requests after the stop: exit $rc (124: it hung) $(tail -3 "$WORK/crossing.log")"
late_requests_dropped "$WORK/crossing.log"
same_output "$WORK/plain" "$WORK/crossing"
echo "finished run: every late request received, exit 0, same bytes"

# Interrupted: the stop with exit 75, then the resume, both with the late requests. USR1
# goes to mpirun (timeout would not pass it on), which forwards it to the ranks.
# shellcheck disable=SC2046
SHARDQ_TEST_CHUNK_DELAY_MS=200 timeout 120 $(shardq_cmd 4 "$JOB" "${COMMON[@]}" --set run.rows_per_chunk=64 \
  --dst "$WORK/stopped") >"$WORK/stopped.log" 2>&1 &
pid=$!
STARTED_PIDS+=("$pid")
wait_for_log "$WORK/stopped.log" "$pid" "assign 2 task" 2
kill -USR1 "$(pgrep -P "$pid" mpirun)"
rc=0
wait "$pid" || rc=$?
((rc == 75)) || fail "interrupted with requests after the stop: exit $rc, not 75 (124: it hung) $(tail -3 "$WORK/stopped.log")"
late_requests_dropped "$WORK/stopped.log"
rc=0
# shellcheck disable=SC2046
timeout 120 $(shardq_cmd 4 "$JOB" "${COMMON[@]}" --set run.rows_per_chunk=64 --dst "$WORK/stopped") >"$WORK/resumed.log" 2>&1 || rc=$?
((rc == 0)) || fail "resume: exit $rc $(tail -3 "$WORK/resumed.log")"
same_output "$WORK/plain" "$WORK/stopped"
echo "interrupted run: every late request received, exit 75; resumed to the same bytes"
