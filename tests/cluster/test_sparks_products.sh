#!/usr/bin/env bash
# slurm/sparks.sh as the README documents it, started on the first of four hosts (one
# rank per host with a compute thread per core of its host, launched over ssh, TCP over
# eth0): the demo job of every product
# (jobs/demo-*.toml) gives the bytes of a single-rank run on one host, with both write
# modes (run.write_mode owner and direct). Prints the four-host time next to one host's.
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"

cluster_up
make_demo_fixtures

for job in "$SHARDQ_SOURCE_DIR"/jobs/demo-*.toml; do
  check_job_over_four_hosts "$job"
done
echo "PASS: every demo job over four hosts gives the single-rank bytes in both write modes"
