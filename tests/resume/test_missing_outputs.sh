#!/usr/bin/env bash
# What the checkpoint records done but is no longer on disk is done again, to the
# uninterrupted bytes (docs/checkpoint.md, resume): the plain command after
#  1. a finished output lost a changed shard, was cut short in another, lost a linked
#     shard, the tokenizer, config.json and the report: rc 0, every file back;
#  2. a run killed mid-way lost its .partial files: the done chunks in them are computed
#     again (a .partial recreated empty under chunks recorded done would hold zeros);
#  3. a run that kept its checkpoint elsewhere is not taken over by one without it.
# The w8a8-int8 demo job: 100 tasks over four changed shards, two linked.
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"

JOBINT8="$SHARDQ_SOURCE_DIR/jobs/demo-w8a8-int8.toml"
make_fixture "$WORK/src"
ARGS=("$JOBINT8" --src "$WORK/src" --set run.rows_per_chunk=256)
run_shardq 0 "$WORK/ref.log" "${ARGS[@]}" --dst "$WORK/ref" || fail "uninterrupted run: $(tail -3 "$WORK/ref.log")"

# The index names the shards; changed ones are new files, linked ones the source's inodes.
changed=() linked=()
for shard in "$WORK/ref"/*.safetensors; do
  name=$(basename "$shard")
  if [[ $(stat -c %i "$shard") == $(stat -c %i "$WORK/src/$name") ]]; then linked+=("$name"); else changed+=("$name"); fi
done
((${#changed[@]} >= 2 && ${#linked[@]} >= 1)) || fail "expected changed and linked shards: ${changed[*]} / ${linked[*]}"

# 1. A finished output, files lost.
run_shardq 0 "$WORK/done.log" "${ARGS[@]}" --dst "$WORK/done" || fail "first run: $(tail -3 "$WORK/done.log")"
rm "$WORK/done/${changed[0]}" "$WORK/done/${linked[0]}" "$WORK/done/tokenizer.json" "$WORK/done/config.json" \
  "$WORK/done/w8a8-int8.json"
truncate -s 4096 "$WORK/done/${changed[1]}"
run_shardq 0 "$WORK/mend.log" "${ARGS[@]}" --dst "$WORK/done" || fail "the mending run: $(tail -3 "$WORK/mend.log")"
grep -q "complete already" "$WORK/mend.log" && fail "the mending run said complete already"
grep -q "${changed[0]}: missing, or not its planned size, under [0-9]* chunks" "$WORK/mend.log" ||
  fail "no warning for the lost shard: $(grep -c warn "$WORK/mend.log") warnings"
grep -q "${changed[1]}: not its planned size" "$WORK/mend.log" || fail "no warning for the cut shard"
same_output "$WORK/ref" "$WORK/done"
[[ $(stat -c %i "$WORK/done/${linked[0]}") == $(stat -c %i "$WORK/src/${linked[0]}") ]] ||
  fail "${linked[0]} is not linked again"
cmp -s "$WORK/src/tokenizer.json" "$WORK/done/tokenizer.json" || fail "tokenizer.json not linked again"
run_shardq 0 "$WORK/again.log" "${ARGS[@]}" --dst "$WORK/done" || fail "the run after mending failed"
grep -q "complete already" "$WORK/again.log" || fail "the mended output is not complete already"
echo "a finished output's lost files are made again, to the same bytes"

# 2. Killed mid-way, the .partial files lost.
SHARDQ_TEST_CHUNK_DELAY_MS=20 SHARDQ_CRASH_AT=save:3 run_shardq 0 "$WORK/crash.log" "${ARGS[@]}" --dst "$WORK/mid" &&
  fail "the crash did not happen"
CKPT="$WORK/mid/.shardq/checkpoint.h5"
(($(done_chunks "$CKPT" | wc -l) > 0)) || fail "no chunk recorded done before the crash"
compgen -G "$WORK/mid/*.partial" >/dev/null || fail "no .partial files after the crash"
rm "$WORK/mid"/*.partial
run_shardq 0 "$WORK/resume.log" "${ARGS[@]}" --dst "$WORK/mid" || fail "the resume: $(tail -3 "$WORK/resume.log")"
grep -q "chunks the checkpoint records done: they are computed again" "$WORK/resume.log" ||
  fail "no warning for the lost .partial files"
same_output "$WORK/ref" "$WORK/mid"
echo "lost .partial files' done chunks are computed again, to the uninterrupted bytes"

# 2b. The same, the resume killed right after it made the lost .partial files anew (at
#     their planned size, zeros): what it forgot was saved first, so the next run computes
#     those chunks again instead of trusting zeros.
SHARDQ_TEST_CHUNK_DELAY_MS=20 SHARDQ_CRASH_AT=save:3 run_shardq 0 "$WORK/crash2.log" "${ARGS[@]}" --dst "$WORK/mid2" &&
  fail "the second crash did not happen"
rm "$WORK/mid2"/*.partial
SHARDQ_CRASH_AT=outputs:1 run_shardq 0 "$WORK/recreated.log" "${ARGS[@]}" --dst "$WORK/mid2" &&
  fail "the crash after the .partial files were made anew did not happen"
compgen -G "$WORK/mid2/*.partial" >/dev/null || fail "no .partial files made anew before the crash"
run_shardq 0 "$WORK/resume2.log" "${ARGS[@]}" --dst "$WORK/mid2" || fail "the resume: $(tail -3 "$WORK/resume2.log")"
same_output "$WORK/ref" "$WORK/mid2"
echo "a resume killed after making lost .partial files anew still computes their chunks again"

# 3. A run that kept its checkpoint elsewhere (--checkpoint), killed after it finished a
#    shard, then run without it: refused, naming the shard and the checkpoint looked for;
#    with it, finished to the uninterrupted bytes.
ELSEWHERE=(--checkpoint "$WORK/elsewhere/ck.h5")
SHARDQ_CRASH_AT=finalize:2 run_shardq 0 "$WORK/kept.log" "${ARGS[@]}" "${ELSEWHERE[@]}" --dst "$WORK/kept" &&
  fail "the crash did not happen"
rc=0
run_shardq 0 "$WORK/without.log" "${ARGS[@]}" --dst "$WORK/kept" || rc=$?
((rc != 0)) || fail "a run without the checkpoint went on over another run's finished shard"
grep -q "^shardq: error: .*holds 1 finished shard(s) of an earlier run .* but no checkpoint at $WORK/kept/.shardq/checkpoint.h5 records them: pass the --checkpoint" \
  "$WORK/without.log" || fail "the refusal: $(tail -2 "$WORK/without.log")"
run_shardq 0 "$WORK/with.log" "${ARGS[@]}" "${ELSEWHERE[@]}" --dst "$WORK/kept" || fail "the run with its checkpoint"
same_output "$WORK/ref" "$WORK/kept"
echo "a run without its checkpoint is refused: $(grep '^shardq: error' "$WORK/without.log" | cut -c1-200)"

# 4. A complete output whose newest checkpoint is unusable: the run falls back to .prev,
#    which records chunks pending, and the shards renamed since go back to .partial. The
#    report goes first (an output holding a report holds everything else), killed then too.
SHARDQ_TEST_CHUNK_DELAY_MS=20 SHARDQ_CRASH_AT=save:3 run_shardq 0 "$WORK/crash4.log" "${ARGS[@]}" --dst "$WORK/fell" &&
  fail "the fourth crash did not happen"
run_shardq 0 "$WORK/finish4.log" "${ARGS[@]}" --dst "$WORK/fell" || fail "finishing: $(tail -3 "$WORK/finish4.log")"
[[ -f "$WORK/fell/w8a8-int8.json" && -f "$WORK/fell/.shardq/checkpoint.h5.prev" ]] || fail "no report or no .prev"
truncate -s 100 "$WORK/fell/.shardq/checkpoint.h5"
SHARDQ_CRASH_AT=outputs:1 run_shardq 0 "$WORK/fallback.log" "${ARGS[@]}" --dst "$WORK/fell" &&
  fail "the crash after the fallback did not happen"
grep -q "back to .partial" "$WORK/fallback.log" || fail "no shard went back to .partial: $(tail -3 "$WORK/fallback.log")"
[[ ! -e "$WORK/fell/w8a8-int8.json" ]] || fail "the report stayed beside shards gone back to .partial"
run_shardq 0 "$WORK/after4.log" "${ARGS[@]}" --dst "$WORK/fell" || fail "after the fallback: $(tail -3 "$WORK/after4.log")"
same_output "$WORK/ref" "$WORK/fell"
echo "PASS: a fallback that reopens shards removes the report first"
