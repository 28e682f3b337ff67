#!/usr/bin/env bash
# Back-pressure end to end. In write mode owner a chunk for another rank's shard waits in
# its sender's memory until the owner takes it, and the owner's writer queues what it has
# not written yet. A slow owner (a slow NFS mount) must hold both to their limits, not let
# the other ranks pile up a table's worth of chunks. The limits (512 MiB unsent, 64 MiB
# queued) are set small here so that a fixture of tens of MB reaches them, and every write
# takes 40 ms longer per chunk (pipeline/test_hooks.h). Engram NVFP4 with RTN on 4 ranks:
# the two tables have shards of their own, so two ranks own them and every rank sends.
#  1. each rank's "back-pressure:" line (SHARDQ_LOG=debug): the peak of bytes waiting to
#     leave is within its limit plus what the worker already held when it stopped asking
#     (kItemsPerThread = 2 chunks per thread and the chunks of kQueuedBytes = 2 MiB of
#     source, pipeline/work.h); the write queue's peak within its limit plus the main
#     loop's chunk and a batch from each compute thread (as many);
#  2. the limits were reached (unsent on some rank, the queue on some owner), and that bound
#     is far below what those ranks sent or wrote: without it they would have held it all;
#  3. the bytes equal an undisturbed run's.
# shellcheck source=../resume/lib.sh
source "$(dirname "$0")/../resume/lib.sh"

JOB="$SHARDQ_SOURCE_DIR/jobs/demo-engram-nvfp4.toml"
make_fixture "$WORK/src" 10000 # 555K rows in the two tables
COMMON=(--src "$WORK/src" --set 'quant.method="rtn"' --set run.rows_per_chunk=8192 --set run.threads=1)

run_shardq 4 "$WORK/plain.log" "$JOB" "${COMMON[@]}" --dst "$WORK/plain" || fail "undisturbed: $(tail -3 "$WORK/plain.log")"

export SHARDQ_LOG=debug SHARDQ_TEST_WRITE_DELAY_MS=40
export SHARDQ_TEST_MAX_UNSENT_BYTES=$((512 << 10)) SHARDQ_TEST_MAX_QUEUED_BYTES=$((512 << 10))
start=$(now)
run_shardq 4 "$WORK/slow.log" "$JOB" "${COMMON[@]}" --dst "$WORK/slow" || fail "slow owner: $(tail -3 "$WORK/slow.log")"
note "with the slow owner: $(seconds_since "$start") s"
unset SHARDQ_LOG SHARDQ_TEST_WRITE_DELAY_MS SHARDQ_TEST_MAX_UNSENT_BYTES SHARDQ_TEST_MAX_QUEUED_BYTES
same_output "$WORK/plain" "$WORK/slow"
echo "same bytes with a slow owner and small limits"

grep 'back-pressure:' "$WORK/slow.log"
python3 - "$WORK/slow.log" <<'PY' || fail "back-pressure did not hold (the lines above)"
import re, sys
pattern = re.compile(r"\[rank (\d+)\] \[debug\] back-pressure: peak unsent (\d+) B \(limit (\d+) B, largest message (\d+) B, "
                     r"(\d+) B sent\), peak write queue (\d+) B \(limit (\d+) B, largest chunk (\d+) B\)")
ranks = {int(m[1]): [int(x) for x in m.groups()[1:]] for m in map(pattern.search, open(sys.argv[1])) if m}
assert sorted(ranks) == [0, 1, 2, 3], f"back-pressure lines of ranks {sorted(ranks)}"
threads, items_per_thread, queued_source_bytes = 1, 2, 2 << 20
source_chunk_bytes = 8192 * 256  # rows_per_chunk rows of the FP8 table; scales aside
held_chunks = threads * items_per_thread + -(-queued_source_bytes // source_chunk_bytes)
engaged = []
for rank, (unsent, unsent_limit, message, sent, queue, queue_limit, chunk) in sorted(ranks.items()):
    unsent_bound = unsent_limit + held_chunks * message
    queue_bound = queue_limit + (1 + threads * held_chunks) * chunk  # the main loop's chunk, each thread's batch
    assert unsent <= unsent_bound, f"rank {rank}: {unsent} B unsent at once, above {unsent_bound}"
    assert queue <= queue_bound, f"rank {rank}: {queue} B queued at once, above {queue_bound}"
    if unsent >= unsent_limit:
        engaged.append((sent, unsent_bound, rank))
    print(f"rank {rank}: unsent peak {unsent} <= {unsent_bound} of {sent} sent; queue peak {queue} <= {queue_bound}")
assert engaged, "no rank reached its unsent limit: the owners were not slow enough to show anything"
sent, bound, rank = max(engaged)
assert sent >= 3 * bound, f"rank {rank} sent {sent} B, too little to show the limit of {bound}"
assert any(queue >= queue_limit for _, _, _, _, queue, queue_limit, _ in ranks.values()), "no write queue reached its limit"
PY
echo "every rank held its unsent chunks and its write queue to their limits"
