#!/usr/bin/env bash
# test_slurm_requeue.sh with the batch script's other launcher: mpirun inside the
# Slurm allocation instead of `srun --mpi=pmix`. Same checks, same skip (77).
set -euo pipefail
export LAUNCHER=mpirun
exec bash "$(dirname "${BASH_SOURCE[0]}")/test_slurm_requeue.sh"
