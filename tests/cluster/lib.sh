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

# rank_stacks: each running `shardq run` of this test (its binary) and its threads' stacks,
# for a test that gives up on a run. The test bed's hosts share this machine's process
# table, so gdb reaches every rank. CI once saw ranks 1-3 hang after a run's end
# (docs/cluster.md); their stacks say where.
rank_stacks() {
  local pid
  for pid in $(pgrep -f "$SHARDQ_BIN run"); do
    echo "== pid $pid: $(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | cut -c1-120)"
    if command -v gdb >/dev/null; then
      timeout 60 gdb -batch -p "$pid" -ex 'thread apply all bt' 2>/dev/null | grep -E '^(Thread|#)' | head -n 120
    else
      echo "(no gdb for its stacks)"
    fi
  done
}

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

# seconds_of CMD...: runs CMD, writes how long it took to $WORK/seconds (s, 0.1 s resolution).
seconds_of() {
  local start
  start=$(now)
  "$@" || return
  seconds_since "$start" >"$WORK/seconds"
}

# check_job_over_four_hosts JOB: JOB (a demo job, on the demo fixtures) through sparks.sh over
# the four hosts in both write modes (owner and direct) gives the bytes of one rank on this
# host; prints the times.
check_job_over_four_hosts() {
  local job=$1 name mode dst line args
  name=$(basename "$job" .toml)
  args=(--src "$WORK/src" --set "quant.input_scales_from=\"$WORK/ref-nvfp4\"")
  grep -q input_scales_from "$job" || args=(--src "$WORK/src")

  seconds_of run_shardq 0 "$WORK/$name-one.log" "$job" "${args[@]}" --dst "$WORK/$name-one" ||
    fail "$name on one rank: $(tail -3 "$WORK/$name-one.log")"
  line="$name: one host, 1 rank $(cat "$WORK/seconds") s"
  for mode in owner direct; do
    dst=$WORK/$name-$mode
    seconds_of sparks "$WORK/$name-$mode.log" "$job" "${args[@]}" --set "run.write_mode=\"$mode\"" --dst "$dst" ||
      fail "$name over four hosts ($mode): $(tail -5 "$WORK/$name-$mode.log")"
    grep -q "4 ranks x $(nproc) threads, .* write mode $mode" "$WORK/$name-$mode.log" ||
      fail "$name: not 4 ranks of $(nproc) threads with write mode $mode: $(grep -m1 'ranks x' "$WORK/$name-$mode.log")"
    [[ $(grep -o '\[rank [0-9]\] \[info\] [a-z0-9-]*: 4 ranks x' "$WORK/$name-$mode.log" | sort -u | wc -l) == 4 ]] ||
      fail "$name: not every rank started"
    same_output "$WORK/$name-one" "$dst"
    line+="; four hosts ($mode) $(cat "$WORK/seconds") s"
  done
  echo "figure: $line (four hosts: with the host checks and the ssh launch)"
}
