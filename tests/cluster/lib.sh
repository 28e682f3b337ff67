# shellcheck shell=bash
# Shared by tests/cluster/test_*.sh (sourced, not a test itself): the resume tests'
# helpers (a work folder on the shared file system, fail, digests) and a test bed of
# four hosts (testbed.sh) up for the test's life and torn down however it ends.
# Outside CI a machine that cannot host the test bed (not root, no network namespaces)
# skips the test (exit 77); in CI (CI=true) that is a failure.

# shellcheck source=../resume/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../resume/lib.sh"
# shellcheck source=testbed.sh
source "$(dirname "${BASH_SOURCE[0]}")/testbed.sh"

SHARDQ_BIN=$(realpath "$SHARDQ_BIN") # the ranks start it on other hosts
export SHARDQ_BIN
readonly SPARKS=$SHARDQ_SOURCE_DIR/slurm/sparks.sh
export SPARK_IFNAME=$TESTBED_IFNAME
# Ranks on different hosts talk TCP only: no shared-memory transport to fall back on.
export OMPI_MCA_btl=self,tcp

cluster_cleanup() {
  testbed_down
  cleanup # resume/lib.sh: processes it started, the work folder
}
trap cluster_cleanup EXIT
trap 'exit 143' TERM INT # ctest's timeout: tear down all the same

# cluster_up [slurm]: the four hosts (and Slurm on them), or skip / fail.
cluster_up() {
  if ! { testbed_up 4 && { [ "${1:-}" != slurm ] || testbed_slurm_up; }; } >"$WORK/testbed.log" 2>&1; then
    cat "$WORK/testbed.log"
    [ "${CI:-}" = true ] && fail "the test bed did not come up (above)"
    echo "SKIP: the test bed cannot come up here (above)"
    exit 77
  fi
  cat "$WORK/testbed.log"
  printf '%s slots=1\n' "${TESTBED_HOSTS[@]}" >"$WORK/hostfile"
}

# on_spark1 CMD...: CMD on the first host, where a user starts sparks.sh.
on_spark1() { testbed_exec spark1 "$@"; }

# sparks LOG ARGS...: slurm/sparks.sh over the four hosts, from spark1; its exit code.
sparks() {
  local log=$1 code=0
  shift
  on_spark1 "$SPARKS" --hostfile "$WORK/hostfile" "$@" >"$log" 2>&1 || code=$?
  return "$code"
}

# The demo fixtures, as scripts/demo.sh makes them.
make_demo_fixtures() {
  "$SHARDQ_BIN" fixture --preset dsv41-mini --out "$WORK/src" >/dev/null
  "$SHARDQ_BIN" fixture --preset dsv41-mini-ref-nvfp4 --out "$WORK/ref-nvfp4" >/dev/null
}
