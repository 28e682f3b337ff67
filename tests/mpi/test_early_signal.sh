#!/usr/bin/env bash
# A stop signal during start-up (pipeline/main.cpp, signals.h): SIGTERM, SIGINT or SIGUSR1
# at 0-600 ms after the process can catch it (its handlers go in before the shared
# libraries' constructors, so these instants cover the constructors, the CLI, MPI_Init,
# the plan, the lock and rank 0's setup) ends the run with exit 75 (or 0 if it had
# finished; the runs are paced, and up to 100 ms in they cannot have: 75), never 143, with
# no error; the lock is gone and the same command then
# completes to the bytes of an uninterrupted run. Without mpirun, and on 2 ranks under
# mpirun with every rank signalled (what srun does).
# Only exec and dynamic loading come before the handlers (~20 ms on a loaded 2-core VM):
# a signal then kills the process the default way, before it has written anything.
source "$(dirname "$0")/../resume/lib.sh"
command -v mpirun >/dev/null || { echo "no mpirun"; exit 77; }

make_fixture "$WORK/src"
COMMON=(--src "$WORK/src" --set quant.method=rtn --set run.rows_per_chunk=256)
REF="$WORK/ref"
run_shardq 0 "$WORK/ref.log" "$JOB" "${COMMON[@]}" --dst "$REF" || fail "uninterrupted run failed: $(tail -5 "$WORK/ref.log")"

# catching PID: the process runs shardq and has its TERM, INT and USR1 handlers (bits 14,
# 1 and 9 of SigCgt). The shell that starts it catches those too until its exec (it has an
# EXIT trap), and exec swaps the exe link a moment before it resets the handlers: so the
# exe is read first, and a mask that also catches HUP (bit 0, which shardq never catches)
# is the shell's. The status is read without a fork while the handlers are not in.
catching() {
  local key mask
  [[ $(readlink "/proc/$1/exe" 2>/dev/null) == "$SHARDQ_REAL" ]] || return 1
  while read -r key mask; do
    [[ $key == SigCgt: ]] && (((16#$mask & 0x4203) == 0x4202)) && return 0
  done 2>/dev/null <"/proc/$1/status"
  return 1
}
SHARDQ_REAL=$(readlink -f "$SHARDQ_BIN")

# The processes to signal: shardq itself, or every rank under mpirun once all can catch.
signal_targets() {
  local pid=$1 np=$2 ranks rank deadline=$((SECONDS + 30))
  while ((SECONDS < deadline)); do
    ranks=$pid
    ((np > 0)) && ranks=$(rank_pids "$pid")
    if [[ $(wc -w <<<"$ranks") == $((np > 0 ? np : 1)) ]]; then
      for rank in $ranks; do catching "$rank" || continue 2; done
      echo "${ranks//$'\n'/ }" # one line: read -ra takes the first line only
      return 0
    fi
    kill -0 "$pid" 2>/dev/null || return 1
  done
  return 1
}

CASES=0
STOPPED=0 # runs that the signal stopped (exit 75): a run that ignored it would finish with 0
# early_case NP SIGNAL DELAY_MS
early_case() {
  local np=$1 signal=$2 delay=$3
  CASES=$((CASES + 1))
  local name="np${np}_${signal}_${delay}ms_$CASES"
  local dst="$WORK/$name" log="$WORK/$name.log"
  # Paced (5 ms more a chunk): the work outlasts the early instants however
  # fast the machine, so those signals must stop it. The rerun is not paced.
  # shellcheck disable=SC2046,SC2091 # the command line of lib.sh, split into words
  SHARDQ_TEST_CHUNK_DELAY_MS=5 $(shardq_cmd "$np" "$JOB" "${COMMON[@]}" --dst "$dst") >"$log" 2>&1 &
  local pid=$!
  STARTED_PIDS+=("$pid")
  local found targets
  found=$(signal_targets "$pid" "$np") || fail "$name: no process could catch signals: $(tail -3 "$log")"
  read -ra targets <<<"$found"
  ((delay == 0)) || sleep "$(printf '0.%03d' "$delay")"
  kill -s "$signal" "${targets[@]}" 2>/dev/null || true # a rank that has finished already
  local rc=0
  wait "$pid" || rc=$?
  [[ $rc == 75 || $rc == 0 ]] || fail "$name: exit $rc (expected 75, or 0 if finished): $(tail -5 "$log")"
  # Up to 100 ms after the handlers are in, the paced work cannot have ended: it must stop.
  ((delay > 100 || rc == 75)) || fail "$name: the signal $delay ms into start-up did not stop the run (exit $rc)"
  grep -q "shardq: error" "$log" && fail "$name: an error instead of a stop: $(grep 'shardq: error' "$log")"
  [[ ! -e $dst/.shardq/run.lock ]] || fail "$name: the lock outlived the run"
  local how="exit $rc"
  if ((rc == 75)); then
    STOPPED=$((STOPPED + 1))
    run_shardq "$np" "$log.rerun" "$JOB" "${COMMON[@]}" --dst "$dst" || fail "$name: the rerun failed: $(tail -5 "$log.rerun")"
    how+=", rerun complete"
  fi
  same_output "$REF" "$dst"
  echo "$name: SIG$signal to ${#targets[@]} process(es) $delay ms after they could catch it: $how, same bytes"
  rm -rf "$dst"
}

SIGNALS=(TERM INT USR1)
i=0
# On this VM MPI_Init ends 300-450 ms after the handlers are in, setup ~10 ms later, and
# the paced work takes ~0.5 s more.
for delay in 0 10 30 60 100 200 350 450 0 10 30 60 100 200; do
  early_case 0 "${SIGNALS[i++ % 3]}" "$delay"
done
for delay in 0 30 100 300; do
  early_case 2 "${SIGNALS[i++ % 3]}" "$delay"
done
echo "PASS: $CASES stops during start-up ($STOPPED stopped with 75, the rest had finished), each rerun to the same bytes"
