#!/usr/bin/env bash
# slurm/shardq.sbatch with its own defaults (four nodes, one rank per node, srun
# --mpi=pmix) on a Slurm of four nodes, one slurmd per test bed host: `scancel -b -s
# USR1` mid-run (what --signal=B:USR1@300 does before the time limit) checkpoints,
# requeues the job, and the rerun resumes to the bytes of a single-rank run.
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"

# ~400 chunks at 100 ms more each: mid-run when the signal comes, whatever the box.
readonly overrides=(--set quant.method=mse --set run.rows_per_chunk=256)
readonly interrupt_after_chunks=20
export SHARDQ_TEST_CHUNK_DELAY_MS=100 # sbatch passes the environment to the ranks
# What sparks.sh sets for the ranks; under Slurm the site's environment does it.
export OMPI_MCA_btl_tcp_if_include=$SPARK_IFNAME OMPI_MCA_oob_tcp_if_include=$SPARK_IFNAME

cluster_up slurm
"$SHARDQ_BIN" fixture --preset dsv41-mini --out "$WORK/src" >/dev/null
SHARDQ_TEST_CHUNK_DELAY_MS=0 run_shardq 0 "$WORK/ref.log" "$JOB" --src "$WORK/src" "${overrides[@]}" \
  --dst "$WORK/ref" || fail "single-rank run: $(tail -3 "$WORK/ref.log")"
checkpoint=$WORK/out/.shardq/checkpoint.h5

chunks_done() {
  "$SHARDQ_BIN" status "$checkpoint" 2>/dev/null | awk '$1 == "total" { split($2, n, "/"); done = n[1] } END { print done + 0 }'
}
job_state() { scontrol show job -o "$job_id" 2>/dev/null | grep -oE 'JobState=[A-Z_]+' | cut -d= -f2; }
wait_for() {
  local seconds=$1 what=$2
  shift 2
  testbed_wait_for "$seconds" "$@" && return
  cat "$log"
  tail -n 20 "$TESTBED_STATE"/slurm/slurm*.log
  # Why the job waits (its Reason) and what the nodes say (a drained or completing node holds it back).
  scontrol show job "$job_id" | grep -E 'JobState|BeginTime|NodeList'
  sinfo -N -o '%N %T %E'
  rank_stacks
  fail "no $what after $seconds s (job $job_id: $(job_state))"
}
running() { [ "$(job_state)" = RUNNING ]; }
progressed() { running && (($(chunks_done) >= interrupt_after_chunks)); }
pending() { [ "$(job_state)" = PENDING ]; }
completed() {
  case "$(job_state)" in
    COMPLETED) return 0 ;;
    FAILED | CANCELLED | NODE_FAIL) scontrol show job "$job_id"; return 2 ;; # testbed_wait_for stops
    *) return 1 ;;
  esac
}

echo "== sbatch slurm/shardq.sbatch (its defaults) from $WORK"
cd "$WORK" || fail "no work folder"
job_id=$(sbatch --parsable "$SHARDQ_SOURCE_DIR/slurm/shardq.sbatch" "$JOB" --src "$WORK/src" \
  "${overrides[@]}" --dst "$WORK/out") || fail "sbatch refused the job"
log=$WORK/shardq-shardq-$job_id.log
wait_for 120 "progress in $checkpoint" progressed

echo "== scancel -b -s USR1 $job_id at $(chunks_done) chunks"
scancel -b -s USR1 "$job_id"
wait_for 60 "requeue" pending
at_requeue=$(chunks_done)
# A requeued job is held back a few minutes (Slurm sets its begin time); let it start in
# 3 s: not in the second of the requeue, whose credential revocation the nodes also apply
# to a credential made in that second ("Job credential revoked").
scontrol update jobid="$job_id" starttime=now+3
wait_for 240 "completion after the requeue" completed
cat "$log"

grep -q "job $job_id on spark\[1-4\] (4 ranks, srun) SLURM_RESTART_COUNT=0$" "$log" || fail "the first run was not 4 ranks on spark[1-4]"
grep -q "SLURM_RESTART_COUNT=1$" "$log" || fail "the job did not restart once"
grep -q "srun exited 75" "$log" || fail "the first run did not exit 75"
grep -q "resuming from" "$log" || fail "the rerun did not resume from the checkpoint"
(($(grep -c 'SLURM_RESTART_COUNT=' "$log") == 2)) || fail "expected exactly one requeue"
same_output "$WORK/ref" "$WORK/out"
echo "PASS: four Slurm nodes, USR1 at $at_requeue chunks, requeued once, resumed to the single-rank bytes"
