#!/usr/bin/env bash
# slurm/shardq.sbatch's own signal and exit-code logic, with stand-ins for srun and
# scontrol first in PATH (the Slurm daemons are test_slurm_requeue.sh's part):
#  1. TERM to the batch shell and to the launcher, which checkpoints and exits 75 within
#     TERM_GRACE_S: the script logs the launcher's 75 (it read 143, the status of its own
#     interrupted `wait`), does not requeue (a TERM is scancel or preemption), exits 75;
#  2. USR1 (the warning before the time limit): passed to the launcher, which exits 75:
#     requeued once, exit 75;
#  3. the launcher fails (exit 1) with no signal: no requeue, exit 1;
#  4. TERM to the batch shell only, the launcher ignoring it: after TERM_GRACE_S the script
#     sends USR1, the launcher exits 75, no requeue;
#  5. USR1, then the time limit's TERM (to the shell and the launcher) while the launcher
#     is still flushing: no second USR1 from the script, requeued once, exit 75.
set -uo pipefail
: "${SHARDQ_SOURCE_DIR:?}"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

mkdir "$work/bin"
# srun stand-in: records its signals; on TERM or USR1 exits 75 after STUB_FLUSH_S (0.3 s, the flush),
# unless STUB_IGNORE_TERM; STUB_EXIT: exit at once with that code.
cat >"$work/bin/srun" <<'EOF'
#!/usr/bin/env bash
echo $$ >"$STUB_DIR/srun.pid"
[ -n "${STUB_EXIT:-}" ] && exit "$STUB_EXIT"
stop() { echo "$1" >>"$STUB_DIR/srun.signals"; sleep "${STUB_FLUSH_S:-0.3}"; exit 75; }
trap 'stop USR1' USR1
if [ -n "${STUB_IGNORE_TERM:-}" ]; then trap 'echo TERM-ignored >>"$STUB_DIR/srun.signals"' TERM; else trap 'stop TERM' TERM; fi
for _ in $(seq 300); do sleep 0.1; done
exit 0
EOF
cat >"$work/bin/scontrol" <<'EOF'
#!/usr/bin/env bash
echo "$*" >>"$STUB_DIR/scontrol.calls"
EOF
chmod +x "$work/bin/srun" "$work/bin/scontrol"

# run_case NAME SIGNAL_PLAN: runs the batch script in the background, waits for the srun
# stand-in, then SIGNAL_PLAN (a function of BATCH_PID and SRUN_PID); sets RC and LOG.
run_case() {
  local name=$1 plan=$2
  export STUB_DIR="$work/$name"
  mkdir -p "$STUB_DIR"
  LOG="$STUB_DIR/log"
  PATH="$work/bin:$PATH" SLURM_JOB_ID=42 SLURM_NTASKS=1 SLURM_CPUS_ON_NODE=2 SHARDQ_BIN=/bin/true TERM_GRACE_S=2 \
    bash "$SHARDQ_SOURCE_DIR/slurm/shardq.sbatch" job.toml >"$LOG" 2>&1 &
  BATCH_PID=$!
  for _ in $(seq 100); do [ -s "$STUB_DIR/srun.pid" ] && break; sleep 0.05; done
  SRUN_PID=$(cat "$STUB_DIR/srun.pid" 2>/dev/null || echo 0)
  sleep 0.2 # the script is in its wait
  "$plan"
  RC=0
  wait "$BATCH_PID" || RC=$?
  echo "$name: exit $RC; $(grep -c . "$STUB_DIR/scontrol.calls" 2>/dev/null || echo 0) requeue(s); $(grep -o 'srun exited .*' "$LOG")"
}
requeues() { grep -c requeue "$STUB_DIR/scontrol.calls" 2>/dev/null || echo 0; }

term_both() { kill -TERM "$BATCH_PID" "$SRUN_PID"; }
run_case term term_both
((RC == 75)) || fail "term: exit $RC, 75 expected"
grep -q "srun exited 75 (checkpointed, resumable)" "$LOG" || fail "term: the launcher's 75 not logged: $(cat "$LOG")"
(($(requeues) == 0)) || fail "term: requeued after a TERM"

usr1_batch() { kill -USR1 "$BATCH_PID"; }
run_case usr1 usr1_batch
((RC == 75)) || fail "usr1: exit $RC, 75 expected"
grep -qx USR1 "$STUB_DIR/srun.signals" || fail "usr1: USR1 not passed to the launcher"
(($(requeues) == 1)) || fail "usr1: $(requeues) requeues, 1 expected"

none() { :; }
STUB_EXIT=1 run_case error none
((RC == 1)) || fail "error: exit $RC, 1 expected"
(($(requeues) == 0)) || fail "error: requeued after a failure"

term_batch() { kill -TERM "$BATCH_PID"; }
STUB_IGNORE_TERM=1 run_case grace term_batch
((RC == 75)) || fail "grace: exit $RC, 75 expected"
grep -qx USR1 "$STUB_DIR/srun.signals" || fail "grace: no USR1 to the launcher after TERM_GRACE_S"
(($(requeues) == 0)) || fail "grace: requeued after a TERM"

usr1_then_term() {
  kill -USR1 "$BATCH_PID"
  sleep 0.5 # the launcher is flushing
  kill -TERM "$BATCH_PID" "$SRUN_PID"
}
STUB_FLUSH_S=1.5 run_case limit usr1_then_term
((RC == 75)) || fail "limit: exit $RC, 75 expected"
[[ $(grep -c USR1 "$STUB_DIR/srun.signals") == 1 ]] || fail "limit: the launcher got USR1 $(grep -c USR1 "$STUB_DIR/srun.signals") times"
(($(requeues) == 1)) || fail "limit: $(requeues) requeues after USR1 then TERM, 1 expected"

((failures == 0)) || { echo "test_sbatch_signals: $failures failures"; exit 1; }
echo "PASS: the batch script logs and returns the launcher's status after TERM and USR1, and requeues after USR1 only (TERM following it or not)"
