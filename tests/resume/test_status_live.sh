#!/usr/bin/env bash
# `shardq status CHECKPOINT` from another shell while a run (2 ranks) replaces the
# checkpoint several times a second: every call exits 0, shows chunks done/total, and
# the done count never goes down, and it says the run holds the checkpoint (and, after,
# that none does); the run itself is not disturbed.
source "$(dirname "$0")/lib.sh"
command -v mpirun >/dev/null || { echo "no mpirun"; exit 77; }

make_fixture "$WORK/src" 2000 # the full-size miniature
DST="$WORK/out"
CKPT="$DST/.shardq/checkpoint.h5"
# Paced (10 ms per chunk of 128 rows): a run of several seconds however fast the machine.
SHARDQ_TEST_CHUNK_DELAY_MS=10 mpirun -np 2 "$SHARDQ_BIN" run "$JOB" --src "$WORK/src" --dst "$DST" --set quant.method=mse \
  --set run.rows_per_chunk=128 >"$WORK/run.log" 2>&1 &
RUN=$!
STARTED_PIDS+=("$RUN")

calls=0 last=0 total="" partial=0 running=0
while kill -0 "$RUN" 2>/dev/null; do
  if [[ -f "$CKPT" || -f "$CKPT.prev" ]]; then
    "$SHARDQ_BIN" status "$CKPT" >"$WORK/status.txt" 2>&1 || fail "status exited $? during the run: $(cat "$WORK/status.txt")"
    line=$(grep -E '^  total +[0-9]+/[0-9]+ chunks' "$WORK/status.txt") || fail "no chunk totals: $(cat "$WORK/status.txt")"
    read -r done_now total < <(sed -E 's#^ *total +([0-9]+)/([0-9]+) chunks.*#\1 \2#' <<<"$line")
    ((done_now >= last)) || fail "done chunks went down from $last to $done_now"
    kill -0 "$RUN" 2>/dev/null && { calls=$((calls + 1)); last=$done_now; }
    ((done_now > 0 && done_now < total)) && partial=$((partial + 1))
    grep -q "^run: running: host $(hostname), pid " "$WORK/status.txt" && running=$((running + 1))
  fi
  sleep 0.1
done
wait "$RUN" || fail "the run failed while status was called: $(tail -3 "$WORK/run.log")"
echo "$calls status calls during the run ($partial mid-way); last showed $last/$total chunks done"
((calls >= 3)) || fail "only $calls status calls happened during the run"
((partial >= 2)) || fail "only $partial status calls saw a part of the chunks done"
((running >= 2)) || fail "only $running status calls said a run holds the checkpoint"
"$SHARDQ_BIN" status "$CKPT" >"$WORK/final.txt" || fail "final status failed"
grep -qE "^  total +$total/$total chunks" "$WORK/final.txt" || fail "final status is not complete"
grep -q "^run: not running (no run holds $CKPT.lock)" "$WORK/final.txt" || fail "final status: $(grep '^run:' "$WORK/final.txt")"
echo "PASS: status reads a live checkpoint"
