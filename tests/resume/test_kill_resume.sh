#!/usr/bin/env bash
# Kill -9 at seeded-random instants over every stage (reduce, quantize, checkpoint saves,
# shard finalization, index/config/report) and at random wall-clock delays, resuming
# with the same command each time on 1 or 2 ranks. Checks after every resume that no
# chunk recorded done was assigned again, that done chunks never get lost, and at the
# end that the output is byte-identical to an uninterrupted run.
#
# SHARDQ_TEST_SEED picks the instants (default 20261130); the seed is printed so a
# failure can be replayed.
source "$(dirname "$0")/lib.sh"

SEED=${SHARDQ_TEST_SEED:-20261130}
RANDOM=$SEED
MIN_KILLS=10
METHOD=${SHARDQ_TEST_METHOD:-mse}
echo "seed $SEED, method $METHOD"

make_fixture "$WORK/src"
COMMON=(--src "$WORK/src" --set "quant.method=$METHOD" --set run.rows_per_chunk=256)
# Every chunk takes 15 ms longer (a run of ~2 s on one rank, several checkpoint saves),
# so kills land in every stage however fast the machine is.
export SHARDQ_TEST_CHUNK_DELAY_MS=15
# During a wall-clock attempt chunks take this long, so the kill always comes before the end.
WALL_DELAY_MS=40

start=$(now)
run_shardq 0 "$WORK/ref.log" "$JOB" "${COMMON[@]}" --dst "$WORK/ref" || fail "uninterrupted run failed: $(tail -5 "$WORK/ref.log")"
echo "uninterrupted run: $(seconds_since "$start") s"
TOTAL_CHUNKS=$(wc -l < <(done_chunks "$WORK/ref/.shardq/checkpoint.h5"))
((TOTAL_CHUNKS > 0)) || fail "the uninterrupted run's checkpoint records no chunk"

DST="$WORK/out"
CKPT="$DST/.shardq/checkpoint.h5"
ARGS=("$JOB" "${COMMON[@]}" --dst "$DST")

random_between() { echo $((RANDOM % ($2 - $1 + 1) + $1)); }
random_ranks() { local choices=(0 1 2); echo "${choices[RANDOM % 3]}"; }
is_finished() { [[ -f "$CKPT" ]] && finished_steps "$CKPT" | grep -x "$1" >/dev/null; }
shards_left() { [[ ! -f "$CKPT" ]] || [[ $(finished_steps "$CKPT" | grep -c '^shard:') -lt 2 ]]; }

# An event that will surely be passed by the next run, with a random count, following
# the order of the stages: what is finished can no longer be crashed in.
pick_crash() {
  local wanted=$1
  local reduce_left=1 chunks_left=1
  if [[ -f "$CKPT" ]]; then
    reduce_left=$(pending_count "$CKPT" reductions)
    chunks_left=$(pending_count "$CKPT" chunks)
  fi
  case $wanted in
    reduce) ((reduce_left > 0)) && { echo "reduce:$(random_between 1 "$((reduce_left < 20 ? reduce_left : 20))")"; return; } ;;
    quantize) ((chunks_left > 0)) && { echo "quantize:$(random_between 1 "$((chunks_left < 12 ? chunks_left : 12))")"; return; } ;;
    # A run saves at its start and again just before its first shard rename, so the
    # first two saves always come before any finalization; a later one may come after
    # them all and take away the finalize kill this plan still wants.
    save) shards_left && { echo "save:$(random_between 1 2)"; return; } ;;
    finalize) shards_left && { echo "finalize:1"; return; } ;;
    index | config | report) is_finished "$wanted" || { echo "$wanted:1"; return; } ;;
  esac
  echo ""
}

KILLS=0
ASSIGNED=0 # quantize assignments seen in the logs: the no-redo check is not vacuous
declare -A CRASHED=()
ATTEMPT=0
COMPLETE=0

# One run of the same command; $1 = crash spec or "wall:<seconds>".
attempt() {
  local spec=$1 np
  np=$(random_ranks)
  ATTEMPT=$((ATTEMPT + 1))
  local log="$WORK/attempt$ATTEMPT.log" before="$WORK/before$ATTEMPT" after="$WORK/after$ATTEMPT"
  done_chunks "$CKPT" >"$before"
  local rc=0 delay_ms=$SHARDQ_TEST_CHUNK_DELAY_MS
  [[ $spec == wall:* ]] && delay_ms=$WALL_DELAY_MS # paced so that the kill lands mid-run
  SHARDQ_TEST_CHUNK_DELAY_MS=$delay_ms SHARDQ_LOG=debug killed_run "$spec" "$np" "$log" "${ARGS[@]}" || rc=$?
  wait_for_no_rank "$DST"
  done_chunks "$CKPT" >"$after"
  echo "attempt $ATTEMPT: $spec on $np ranks (0 = no mpirun): exit $rc, $(wc -l <"$before") -> $(wc -l <"$after") chunks done"
  check_no_redo "$before" "$log"
  ASSIGNED=$((ASSIGNED + $(assigned_quantize "$log" | wc -l)))
  local lost
  lost=$(comm -23 <(sort "$before") <(sort "$after"))
  [[ -z "$lost" ]] || fail "attempt $ATTEMPT: chunks recorded done are no longer done: $lost"
  if ((rc == 0)); then
    [[ $spec == wall:* || $spec == none:* ]] || fail "attempt $ATTEMPT: $spec did not kill the run (log $log): $(tail -3 "$log")"
    COMPLETE=1
  else
    grep -q "shardq: error" "$log" && fail "attempt $ATTEMPT: the run failed instead of being killed: $(grep 'shardq: error' "$log")"
    KILLS=$((KILLS + 1))
    CRASHED["${spec%%:*}"]=1
  fi
}

# No rank of a killed run may outlive it (it would write next to the resumed run).
wait_for_no_rank() {
  local i
  for i in $(seq 1 100); do
    pgrep -f -- "--dst $1( |$)" >/dev/null || return 0
    sleep 0.1
  done
  fail "ranks of a killed run are still alive: $(pgrep -af -- "--dst $1( |$)")"
}

# A wall-clock kill at 10-40 % of the shortest time the pending chunks can take (two
# ranks working, WALL_DELAY_MS each), after a startup allowance: it cannot let the run end,
# however fast or loaded the machine. Too few chunks left: no wall-clock kill.
wall_spec() {
  local chunks_left=$TOTAL_CHUNKS
  [[ -f "$CKPT" ]] && chunks_left=$(pending_count "$CKPT" chunks)
  ((chunks_left >= 32)) || return 0
  python3 -c "import sys; print(f'wall:{0.2 + int(sys.argv[1]) * $WALL_DELAY_MS / 2000 * int(sys.argv[2]) / 100:.2f}')" \
    "$chunks_left" "$(random_between 10 40)"
}

# Stages in order, some twice, with wall-clock kills in between.
run_plan() {
  local stage spec
  for stage in "$@"; do
    ((COMPLETE)) && return 0
    if [[ $stage == wall ]]; then
      spec=$(wall_spec)
    else
      spec=$(pick_crash "$stage")
    fi
    [[ -n "$spec" ]] || continue
    attempt "$spec"
  done
}
# A wall-clock and a quantize kill come early, while most chunks are pending: a save crash
# can land late (saves are spaced in time, chunks are fast) and finish every chunk first.
run_plan reduce wall quantize reduce save quantize wall quantize wall quantize save quantize finalize
# Some planned events may have been passed already: more crash points until enough kills
# (the last three stages below add three).
while ((!COMPLETE && KILLS < MIN_KILLS - 3)); do
  spec=$(pick_crash quantize)
  [[ -n "$spec" ]] || spec=$(pick_crash save)
  [[ -n "$spec" ]] || break
  attempt "$spec"
done
run_plan finalize index config report
while ((!COMPLETE)); do
  attempt "none:0"
done
echo "$KILLS kills over $ATTEMPT runs"
((KILLS >= MIN_KILLS)) || fail "only $KILLS kills happened (wanted at least $MIN_KILLS)"
((ASSIGNED >= TOTAL_CHUNKS)) || fail "the logs show $ASSIGNED quantize assignments for $TOTAL_CHUNKS chunks"
for event in reduce quantize save finalize index config report wall; do
  [[ -n "${CRASHED[$event]:-}" ]] || fail "no kill happened in stage $event"
done
same_output "$WORK/ref" "$DST"
echo "PASS: output identical to the uninterrupted run after $KILLS kills"
