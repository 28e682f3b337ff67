# shellcheck shell=bash disable=SC2154 # report_name: set by the sourcing test
# Sourced by the tests/slurm scripts: what they share besides Slurm itself. The sourcing
# script defines fail() and report_name (the report, which differs between runs).

# sha256 of every output file but the report and the checkpoint folder, in name order.
output_digest() {
  (cd "$1" && find . -path ./.shardq -prune -o -type f ! -name "$report_name" -print \
    | LC_ALL=C sort | xargs sha256sum)
}

# wait_until SECONDS WHAT CMD...: polls CMD every 0.2 s; fails naming WHAT when time is up.
wait_until() {
  local seconds=$1 what=$2; shift 2
  local deadline=$((SECONDS + seconds))
  until "$@"; do
    ((SECONDS < deadline)) || fail "timed out after ${seconds}s waiting for $what"
    sleep 0.2
  done
}
