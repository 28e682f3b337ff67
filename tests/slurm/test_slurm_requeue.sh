#!/usr/bin/env bash
# slurm/shardq.sbatch end to end on a throwaway single-node Slurm: the demo job is
# submitted with `sbatch --wait`, warned with USR1 mid-run as Slurm does before a time
# limit, checkpoints, requeues itself once, resumes, and must produce the same bytes as
# a direct `mpirun` run. Exit 77 (skip) when Slurm cannot start here.
#
# Env: SHARDQ_BIN, SHARDQ_SOURCE_DIR (from ctest); RANKS (default 2); LAUNCHER (srun
# or mpirun, default srun, passed to the batch script).
set -euo pipefail

: "${SHARDQ_BIN:?set SHARDQ_BIN to the shardq binary}"
: "${SHARDQ_SOURCE_DIR:?set SHARDQ_SOURCE_DIR to the source tree}"
SHARDQ_BIN=$(realpath "$SHARDQ_BIN") # the batch job runs in another folder
readonly RANKS=${RANKS:-2}
export LAUNCHER=${LAUNCHER:-srun}
source "$SHARDQ_SOURCE_DIR/scripts/mpi_env.sh"
# shellcheck source=common.sh
source "$SHARDQ_SOURCE_DIR/tests/slurm/common.sh"
source "$SHARDQ_SOURCE_DIR/tests/slurm/local_slurm.sh"

readonly job_file=$SHARDQ_SOURCE_DIR/jobs/demo-engram-nvfp4.toml
readonly report_name=engram-nvfp4.json # differs between runs (times); not compared
# Many small chunks and the most MSE candidates, so the run (~10 s on 2 idle cores)
# outlasts the polling and the signal by a wide margin; interrupt at the first
# checkpoint that shows progress.
readonly overrides=(--set quant.method=mse --set quant.mse_candidates=16 --set run.rows_per_chunk=256)
# Each chunk takes 20 ms longer, so the interrupt lands mid-run however fast the machine is.
export SHARDQ_TEST_CHUNK_DELAY_MS=20
readonly interrupt_after_chunks=1

tmp=$(mktemp -d /tmp/shardq-slurm-test.XXXXXX)
sbatch_pid=""

fail() {
  echo "FAIL: $*"
  for log in "$tmp/job.log" "$tmp/slurm/slurmctld.log" "$tmp/slurm/slurmd.log"; do
    [ -f "$log" ] && { echo "--- $log (tail)"; tail -n 40 "$log"; }
  done
  exit 1
}

cleanup() {
  set +e # every step runs, even after one fails
  [ -n "$sbatch_pid" ] && kill "$sbatch_pid" 2>/dev/null
  [ -n "${job_id:-}" ] && scancel "$job_id" 2>/dev/null
  local_slurm_stop
  rm -rf "$tmp"
}
trap cleanup EXIT

chunks_done() {
  "$SHARDQ_BIN" status "$1" 2>/dev/null | awk '$1 == "total" { split($2, n, "/"); print n[1] }'
}

chunks_total() {
  "$SHARDQ_BIN" status "$1" 2>/dev/null | awk '$1 == "total" { split($2, n, "/"); print n[2] }'
}

job_state() { squeue -h -j "$1" -o %T 2>/dev/null; }

# sha256 of every output file except the report and the checkpoint folder, by name.
if ! local_slurm_start "$tmp/slurm" >"$tmp/slurm-start.log" 2>&1; then
  echo "SKIP: Slurm cannot start here:"
  cat "$tmp/slurm-start.log"
  exit 77
fi
echo "local Slurm up (SLURM_CONF=$SLURM_CONF)"

"$SHARDQ_BIN" fixture --preset dsv41-mini --out "$tmp/src" >/dev/null

echo "== reference: mpirun -np $RANKS"
mpirun -np "$RANKS" "$SHARDQ_BIN" run "$job_file" --src "$tmp/src" --dst "$tmp/ref" "${overrides[@]}" \
  >"$tmp/ref.log" 2>&1 || { cat "$tmp/ref.log"; fail "the direct mpirun run failed"; }

echo "== sbatch --wait ($LAUNCHER, $RANKS ranks on 1 node)"
export SHARDQ_BIN
sbatch --parsable --wait --nodes=1 --ntasks-per-node="$RANKS" --time=10 \
  --chdir="$tmp" --output="$tmp/job.log" \
  "$SHARDQ_SOURCE_DIR/slurm/shardq.sbatch" "$job_file" --src "$tmp/src" --dst "$tmp/out" "${overrides[@]}" \
  >"$tmp/sbatch.out" 2>&1 &
sbatch_pid=$!

wait_until 30 "the job id" grep -qE '^[0-9]+' "$tmp/sbatch.out"
job_id=$(grep -oE '^[0-9]+' "$tmp/sbatch.out" | head -n 1)
checkpoint=$tmp/out/.shardq/checkpoint.h5

chunks_reached() {
  kill -0 "$sbatch_pid" 2>/dev/null || fail "job $job_id ended before it could be interrupted: $(cat "$tmp/sbatch.out")"
  (($(chunks_done "$checkpoint" || echo 0) >= interrupt_after_chunks))
}
wait_until 120 "$interrupt_after_chunks chunks in $checkpoint" chunks_reached
[ "$(job_state "$job_id")" = RUNNING ] || fail "job $job_id is not running any more; the run is too short to interrupt"

echo "== USR1 to the batch shell of job $job_id (as --signal=B:USR1 does before a time limit)"
scancel -s USR1 -b "$job_id"

job_pending() { [ "$(job_state "$job_id")" = PENDING ]; }
wait_until 60 "job $job_id to be requeued" job_pending
done_at_requeue=$(chunks_done "$checkpoint")
total=$(chunks_total "$checkpoint")
echo "requeued with $done_at_requeue/$total chunks in the checkpoint:"
"$SHARDQ_BIN" status "$checkpoint"
((done_at_requeue > 0 && done_at_requeue < total)) \
  || fail "expected a partial checkpoint at the requeue, got $done_at_requeue/$total"
# A requeued job waits cred_expire seconds before it may start again; skip the wait, but
# not to the second of the requeue: the node also refuses a credential made in the second
# it revoked the old one ("Job credential revoked"), and the job would end there.
scontrol update jobid="$job_id" starttime=now+3

set +e
wait "$sbatch_pid"
sbatch_code=$?
set -e
sbatch_pid=""
# sbatch --wait (Slurm 22.05) can return 1 at the requeue itself, when its poll lands on the
# moment the job reads as cancelled for the requeue, before it is pending again. Seen once
# in CI with the mpirun launcher. The job's own final state decides, not sbatch's code.
job_final_state() { scontrol show job -o "$job_id" 2>/dev/null | grep -oE 'JobState=[A-Z_]+' | cut -d= -f2; }
job_completed() { [ "$(job_final_state)" = COMPLETED ]; }
wait_until 180 "job $job_id to complete after its restart (sbatch --wait exited $sbatch_code)" job_completed

echo "== checks"
restarts=$(grep -c 'SLURM_RESTART_COUNT=' "$tmp/job.log" || true)
first=$(grep -c 'SLURM_RESTART_COUNT=0$' "$tmp/job.log" || true)
second=$(grep -c 'SLURM_RESTART_COUNT=1$' "$tmp/job.log" || true)
((restarts == 2 && first == 1 && second == 1)) \
  || fail "expected one start and exactly one restart in the log, got $restarts starts ($first at 0, $second at 1)"
grep -q "$LAUNCHER exited 75" "$tmp/job.log" || fail "the first run did not exit 75"
grep -q 'resuming from' "$tmp/job.log" || fail "the restarted run did not resume from the checkpoint"
(($(chunks_done "$checkpoint") == total)) || fail "the checkpoint is not complete after the restart"

output_digest "$tmp/ref" >"$tmp/ref.sha256"
output_digest "$tmp/out" >"$tmp/out.sha256"
[ -s "$tmp/ref.sha256" ] || fail "no reference output"
diff "$tmp/ref.sha256" "$tmp/out.sha256" || fail "the requeued run's output differs from the direct run's"
echo "--- job log"
cat "$tmp/job.log"
echo "PASS: $(wc -l <"$tmp/out.sha256") files byte-identical after one requeue at $done_at_requeue/$total chunks"
