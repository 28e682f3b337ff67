#!/usr/bin/env bash
# Which checkpoints a run accepts (docs/checkpoint.md "Fingerprint and resume rules",
# "Atomic saves"):
#   - one of another job (other method, other source, other source bytes under the same
#     headers) is refused, naming the field;
#   - a truncated or bit-flipped newest generation falls back to .prev and says so, as
#     does a missing newest one; the resumed output is still the uninterrupted bytes;
#   - resumed from a generation older than a shard's rename (chunks pending), the shard
#     goes back to .partial and those chunks are redone, to the same bytes;
#   - with both generations corrupt the run is refused with "use --fresh";
#   - --fresh starts over, also over shards another job finalized;
#   - the same command on a finished job exits 0 and does nothing; a complete output
#     without its checkpoint needs --force;
#   - h5dump reads the checkpoint; `status` says where a damaged journal's replay stopped.
source "$(dirname "$0")/lib.sh"

make_fixture "$WORK/src"
COMMON=(--src "$WORK/src" --set run.rows_per_chunk=1024)
RTN=(--set quant.method=rtn)
run_shardq 0 "$WORK/ref.log" "$JOB" "${COMMON[@]}" "${RTN[@]}" --dst "$WORK/ref" || fail "uninterrupted run failed"

DST="$WORK/out"
CKPT="$DST/.shardq/checkpoint.h5"
ARGS=("$JOB" "${COMMON[@]}" "${RTN[@]}" --dst "$DST")

expect_refusal() { # LOG PATTERN...: the run failed and its message holds every pattern
  local log=$1 pattern
  shift
  for pattern in "$@"; do
    grep -q -- "$pattern" "$log" || fail "expected '$pattern' in: $(grep 'error' "$log" || tail -3 "$log")"
  done
  echo "refused: $(grep -o 'shardq: error: .*' "$log" | cut -c1-220)"
}

# Interrupted twice after some chunks are recorded (paced: saves come every 0.5 s, and one
# records every chunk before the shards are renamed). Each run starts with a whole save (the
# base) and then journals its changes: after the second run the first run's base is kept as
# PATH.prev. The second save of a run is never its last (which records the finished output).
for attempt in 1 2; do
  SHARDQ_TEST_CHUNK_DELAY_MS=50 SHARDQ_CRASH_AT=save:2 run_shardq 0 "$WORK/crash$attempt.log" "${ARGS[@]}" && fail "the crash did not happen"
done
(($(done_chunks "$CKPT" | wc -l) > 0)) || fail "no chunk recorded before the crash"
[[ -s "$CKPT.journal" ]] || fail "the saves after the base left no journal"

# `status` on a copy whose journal has a damaged record says where the replay stopped (its
# figures stop there), as the run does.
mkdir "$WORK/journal-copy"
cp "$CKPT" "$CKPT.journal" "$WORK/journal-copy/"
journal_copy="$WORK/journal-copy/checkpoint.h5.journal"
printf '\xff' | dd of="$journal_copy" bs=1 seek=$(($(stat -c %s "$journal_copy") - 1)) conv=notrunc status=none
"$SHARDQ_BIN" status "$WORK/journal-copy/checkpoint.h5" >"$WORK/journal-status.log" 2>&1 || fail "status on a damaged journal failed"
grep -q "^note: $journal_copy: record [0-9]* at byte [0-9]* is cut short or damaged" "$WORK/journal-status.log" ||
  fail "status does not say the journal is damaged: $(head -4 "$WORK/journal-status.log")"

h5dump -H "$CKPT" >"$WORK/h5dump.txt" || fail "h5dump cannot read $CKPT"
grep -q 'DATASET "state"' "$WORK/h5dump.txt" || fail "h5dump shows no chunk state"

rc=0
run_shardq 0 "$WORK/method.log" "$JOB" "${COMMON[@]}" --set quant.method=mse --dst "$DST" || rc=$?
((rc != 0)) || fail "a checkpoint of method rtn was resumed by method mse"
expect_refusal "$WORK/method.log" "another job" "field 'job': key 'method' is rtn in the checkpoint but mse now" "--fresh"

# Every key that decides bytes is in the fingerprint, the recipe keys too: a finished W8A8
# output is refused to the same job with another ignore list (the demo's, less "vision.",
# which matches nothing in the fixture), naming the key.
JOBINT8="$SHARDQ_SOURCE_DIR/jobs/demo-w8a8-int8.toml"
run_shardq 0 "$WORK/int8.log" "$JOBINT8" --src "$WORK/src" --dst "$WORK/int8" || fail "the w8a8-int8 run failed"
rc=0
run_shardq 0 "$WORK/ignore.log" "$JOBINT8" --src "$WORK/src" --dst "$WORK/int8" \
  --set 'quant.ignore=["aligner.","attn.compressor.wkv","attn.compressor.wgate","attn.indexer.weights_proj","attn.indexer.wk","attn.wq_a","attn.wkv","attn.wo_a","engram.wkv"]' || rc=$?
((rc != 0)) || fail "a finished w8a8-int8 output was taken for another ignore list"
expect_refusal "$WORK/ignore.log" "of another job" "field 'job': key 'ignore' is" "--force"

cp -r "$WORK/src" "$WORK/src2"
rc=0
run_shardq 0 "$WORK/source.log" "$JOB" --src "$WORK/src2" --set run.rows_per_chunk=1024 "${RTN[@]}" --dst "$DST" || rc=$?
((rc != 0)) || fail "a checkpoint of source $WORK/src was resumed from $WORK/src2"
expect_refusal "$WORK/source.log" "another job" "field 'src'" "$WORK/src2"
rm -rf "$WORK/src2"

# The same source folder, its shards rewritten with other bytes under the same headers (a
# revised checkpoint downloaded over it): the headers agree, the sampled bytes do not.
mv "$WORK/src" "$WORK/src-before"
"$SHARDQ_BIN" fixture --preset dsv41-mini --out "$WORK/src" --engram-vocab 600 --seed 7 >/dev/null
python3 - "$WORK/src" "$WORK/src-before" <<'PY' || fail "the seed-7 fixture's headers differ: not a same-headers test"
import glob, os, struct, sys
def header(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        return f.read(n)
for shard in glob.glob(f"{sys.argv[1]}/*.safetensors"):
    assert header(shard) == header(f"{sys.argv[2]}/{os.path.basename(shard)}"), shard
PY
rc=0
run_shardq 0 "$WORK/bytes.log" "${ARGS[@]}" || rc=$?
((rc != 0)) || fail "a checkpoint was resumed over source shards with other bytes"
expect_refusal "$WORK/bytes.log" "another job" "field 'source_sample'" "sampled source bytes: another or a changed source" "--fresh"
rm -rf "$WORK/src"
mv "$WORK/src-before" "$WORK/src"

# Truncated newest generation: falls back to .prev, sets the bad file aside (so .prev
# survives the next saves) and is killed again after two saves of its own.
size=$(stat -c %s "$CKPT")
truncate -s $((size / 2)) "$CKPT"
SHARDQ_TEST_CHUNK_DELAY_MS=50 SHARDQ_CRASH_AT=save:2 run_shardq 0 "$WORK/truncated.log" "${ARGS[@]}" && fail "the crash did not happen"
grep -q "newest generation unusable.*using the previous one" "$WORK/truncated.log" ||
  fail "no fallback note for a truncated checkpoint: $(tail -3 "$WORK/truncated.log")"
echo "truncated: $(grep -o 'newest generation unusable.*' "$WORK/truncated.log" | cut -c1-200)"
[[ -f "$CKPT.corrupt" ]] || fail "the unusable newest generation was not set aside as $CKPT.corrupt"

# Bit-flipped newest generation: inside the chunk checksums' data (where h5dump says it
# lies), bytes HDF5 reads back without complaint and only the content checksum can catch.
data_offset=$(h5dump -p -H -d /chunks/checksum "$CKPT" | awk '/OFFSET/ {print $2}')
[[ "$data_offset" =~ ^[0-9]+$ ]] || fail "h5dump gives no offset for /chunks/checksum"
printf '\xde\xad\xbe\xef\xde\xad\xbe\xef' | dd of="$CKPT" bs=1 seek="$data_offset" conv=notrunc status=none
SHARDQ_TEST_CHUNK_DELAY_MS=50 SHARDQ_CRASH_AT=save:2 run_shardq 0 "$WORK/flipped.log" "${ARGS[@]}" && fail "the crash did not happen"
grep -q "newest generation unusable.*using the previous one" "$WORK/flipped.log" ||
  fail "no fallback note for a bit-flipped checkpoint: $(tail -3 "$WORK/flipped.log")"
echo "flipped: $(grep -o 'newest generation unusable.*' "$WORK/flipped.log" | cut -c1-200)"

# Missing newest generation: .prev alone is resumed to the end, keeping the .partial
# shards (the chunks .prev records done are not recomputed).
done_chunks "$CKPT.prev" >"$WORK/prev_done"
rm "$CKPT"
SHARDQ_LOG=debug run_shardq 0 "$WORK/missing.log" "${ARGS[@]}" || fail "resuming from .prev alone failed: $(tail -3 "$WORK/missing.log")"
grep -q "using the previous one" "$WORK/missing.log" || fail "no fallback note for a missing checkpoint"
check_resumed_without_redo "$WORK/prev_done" "$WORK/missing.log"
same_output "$WORK/ref" "$DST"

# A generation saved before the shards were renamed (chunks still pending), resumed after
# the renames: the shards go back to .partial and the output is still the same bytes.
DST3="$WORK/out3"
ARGS3=("$JOB" "${COMMON[@]}" "${RTN[@]}" --dst "$DST3")
# Killed as the second chunk is recorded: the checkpoint has most chunks pending.
SHARDQ_CRASH_AT=quantize:2 run_shardq 0 "$WORK/old.log" "${ARGS3[@]}" && fail "the crash did not happen"
cp -a "$DST3/.shardq" "$WORK/old-checkpoint"
SHARDQ_CRASH_AT=index:1 run_shardq 0 "$WORK/renamed.log" "${ARGS3[@]}" && fail "the crash did not happen"
[[ $(ls "$DST3"/*.partial 2>/dev/null | wc -l) == 0 ]] || fail "the run had not finalized its shards"
rm -rf "$DST3/.shardq" && cp -a "$WORK/old-checkpoint" "$DST3/.shardq"
run_shardq 0 "$WORK/reopened.log" "${ARGS3[@]}" || fail "resuming an older generation failed: $(tail -3 "$WORK/reopened.log")"
grep -q "back to .partial, its pending chunks redone" "$WORK/reopened.log" || fail "no shard went back to .partial"
same_output "$WORK/ref" "$DST3"
echo "reopened: $(grep -c 'back to .partial' "$WORK/reopened.log") shard(s) back to .partial"

# Both generations corrupt: refused, then --fresh starts over.
SHARDQ_CRASH_AT=quantize:3 run_shardq 0 "$WORK/force.log" "${ARGS[@]}" --force && fail "the crash did not happen"
for file in "$CKPT" "$CKPT.prev"; do truncate -s 1000 "$file"; done
rc=0
run_shardq 0 "$WORK/corrupt.log" "${ARGS[@]}" || rc=$?
((rc != 0)) || fail "a run started over a corrupt checkpoint without --fresh"
expect_refusal "$WORK/corrupt.log" "is corrupt" "use --fresh"
run_shardq 0 "$WORK/fresh.log" "${ARGS[@]}" --fresh || fail "--fresh failed: $(tail -3 "$WORK/fresh.log")"
grep -q "resuming from" "$WORK/fresh.log" && fail "--fresh resumed instead of starting over"
same_output "$WORK/ref" "$DST"

# The same command again on the finished job: nothing to do, exit 0, output untouched.
before=$(digest "$DST")
run_shardq 0 "$WORK/again.log" "${ARGS[@]}" || fail "re-running a finished job failed: $(tail -3 "$WORK/again.log")"
grep -q "complete already" "$WORK/again.log" || fail "re-running a finished job did not say it is complete"
[[ "$(digest "$DST")" == "$before" ]] || fail "re-running a finished job changed its output"
# Without its checkpoint a complete output is not overwritten unless --force.
rm -rf "$DST/.shardq"
rc=0
run_shardq 0 "$WORK/nockpt.log" "${ARGS[@]}" || rc=$?
((rc != 0)) || fail "a complete output without checkpoint was overwritten without --force"
expect_refusal "$WORK/nockpt.log" "complete output already" "--force"
# Nor is one that lost a shard since called complete: the refusal names the shard.
missing=$(cd "$DST" && ls ./*.safetensors | head -n 1 | sed 's#^./##')
mv "$DST/$missing" "$WORK/$missing.aside"
rc=0
run_shardq 0 "$WORK/lost.log" "${ARGS[@]}" || rc=$?
((rc != 0)) || fail "an output without checkpoint that lost a shard was overwritten without --force"
expect_refusal "$WORK/lost.log" "holds the report of a finished output but not its $missing" "--force"
mv "$WORK/$missing.aside" "$DST/$missing"

# --fresh over shards that another job (mse) finalized before it was killed.
DST2="$WORK/out2"
SHARDQ_CRASH_AT=index:1 run_shardq 0 "$WORK/mse.log" "$JOB" "${COMMON[@]}" --set quant.method=mse --dst "$DST2" &&
  fail "the crash did not happen"
[[ $(ls "$DST2"/*.partial 2>/dev/null | wc -l) == 0 ]] || fail "the mse run had not finalized its shards"
run_shardq 0 "$WORK/fresh2.log" "$JOB" "${COMMON[@]}" "${RTN[@]}" --dst "$DST2" --fresh ||
  fail "--fresh over another job's shards failed: $(tail -3 "$WORK/fresh2.log")"
same_output "$WORK/ref" "$DST2"
echo "PASS: checkpoint refusals, fallbacks, --fresh and re-runs"
