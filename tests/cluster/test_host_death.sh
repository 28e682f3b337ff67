#!/usr/bin/env bash
# A host dies mid-run (SIGKILL to every process on spark3: its rank, orted and sshd):
#  1. the ranks on the other hosts are gone and slurm/sparks.sh has exited 75 within
#     DEATH_BOUND_S of the kill, with one line naming the lost host and its rank and
#     saying the checkpoint is safe, and none of Open MPI's pages of explanation;
#  2. the same command, while spark3 is still down, refuses to launch and names it;
#  3. with spark3 back, the same command resumes to the bytes of a single-rank run.
# Prints the time from the death to the survivors' exit.
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"

readonly DEATH_BOUND_S=20 # measured 5.5-10 s on the 2-core CI box; Open MPI needs ~4 of them
readonly VICTIM=spark3 VICTIM_RANK=2
# 411 chunks at 100 ms more each (~12 s on four hosts): killed once rank 0 has handed
# out a tenth of them (its debug log), the run is mid-way whatever the box.
readonly overrides=(--set quant.method=mse --set run.rows_per_chunk=256)
readonly kill_after_assignments=40
export SHARDQ_TEST_CHUNK_DELAY_MS=100 SHARDQ_LOG=debug
export MPIRUN_ARGS="-x SHARDQ_TEST_CHUNK_DELAY_MS -x SHARDQ_LOG"

cluster_up
"$SHARDQ_BIN" fixture --preset dsv41-mini --out "$WORK/src" >/dev/null
args=("$JOB" --src "$WORK/src" "${overrides[@]}" --dst "$WORK/out")
checkpoint=$WORK/out/.shardq/checkpoint.h5
SHARDQ_TEST_CHUNK_DELAY_MS=0 run_shardq 0 "$WORK/ref.log" "$JOB" --src "$WORK/src" "${overrides[@]}" \
  --dst "$WORK/ref" || fail "single-rank run: $(tail -3 "$WORK/ref.log")"

chunks_done() {
  "$SHARDQ_BIN" status "$checkpoint" 2>/dev/null | awk '$1 == "total" { split($2, n, "/"); done = n[1] } END { print done + 0 }'
}
# shardq ranks still running on the hosts that live on.
survivors() {
  local host
  for host in "${TESTBED_HOSTS[@]}"; do
    [ "$host" = "$VICTIM" ] && continue
    testbed_host_pids "$host" | while read -r pid; do
      [ "$(readlink "/proc/$pid/exe" 2>/dev/null)" = "$SHARDQ_BIN" ] && echo "$host:$pid"
    done
  done
  return 0
}

echo "== four hosts; $VICTIM dies once $kill_after_assignments chunks are handed out"
sparks "$WORK/run1.log" "${args[@]}" &
run=$!
STARTED_PIDS+=("$run")
for ((i = 0; i < 1200; i++)); do
  (($(grep -c 'assign 2 task' "$WORK/run1.log") >= kill_after_assignments)) && break
  kill -0 "$run" 2>/dev/null || fail "the run ended before $VICTIM could die: $(tail -5 "$WORK/run1.log")"
  sleep 0.1
done
[ -n "$(survivors)" ] || fail "no ranks running on the other hosts"
killed_at=$(now)
testbed_kill_host "$VICTIM"

survivors_gone=""
for ((i = 0; i < DEATH_BOUND_S * 10; i++)); do
  [ -z "$survivors_gone" ] && [ -z "$(survivors)" ] && survivors_gone=$(seconds_since "$killed_at")
  [ -n "$survivors_gone" ] && ! kill -0 "$run" 2>/dev/null && break
  sleep 0.1
done
kill -0 "$run" 2>/dev/null && fail "sparks.sh still runs ${DEATH_BOUND_S} s after $VICTIM died (ranks left: $(survivors))"
code=0
wait "$run" || code=$?
exited=$(seconds_since "$killed_at")
[ -n "$survivors_gone" ] || fail "ranks still run on the other hosts: $(survivors)"
echo "figure: $VICTIM killed ($(chunks_done) chunks in the checkpoint after); the other ranks gone after $survivors_gone s," \
  "sparks.sh exited $code after $exited s (bound $DEATH_BOUND_S s)"
grep -v '\[debug\]' "$WORK/run1.log"
((code == 75)) || fail "sparks.sh exited $code after a host died, expected 75"
lost_line="lost $VICTIM \\(rank $VICTIM_RANK\\): .*checkpoint $checkpoint is safe"
(($(grep -cE "$lost_line" "$WORK/run1.log") == 1)) || fail "no one line naming $VICTIM, rank $VICTIM_RANK and a safe checkpoint"
grep -qE '^-{20,}' "$WORK/run1.log" && fail "Open MPI's explanations (banners) reached the output"
"$SHARDQ_BIN" status "$checkpoint" >/dev/null || fail "the checkpoint does not read back"

echo "== the same command while $VICTIM is down: refused, naming it"
code=0
sparks "$WORK/run2.log" "${args[@]}" || code=$?
cat "$WORK/run2.log"
((code == 2)) || fail "sparks.sh exited $code with $VICTIM down, expected 2"
grep -q "not launching: $VICTIM: does not answer over ssh" "$WORK/run2.log" || fail "the refusal does not name $VICTIM"

echo "== $VICTIM back: the same command resumes"
testbed_revive_host "$VICTIM"
SHARDQ_TEST_CHUNK_DELAY_MS=0 sparks "$WORK/run3.log" "${args[@]}" || fail "resume: $(tail -5 "$WORK/run3.log")"
grep -q 'resuming from' "$WORK/run3.log" || fail "the run did not resume from the checkpoint"
same_output "$WORK/ref" "$WORK/out"
echo "PASS: survivors out ${survivors_gone} s and sparks.sh ${exited} s after $VICTIM died; resumed to the same bytes"
