#!/usr/bin/env bash
# --verify-done: chunks recorded done whose bytes were damaged after the checkpoint
# recorded them (in a .partial, and in a shard already finalized) are found by their
# checksum, reported ("does not match its checksum: recomputing"), computed again, and
# the final output equals the uninterrupted one. Without damage nothing is redone. What it
# found is saved before the run goes on: a kill then loses none of it, and a complete
# output's report is removed before its damaged shard goes back to .partial. A stop during
# the pass exits 75 at once, changing nothing.
source "$(dirname "$0")/lib.sh"

RPC=1024
make_fixture "$WORK/src"
COMMON=(--src "$WORK/src" --set quant.method=rtn --set run.rows_per_chunk=$RPC)
run_shardq 0 "$WORK/ref.log" "$JOB" "${COMMON[@]}" --dst "$WORK/ref" || fail "uninterrupted run failed"

# damage FILE TABLE CHUNK: flips 16 bytes in the middle of the chunk's packed codes.
# Offsets come from the file's own safetensors header and the report's table shape.
damage() {
  python3 - "$1" "$WORK/ref/engram-nvfp4.json" "$2" "$3" "$RPC" <<'EOF'
import json, struct, sys
path, report, table, chunk, rpc = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
entry = json.load(open(report))["tables"][table]
with open(path, "r+b") as f:
    (header_len,) = struct.unpack("<Q", f.read(8))
    header = json.loads(f.read(header_len))
    begin = header[entry["tensor"]]["data_offsets"][0]
    row_bytes = entry["cols"] // 2
    rows = min(rpc, entry["rows"] - chunk * rpc)
    at = 8 + header_len + begin + (chunk * rpc + rows // 2) * row_bytes
    f.seek(at)
    old = f.read(16)
    f.seek(at)
    f.write(bytes(b ^ 0xFF for b in old))
    print(f"{path}: flipped 16 bytes at {at} ({entry['tensor']} chunk {chunk})")
EOF
}

shard_of_table() { # the output shard holding table T's weight (from the index)
  python3 -c "import json,sys; r=json.load(open(sys.argv[1])); i=json.load(open(sys.argv[2]))
print(i['weight_map'][r['tables'][int(sys.argv[3])]['tensor']])" \
    "$WORK/ref/engram-nvfp4.json" "$WORK/ref/model.safetensors.index.json" "$1"
}

DST="$WORK/out"
CKPT="$DST/.shardq/checkpoint.h5"
ARGS=("$JOB" "${COMMON[@]}" --dst "$DST")

# Case 1: killed at the first shard finalization: table 0's chunks are all recorded done
# and still in the .partial.
SHARDQ_CRASH_AT=finalize:1 run_shardq 0 "$WORK/crash.log" "${ARGS[@]}" && fail "the crash did not happen"
shard0=$(shard_of_table 0)
[[ -f "$DST/$shard0.partial" ]] || fail "expected $DST/$shard0.partial after a crash at finalization"
done_chunks "$CKPT" | grep -x "0 2" >/dev/null || fail "chunk 2 of table 0 is not recorded done"
damage "$DST/$shard0.partial" 0 2
SHARDQ_LOG=debug run_shardq 0 "$WORK/verify1.log" "${ARGS[@]}" --verify-done || fail "resume with --verify-done failed: $(cat "$WORK"/verify*.log | grep -v debug | tail -n 4)"
grep -q "chunk 2 .*does not match its checksum: recomputing" "$WORK/verify1.log" ||
  fail "the damaged chunk was not reported: $(grep -i 'warn' "$WORK/verify1.log" | head -3)"
assigned_quantize "$WORK/verify1.log" | grep -x "0 2" >/dev/null || fail "the damaged chunk was not computed again"
[[ $(grep -c "does not match its checksum" "$WORK/verify1.log") == 1 ]] || fail "undamaged chunks were reported"
same_output "$WORK/ref" "$DST"

# Case 2: killed after every shard was finalized; a finalized shard is damaged.
rm -rf "$DST"
SHARDQ_CRASH_AT=index:1 run_shardq 0 "$WORK/crash2.log" "${ARGS[@]}" && fail "the crash did not happen"
shard1=$(shard_of_table 1)
[[ -f "$DST/$shard1" ]] || fail "expected the finalized $DST/$shard1"
damage "$DST/$shard1" 1 0
damage "$DST/$shard1" 1 5
SHARDQ_LOG=debug run_shardq 0 "$WORK/verify2.log" "${ARGS[@]}" --verify-done || fail "resume with --verify-done failed: $(cat "$WORK"/verify*.log | grep -v debug | tail -n 4)"
[[ $(grep -c "does not match its checksum: recomputing" "$WORK/verify2.log") == 2 ]] ||
  fail "expected 2 damaged chunks reported: $(grep -i 'checksum' "$WORK/verify2.log")"
[[ "$(assigned_quantize "$WORK/verify2.log" | sort | tr '\n' ' ')" == "1 0 1 5 " ]] ||
  fail "expected exactly chunks 0 and 5 of table 1 computed again, got: $(assigned_quantize "$WORK/verify2.log" | tr '\n' ';')"
same_output "$WORK/ref" "$DST"
# Case 3: as case 2, but --verify-done is killed once its checks renamed the shard back to
# .partial (at the outputs crash point, before the run's first save): the plain command
# after it must still recompute the chunk and finalize the shard again.
rm -rf "$DST"
SHARDQ_CRASH_AT=index:1 run_shardq 0 "$WORK/crash3.log" "${ARGS[@]}" && fail "the crash did not happen"
damage "$DST/$shard1" 1 3
SHARDQ_CRASH_AT=outputs:1 run_shardq 0 "$WORK/verify3.log" "${ARGS[@]}" --verify-done && fail "the crash did not happen"
grep -q "chunk 3 .*does not match its checksum: recomputing" "$WORK/verify3.log" || fail "the damaged chunk was not reported"
SHARDQ_LOG=debug run_shardq 0 "$WORK/resume3.log" "${ARGS[@]}" || fail "the resume failed: $(tail -3 "$WORK/resume3.log")"
assigned_quantize "$WORK/resume3.log" | grep -x "1 3" >/dev/null || fail "the damaged chunk was not computed again after the kill"
same_output "$WORK/ref" "$DST"
# Case 4: a complete output (the checkpoint records the report), a finalized shard
# damaged: --verify-done still checks, recomputes the chunk and finishes the output again.
rm -rf "$DST"
run_shardq 0 "$WORK/complete.log" "${ARGS[@]}" || fail "the complete run failed"
damage "$DST/$shard1" 1 4
SHARDQ_LOG=debug run_shardq 0 "$WORK/verify4.log" "${ARGS[@]}" --verify-done || fail "--verify-done on the complete output failed: $(tail -3 "$WORK/verify4.log")"
grep -q "nothing to do" "$WORK/verify4.log" && fail "--verify-done took the damaged output for complete"
[[ "$(assigned_quantize "$WORK/verify4.log" | tr '\n' ' ')" == "1 4 " ]] ||
  fail "expected exactly chunk 4 of table 1 computed again, got: $(assigned_quantize "$WORK/verify4.log" | tr '\n' ';')"
same_output "$WORK/ref" "$DST"
# Case 5: as case 4, but --verify-done is killed once it has sent the shard back to
# .partial: the report is gone with it (no output that looks complete while a shard is
# being mended), and the plain command finishes the output again.
damage "$DST/$shard1" 1 2
SHARDQ_CRASH_AT=outputs:1 run_shardq 0 "$WORK/verify6.log" "${ARGS[@]}" --verify-done && fail "the crash did not happen"
[[ -f "$DST/$shard1.partial" ]] || fail "the damaged shard did not go back to .partial"
[[ ! -e "$DST/engram-nvfp4.json" ]] || fail "the report stayed in dst while its damaged shard was mended"
run_shardq 0 "$WORK/resume6.log" "${ARGS[@]}" || fail "the resume failed: $(tail -3 "$WORK/resume6.log")"
same_output "$WORK/ref" "$DST"
SHARDQ_LOG=debug run_shardq 0 "$WORK/verify5.log" "${ARGS[@]}" --verify-done || fail "--verify-done on the mended output failed"
grep -q "nothing to do" "$WORK/verify5.log" || fail "--verify-done on an undamaged complete output did not say it had nothing to do"
# Case 6: a stop signal during the --verify-done pass (paced): exit 75 at once, nothing
# changed (the report stays, no shard went back to .partial), and the plain command after
# it finds the output complete.
# shellcheck disable=SC2046,SC2091 # the command line of lib.sh, split into words
SHARDQ_TEST_CHUNK_DELAY_MS=50 $(shardq_cmd 0 "${ARGS[@]}" --verify-done) >"$WORK/verify7.log" 2>&1 &
pid=$!
STARTED_PIDS+=("$pid")
wait_for_log "$WORK/verify7.log" "$pid" "re-reading the finished chunks"
kill -TERM "$pid"
rc=0
wait "$pid" || rc=$?
((rc == 75)) || fail "a stop during the --verify-done pass exited $rc: $(tail -3 "$WORK/verify7.log")"
grep -q "stopped while preparing, before any change" "$WORK/verify7.log" || fail "no stop line: $(tail -3 "$WORK/verify7.log")"
[[ -e "$DST/engram-nvfp4.json" && ! -e "$DST/$shard1.partial" ]] || fail "the stopped pass changed the output"
run_shardq 0 "$WORK/after7.log" "${ARGS[@]}" || fail "the run after the stopped pass failed"
grep -q "nothing to do" "$WORK/after7.log" || fail "the output is not complete after the stopped pass"
echo "PASS: --verify-done finds damaged chunks in .partial and finalized shards and recomputes only them, killed or not, complete or not"
