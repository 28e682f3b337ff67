#!/usr/bin/env bash
# A full disk (docs/checkpoint.md "Durable output writes"), on a small tmpfs mounted for the test
# (skipped where mounting is not permitted):
#   1. too little room for the output shards: refused up front by the space reservation,
#      naming the .partial path and the bytes needed; the same command succeeds once
#      the file system is made larger;
#   2. the disk fills up mid-run: the run fails with a message naming the path and the
#      error; after space is freed the same command resumes (no chunk computed again)
#      and the output equals the uninterrupted one.
source "$(dirname "$0")/lib.sh"

MNT="$WORK/mnt"
mount_scratch "$MNT" tmpfs size=64m

make_fixture "$WORK/src"
COMMON=(--src "$WORK/src" --set quant.method=mse --set run.rows_per_chunk=1024)
run_shardq 0 "$WORK/ref.log" "$JOB" "${COMMON[@]}" --dst "$WORK/ref" || fail "uninterrupted run failed"

# The bytes the output needs on the tmpfs: the changed shards (unchanged files become
# symlinks across file systems).
shards=$(find "$WORK/ref" -maxdepth 1 -name '*.safetensors' -links 1 -printf '%s\n')
[[ $(wc -l <<<"$shards") == 2 ]] || fail "expected 2 changed shards, found: $shards"
big=$(sort -n <<<"$shards" | tail -n 1)
both=$(($(paste -sd+ <<<"$shards")))
kib() { echo $((($1 + 1023) / 1024 + 1))k; } # bytes -> tmpfs size, rounded up
echo "changed shards $both bytes (largest $big)"
DST="$MNT/out"
ARGS=("$JOB" "${COMMON[@]}" --dst "$DST" --checkpoint "$MNT/ckpt/checkpoint.h5")

# 1. Room for the largest shard only.
mount -o remount,size="$(kib $((big + 64 * 1024)))" "$MNT"
rc=0
run_shardq 0 "$WORK/small.log" "${ARGS[@]}" || rc=$?
((rc != 0)) || fail "a run without room for its shards succeeded"
message=$(grep -o "shardq: error: .*" "$WORK/small.log" || true)
echo "no room for the shards: $message"
grep -qE "shardq: error: $DST/[^ ]*\.safetensors\.partial: (needs [0-9]+ bytes|no space left for [0-9]+ bytes)" <<<"$message" ||
  fail "the message does not name the .partial and the bytes: $message"
mount -o remount,size=64m "$MNT"
run_shardq 0 "$WORK/big.log" "${ARGS[@]}" || fail "the run failed with room enough: $(tail -3 "$WORK/big.log")"
same_output "$WORK/ref" "$DST"

# 2. The disk fills up mid-run (another program takes the last bytes): the next
#    checkpoint save fails naming its path and the error; once space is freed the same
#    command resumes without computing a recorded chunk again.
rm -rf "$DST" "$MNT/ckpt"
SLOW=(--set run.rows_per_chunk=256) # same bytes, a longer run
# Each chunk 10 ms longer: without it the whole run takes ~0.2 s here, and it could end
# between two looks at its checkpoint (CI saw the run finish before the disk was filled).
SHARDQ_TEST_CHUNK_DELAY_MS=10 SHARDQ_LOG=debug "$SHARDQ_BIN" run "${ARGS[@]}" "${SLOW[@]}" >"$WORK/full.log" 2>&1 &
RUN=$!
STARTED_PIDS+=("$RUN")
# The run is stopped (SIGSTOP) while its checkpoint is looked at, so it cannot finish
# between the look and the filling of the disk; it is filled only while a shard is still
# .partial (chunks left to write and record).
for i in $(seq 1 1200); do
  if [[ -f "$MNT/ckpt/checkpoint.h5" ]]; then
    kill -STOP "$RUN"
    (($(done_chunks "$MNT/ckpt/checkpoint.h5" | wc -l) >= 2)) && compgen -G "$DST/*.partial" >/dev/null && break
    kill -CONT "$RUN"
  fi
  kill -0 "$RUN" 2>/dev/null || fail "the run ended before the disk could be filled: $(tail -3 "$WORK/full.log")"
  sleep 0.02
done
dd if=/dev/zero of="$MNT/filler" bs=64k status=none 2>/dev/null || true # stops at ENOSPC
kill -CONT "$RUN"
rc=0
wait "$RUN" || rc=$?
((rc != 0)) || fail "the run succeeded on a full disk: $(tail -n 25 "$WORK/full.log")"
message=$(grep -A2 "shardq: error: " "$WORK/full.log" | tr '\n' ' ' || true) # HDF5's reason spans lines
echo "disk full mid-run (exit $rc): ${message:0:400}"
grep -qE "$MNT/[^ ]*" <<<"$message" || fail "the message names no path on the full file system: $message"
grep -qiE "no space left|needs [0-9]+ bytes" <<<"$message" || fail "the message does not say the disk is full: $message"
rm -f "$MNT/filler"
done_chunks "$MNT/ckpt/checkpoint.h5" >"$WORK/done_before"
(($(wc -l <"$WORK/done_before") > 0)) || fail "no chunk was recorded before the disk filled up"
SHARDQ_LOG=debug run_shardq 0 "$WORK/resume.log" "${ARGS[@]}" "${SLOW[@]}" ||
  fail "the resume failed: $(tail -3 "$WORK/resume.log")"
grep -q "resuming from" "$WORK/resume.log" || fail "the run after freeing space did not resume"
check_resumed_without_redo "$WORK/done_before" "$WORK/resume.log"
same_output "$WORK/ref" "$DST"
echo "PASS: a full disk is reported with path and bytes, and the run resumes once there is room"
