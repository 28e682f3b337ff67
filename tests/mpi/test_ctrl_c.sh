#!/usr/bin/env bash
# What a user reads when stopping a bare `mpirun -np 4 shardq run` (docs/cluster.md
# "Signals and launchers"):
#   - Ctrl-C: the terminal sends SIGINT to mpirun's process group (Open MPI puts the ranks
#     in groups of their own); mpirun sends the ranks SIGTERM, then SIGKILL, and exits 1
#     without a banner. The ranks flush; the one line the user reads from shardq says the
#     checkpoint is saved and to run the same command to resume;
#   - the planned interrupt (scripts/demo.sh): SIGUSR1 to `mpirun --quiet` exits 75
#     without Open MPI's "returned a non-zero exit code ... aborted" banner.
# Neither shows that banner or a stop line from any other rank, and both resume to the end.
# The runs log at info level: from the INT until its KILL mpirun reads no rank output, so a
# rank that writes more than the terminal buffer holds (the debug log's assignment lines
# did) blocks on it until it is killed, before its stop line.
source "$(dirname "$0")/../resume/lib.sh"
command -v mpirun >/dev/null || { echo "no mpirun"; exit 77; }
command -v setsid >/dev/null || { echo "no setsid"; exit 77; }

make_fixture "$WORK/src" 2000 # the full-size miniature: the run is still under way when stopped
RESUME_LINE="interrupted: checkpoint .* is saved; run the same command to resume"

# stop_run NAME HOW [MPIRUN_OPTION]: runs the job on 4 ranks, paced, in a session of its own
# (mpirun leads its process group, as in a terminal), and once quantize work is under way
# stops it: HOW = ctrl-c (SIGINT to the process group) or usr1 (SIGUSR1 to mpirun).
# Sets STOP_RC to mpirun's exit code; the output is $WORK/NAME.log.
stop_run() {
  local name=$1 how=$2 option=${3:-} log="$WORK/$1.log"
  SHARDQ_TEST_CHUNK_DELAY_MS=60 setsid mpirun $option -np 4 "$SHARDQ_BIN" run "$JOB" \
    --src "$WORK/src" --dst "$WORK/$name" --set quant.method=mse --set run.rows_per_chunk=128 >"$log" 2>&1 &
  local pid=$!
  STARTED_PIDS+=("$pid")
  wait_for_done_chunks "$WORK/$name/.shardq/checkpoint.h5" "$pid" 8
  [[ "$(ps -o pgid= -p "$pid" | tr -d ' ')" == "$pid" ]] || fail "$name: mpirun does not lead its process group"
  case $how in
    ctrl-c) kill -INT -- "-$pid" ;;
    usr1) kill -USR1 "$pid" ;;
  esac
  STOP_RC=0
  wait "$pid" || STOP_RC=$?
}

# check_one_clear_line NAME: the resume line once, from rank 0; no banner; no other rank speaks.
check_one_clear_line() {
  local log="$WORK/$1.log"
  local lines
  lines=$(grep -c "$RESUME_LINE" "$log" || true)
  [[ $lines == 1 ]] || fail "$1: $lines lines say the checkpoint is saved, expected 1: $(tail -8 "$log")"
  grep -q "\[rank 0\] \[warning\] $RESUME_LINE" "$log" || fail "$1: the resume line is not rank 0's"
  if grep -E "non-zero exit code|Per user-direction|mpirun noticed|^-{20,}" "$log"; then
    fail "$1: Open MPI's banner is shown"
  fi
  if grep -E "\[rank [1-9][0-9]*\] \[(warning|error)\]" "$log"; then
    fail "$1: ranks other than 0 print stop lines"
  fi
  "$SHARDQ_BIN" status "$WORK/$1/.shardq/checkpoint.h5" >/dev/null || fail "$1: shardq status cannot read the checkpoint"
}

resume() {
  run_shardq 4 "$WORK/$1.resume.log" "$JOB" --src "$WORK/src" --dst "$WORK/$1" --set quant.method=mse \
    --set run.rows_per_chunk=128 || fail "$1: the resume failed: $(tail -5 "$WORK/$1.resume.log")"
  grep -q "resuming from" "$WORK/$1.resume.log" || fail "$1: the resume did not load the checkpoint"
}

stop_run ctrl_c ctrl-c
# Open MPI 4.1 exits 1 for a job it ended on SIGINT, whatever the ranks returned.
[[ $STOP_RC == 1 || $STOP_RC == 75 ]] || fail "ctrl_c: mpirun exited $STOP_RC: $(tail -5 "$WORK/ctrl_c.log")"
check_one_clear_line ctrl_c
resume ctrl_c
echo "ctrl_c: mpirun exited $STOP_RC, one line from rank 0, no banner, resumed"

stop_run usr1_quiet usr1 --quiet
[[ $STOP_RC == 75 ]] || fail "usr1_quiet: mpirun exited $STOP_RC, expected 75: $(tail -5 "$WORK/usr1_quiet.log")"
check_one_clear_line usr1_quiet
resume usr1_quiet
echo "usr1_quiet: mpirun --quiet exited 75, one line from rank 0, no banner, resumed"
echo "PASS: a stopped mpirun run shows one line saying how to resume, and resumes"
