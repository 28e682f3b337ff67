#!/usr/bin/env bash
# w8a8-int8 killed (kill -9 at a crash point, or of the whole mpirun tree at a wall-clock
# instant) in every stage: encode chunks (early, middle, late), checkpoint saves, shard
# finalization, index, config and report; each time the same command resumes, on 0, 1 or
# 2 ranks (0 = no mpirun). No resume recomputes a chunk the checkpoint recorded done, no
# kill loses one, the end result is byte-identical to an uninterrupted run, and verify
# passes on it.
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"

JOBINT8="$SHARDQ_SOURCE_DIR/jobs/demo-w8a8-int8.toml"
make_fixture "$WORK/src"
# One compute thread per rank and 5 ms a chunk: every run stays under way long enough for
# its kill, the wall-clock one included.
# 32 rows a chunk (FP8's scale block): ~580 chunks, small linears sharing tasks.
ARGS=("$JOBINT8" --src "$WORK/src" --set run.rows_per_chunk=32 --set run.threads=1)
run_shardq 0 "$WORK/ref.log" "${ARGS[@]}" --dst "$WORK/uninterrupted" || fail "uninterrupted run: $(tail -3 "$WORK/ref.log")"

TOTAL_CHUNKS=$(done_chunks "$WORK/uninterrupted/.shardq/checkpoint.h5" | wc -l)
((TOTAL_CHUNKS > 500)) || fail "the uninterrupted run records $TOTAL_CHUNKS chunks; rows_per_chunk=32 gives over 500"

DST="$WORK/out"
CKPT="$DST/.shardq/checkpoint.h5"
export SHARDQ_TEST_CHUNK_DELAY_MS=5
kills=0
killed_specs=()
attempt=0
assigned=0 # quantize assignments seen in the logs: the no-redo check is not vacuous
# Save kills take a run's 2nd save: a run saves at its start and again just before its
# first shard rename, so the 2nd comes before any finalization (a later one may come after
# them all and leave the finalize kills nothing to kill).
for spec in quantize:30 save:2 wall:1.0 quantize:100 quantize:150 save:2 finalize:1 finalize:1 index:1 config:1 report:1; do
  np=$((kills % 3))
  rc=0
  attempt=$((attempt + 1))
  log="$WORK/attempt$attempt.log"
  done_chunks "$CKPT" >"$WORK/before$attempt"
  SHARDQ_LOG=debug killed_run "$spec" "$np" "$log" "${ARGS[@]}" --dst "$DST" || rc=$?
  grep -q "shardq: error" "$log" && fail "$spec: the run failed instead of being killed: $(grep 'shardq: error' "$log")"
  sleep 0.2 # the killed ranks' ends
  done_chunks "$CKPT" >"$WORK/after$attempt"
  # Resumes skip what the checkpoint records, and a kill never loses a recorded chunk.
  check_no_redo "$WORK/before$attempt" "$log"
  assigned=$((assigned + $(assigned_quantize "$log" | wc -l)))
  lost=$(comm -23 <(sort "$WORK/before$attempt") <(sort "$WORK/after$attempt"))
  [[ -z "$lost" ]] || fail "$spec: chunks recorded done are no longer done: $lost"
  echo "kill at $spec on $np ranks (0 = no mpirun): exit $rc, $(wc -l <"$WORK/before$attempt") -> $(wc -l <"$WORK/after$attempt") of $TOTAL_CHUNKS chunks done"
  if ((rc != 0)); then
    kills=$((kills + 1))
    killed_specs+=("$spec")
  fi
done
# Every crash point but the wall-clock kill (the run may end first) must have fired.
for spec in quantize:30 save:2 quantize:100 quantize:150 finalize:1 index:1 config:1 report:1; do
  [[ " ${killed_specs[*]} " == *" $spec "* ]] || fail "the kill at $spec did not happen (killed: ${killed_specs[*]})"
done
((kills >= 10)) || fail "only $kills of the planned kills happened"
((assigned > 0)) || fail "no quantize assignment in the logs: the no-redo check saw nothing"
[[ -f "$DST/model.safetensors.index.json" ]] || fail "the index is missing after index:1 was passed"
run_shardq 2 "$WORK/final.log" "${ARGS[@]}" --dst "$DST" || fail "final resume: $(tail -3 "$WORK/final.log")"
same_output "$WORK/uninterrupted" "$DST"
"$SHARDQ_BIN" verify --src "$WORK/src" --dst "$DST" "$JOBINT8" >"$WORK/verify.log" || { cat "$WORK/verify.log"; fail "verify failed on the resumed output"; }
echo "PASS: w8a8-int8 resumed to identical bytes after $kills kills"
