#!/usr/bin/env bash
# One run per output folder (pipeline/run_lock.h: <dst>/.shardq/run.lock, held by rank 0):
#   - a second run on the dst of a run under way (1 rank or 2, its own --checkpoint or
#     not), or on another dst with the first run's --checkpoint, is refused at once,
#     before any work, with one line naming the holder's host, pid, since when and the
#     lock; the first run completes to the bytes of a run alone;
#   - a lock left by a SIGKILLed run, one naming a dead pid of this host, and one of
#     another host with no heartbeat for over 60 s are taken over with a warning, and the
#     run completes to the same bytes; another host's lock with a fresh heartbeat is
#     refused, saying in how many seconds it would be stale;
#   - the lock is gone after a complete run, and after a second stop signal 1.5 s after
#     the first (exit 75 at once, without the last flush); the next run then says nothing
#     of a stale lock. Two signals at once are one stop, flushed.
source "$(dirname "$0")/lib.sh"
command -v mpirun >/dev/null || { echo "no mpirun"; exit 77; }

make_fixture "$WORK/src"
COMMON=(--src "$WORK/src" --set quant.method=rtn --set run.rows_per_chunk=256)
REF="$WORK/ref"
start=$(now)
run_shardq 0 "$WORK/ref.log" "$JOB" "${COMMON[@]}" --dst "$REF" || fail "run alone failed: $(tail -5 "$WORK/ref.log")"
echo "run alone: $(seconds_since "$start") s"
HOST=$(hostname)
BOOT_ID=$(cat /proc/sys/kernel/random/boot_id)

# LOG: the one error line of a refused run.
error_line() {
  local lines
  lines=$(grep -c "shardq: error" "$1" || true)
  [[ $lines == 1 ]] || fail "expected one error line in $1, found $lines: $(tail -5 "$1")"
  grep "shardq: error" "$1"
}

# write_lock DST HOST PID AGE_S: a lock file as a run of HOST, last heartbeat AGE_S ago.
write_lock() {
  mkdir -p "$1/.shardq"
  printf 'host=%s\npid=%s\npid_start=1\nboot_id=%s\nsince=2026-01-31 12:00:03 +0000\n' "$2" "$3" "$BOOT_ID" \
    >"$1/.shardq/run.lock"
  touch -d "-$4 seconds" "$1/.shardq/run.lock"
}

# completes_after_take_over NAME REASON: the run takes the stale lock over, saying why.
completes_after_take_over() {
  local dst="$WORK/$1" log="$WORK/$1.log"
  run_shardq 0 "$log" "$JOB" "${COMMON[@]}" --dst "$dst" || fail "$1: the run failed: $(tail -5 "$log")"
  grep -q "taking over a stale lock: .*; $2" "$log" || fail "$1: no take-over line saying '$2': $(head -5 "$log")"
  echo "$1: $(grep -o 'taking over a stale lock: .*' "$log")"
  [[ ! -e $dst/.shardq/run.lock ]] || fail "$1: the lock outlived the run"
  same_output "$REF" "$dst"
}

# 1. A second run while the first (2 ranks, paced, its checkpoint elsewhere) is under way.
DST="$WORK/out"
CKPT="$WORK/scratch/checkpoint.h5"
# shellcheck disable=SC2046,SC2091 # the command line of lib.sh, split into words
SHARDQ_TEST_CHUNK_DELAY_MS=60 SHARDQ_LOG=debug $(shardq_cmd 2 "$JOB" "${COMMON[@]}" --dst "$DST" --checkpoint "$CKPT") \
  >"$WORK/first.log" 2>&1 &
FIRST=$!
STARTED_PIDS+=("$FIRST")
wait_for_log "$WORK/first.log" "$FIRST" "assign"
holder=$(rank_pid "$FIRST" 0) || fail "no rank 0 under mpirun $FIRST"
for lock in "$DST/.shardq/run.lock" "$CKPT.lock"; do
  grep -qx "pid=$holder" "$lock" || fail "$lock does not name rank 0 ($holder): $(cat "$lock")"
done

start=$(now)
rc=0
run_shardq 0 "$WORK/second.log" "$JOB" "${COMMON[@]}" --dst "$DST" || rc=$?
took=$(seconds_since "$start")
echo "second run on 1 rank: exit $rc after $took s"
((rc != 0 && rc != 75)) || fail "the second run exited $rc"
python3 -c "import sys; sys.exit(float(sys.argv[1]) > 15)" "$took" || fail "the refusal took $took s"
line=$(error_line "$WORK/second.log")
echo "$line"
for part in "is in use by another shardq run" "host $HOST" "pid $holder" "since $(date +%Y-)" \
  "running on this host" "lock $DST/.shardq/run.lock"; do
  grep -qF -- "$part" <<<"$line" || fail "the refusal does not say '$part': $line"
done
grep -qE "resuming|assign|tasks," "$WORK/second.log" && fail "the refused run did work: $(cat "$WORK/second.log")"

rc=0
run_shardq 2 "$WORK/third.log" "$JOB" "${COMMON[@]}" --dst "$DST" --checkpoint "$WORK/elsewhere/checkpoint.h5" || rc=$?
((rc != 0 && rc != 75)) || fail "a second run with its own checkpoint exited $rc"
grep -q "shardq: error: $DST is in use by another shardq run: host $HOST, pid $holder" "$WORK/third.log" ||
  fail "the run with its own checkpoint was not refused for the lock: $(tail -5 "$WORK/third.log")"
[[ ! -e $WORK/elsewhere/checkpoint.h5 ]] || fail "the refused run wrote its checkpoint"
echo "second run on 2 ranks with its own --checkpoint: exit $rc, refused"

rc=0
run_shardq 0 "$WORK/fourth.log" "$JOB" "${COMMON[@]}" --dst "$WORK/other" --checkpoint "$CKPT" || rc=$?
((rc != 0 && rc != 75)) || fail "a second run on the same checkpoint exited $rc"
line=$(error_line "$WORK/fourth.log")
grep -qF "$CKPT is in use by another shardq run: host $HOST, pid $holder, since" <<<"$line" ||
  fail "the run on the same checkpoint was not refused for its lock: $line"
[[ ! -e $WORK/other/.shardq/run.lock ]] || fail "the refused run left its dst lock"
echo "second run on another dst, the same --checkpoint: exit $rc, refused"

kill -0 "$FIRST" 2>/dev/null || fail "the first run ended before the others were refused: too fast a machine for the pacing"
rc=0
wait "$FIRST" || rc=$?
((rc == 0)) || fail "the first run failed (exit $rc): $(tail -5 "$WORK/first.log")"
[[ ! -e $DST/.shardq/run.lock && ! -e $CKPT.lock ]] || fail "the locks outlived the first run"
same_output "$REF" "$DST"
echo "first run: complete, same bytes as the run alone"

# 2. Stale locks.
# shellcheck disable=SC2046,SC2091 # the command line of lib.sh, split into words
SHARDQ_TEST_CHUNK_DELAY_MS=40 $(shardq_cmd 0 "$JOB" "${COMMON[@]}" --dst "$WORK/killed") >"$WORK/killed.first.log" 2>&1 &
victim=$!
STARTED_PIDS+=("$victim")
for _ in $(seq 1 200); do
  [[ -s $WORK/killed/.shardq/run.lock ]] && break
  sleep 0.05
done
kill -9 "$victim"
wait "$victim" 2>/dev/null || true
[[ -e $WORK/killed/.shardq/run.lock ]] || fail "no lock left by the SIGKILLed run"
completes_after_take_over killed "pid $victim is not running"

(exit 0) &
dead=$!
wait "$dead"
write_lock "$WORK/dead_pid" "$HOST" "$dead" 0
completes_after_take_over dead_pid "pid $dead is not running"

write_lock "$WORK/old_host" elsewhere.invalid 4242 90
completes_after_take_over old_host "no heartbeat for"

write_lock "$WORK/live_host" elsewhere.invalid 4242 5
rc=0
run_shardq 0 "$WORK/live_host.log" "$JOB" "${COMMON[@]}" --dst "$WORK/live_host" || rc=$?
((rc != 0 && rc != 75)) || fail "a live lock of another host was taken (exit $rc)"
line=$(error_line "$WORK/live_host.log")
grep -qE "host elsewhere.invalid, pid 4242, since .*; last heartbeat [0-9]+ s ago; stale after 60 s without one, in [0-9]+ s; lock " <<<"$line" ||
  fail "the refusal does not say when the lock would be stale: $line"
echo "live_host: $line"

# 3. Two signals at once (GNU `timeout` signals the process and then its group) are one
#    stop: flushed, exit 75. A second one 1.5 s later exits at once, saying so, and still
#    removes the lock (the chunk in its 10 s test delay keeps the first stop from ending
#    before it).
# shellcheck disable=SC2046,SC2091 # the command line of lib.sh, split into words
SHARDQ_TEST_CHUNK_DELAY_MS=40 $(shardq_cmd 0 "$JOB" "${COMMON[@]}" --dst "$WORK/together") >"$WORK/together.log" 2>&1 &
together=$!
STARTED_PIDS+=("$together")
wait_for_log "$WORK/together.log" "$together" "ranks x"
kill -TERM "$together"
kill -INT "$together" # another kind: two of one kind may merge into one while pending
rc=0
wait "$together" || rc=$?
((rc == 75)) || fail "two signals at once gave exit $rc: $(tail -3 "$WORK/together.log")"
grep -q "interrupted: checkpoint" "$WORK/together.log" || fail "two signals at once skipped the flush: $(tail -3 "$WORK/together.log")"
grep -q "second stop signal" "$WORK/together.log" && fail "two signals at once were taken for two stops"
run_shardq 0 "$WORK/together.resume.log" "$JOB" "${COMMON[@]}" --dst "$WORK/together" || fail "the rerun after two signals failed"
same_output "$REF" "$WORK/together"
echo "SIGTERM and SIGINT at once: one stop, flushed, exit 75, rerun to the same bytes"

# shellcheck disable=SC2046,SC2091 # the command line of lib.sh, split into words
SHARDQ_TEST_CHUNK_DELAY_MS=10000 SHARDQ_LOG=debug $(shardq_cmd 0 "$JOB" "${COMMON[@]}" --dst "$WORK/twice") >"$WORK/twice.log" 2>&1 &
twice=$!
STARTED_PIDS+=("$twice")
wait_for_log "$WORK/twice.log" "$twice" "assign 2 task" # an encode item (reductions have no delay)
sleep 0.5 # computed, in its delay
kill -TERM "$twice"
sleep 1.5
kill -INT "$twice"
rc=0
wait "$twice" || rc=$?
((rc == 75)) || fail "a second signal gave exit $rc: $(tail -3 "$WORK/twice.log")"
grep -q "shardq: a second stop signal: exiting at once, without the final checkpoint save" "$WORK/twice.log" ||
  fail "the second signal's exit said nothing: $(tail -3 "$WORK/twice.log")"
grep -q "interrupted: checkpoint" "$WORK/twice.log" && fail "the second signal did not exit at once"
[[ ! -e $WORK/twice/.shardq/run.lock ]] || fail "the lock outlived the second signal"
run_shardq 0 "$WORK/twice.resume.log" "$JOB" "${COMMON[@]}" --dst "$WORK/twice" || fail "the rerun after a second signal failed"
grep -q "stale lock" "$WORK/twice.resume.log" && fail "the rerun found a stale lock: $(grep 'stale lock' "$WORK/twice.resume.log")"
same_output "$REF" "$WORK/twice"
echo "a second signal 1.5 s later: exit 75 at once, said so, lock removed, rerun to the same bytes"
echo "PASS: one run per output; stale locks taken over; locks removed at every end"
