#!/usr/bin/env bash
# slurm/sparks.sh checks every host before launching and refuses (exit 2, no rank
# started) naming the host: one whose sshd is gone, one whose SPARK_IFNAME is down, and
# every host when SPARK_IFNAME names no interface there or SHARDQ_BIN is not there; and
# (exit 2, nothing launched) settings that are not whole numbers above 0: --max-tries,
# RANKS_PER_NODE, THREADS. THREADS defaults to the fewest online cores of the hosts.
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"

cluster_up
"$SHARDQ_BIN" fixture --preset dsv41-mini --out "$WORK/src" --engram-vocab 600 >/dev/null
args=("$JOB" --src "$WORK/src" --dst "$WORK/out")

# refused LOG EXPECTED: sparks.sh (environment as given) exited 2 with a line matching
# EXPECTED, and launched nothing.
refused() {
  local log=$WORK/$1 expected=$2 code=0
  sparks "$log" "${args[@]}" || code=$?
  cat "$log"
  ((code == 2)) || fail "sparks.sh exited $code, expected 2 (refused)"
  grep -qE "not launching: .*$expected" "$log" || fail "no refusal matching '$expected'"
  grep -q '\[rank ' "$log" && fail "ranks ran although the check failed"
  [ ! -e "$WORK/out" ] || fail "the run started: $WORK/out exists"
}

# bad_setting LOG EXPECTED [sparks.sh options...]: exit 2 naming the setting, nothing run.
bad_setting() {
  local name=$1 log=$WORK/$1 expected=$2 code=0
  shift 2
  sparks "$log" "$@" || code=$?
  ((code == 2)) || fail "$name: sparks.sh exited $code, expected 2: $(tail -3 "$log")"
  grep -qF -- "$expected" "$log" || fail "$name: no line saying '$expected': $(tail -3 "$log")"
  [ ! -e "$WORK/out" ] || fail "$name: the run started"
  echo "refused: $(grep -F -- "$expected" "$log")"
}
echo "== settings that are not whole numbers above 0"
bad_setting tries.log "--max-tries must be a whole number above 0, not '5x'" --max-tries 5x "${args[@]}"
bad_setting tries-missing.log "--max-tries needs a value" --max-tries
RANKS_PER_NODE=0 bad_setting ranks.log "RANKS_PER_NODE must be a whole number above 0, not '0'" "${args[@]}"
THREADS=auto bad_setting threads.log "THREADS must be a whole number above 0, not 'auto'" "${args[@]}"
RANKS_PER_NODE=2 bad_setting slots.log "gives spark1 spark2 spark3 spark4 fewer slots than RANKS_PER_NODE=2" "${args[@]}"

echo "== SHARDQ_BIN is not on the hosts"
SHARDQ_BIN=/opt/missing/shardq refused no-bin.log "spark1: has no executable /opt/missing/shardq .*spark4: has no executable"

echo "== SPARK_IFNAME names no interface"
SPARK_IFNAME=enp1s0f1np1 refused no-iface.log \
  "spark1: has no interface enp1s0f1np1 .*spark4: has no interface enp1s0f1np1"

echo "== spark4's SPARK_IFNAME down (a second port, eth1, up on the others)"
for host in "${TESTBED_HOSTS[@]}"; do
  netns=$(testbed_netns "$host")
  ip -n "$netns" link add eth1 type veth peer name eth1-peer # a link that can be up (no dummy module here)
  ip -n "$netns" link set eth1-peer up
  [ "$host" = spark4 ] || ip -n "$netns" link set eth1 up
done
SPARK_IFNAME=eth1 refused iface-down.log "spark4: has eth1 \\(SPARK_IFNAME\\) down"
grep -qE 'spark[123]:' "$WORK/iface-down.log" && fail "hosts with eth1 up were named"

echo "== spark4 does not answer over ssh"
testbed_kill_host spark4
refused no-ssh.log "spark4: does not answer over ssh"

echo "== spark4 back: it runs, with THREADS from the hosts' cores (spark2 shows one online)"
testbed_revive_host spark4
echo 0 >"$WORK/one-cpu"
testbed_exec spark2 mount --bind "$WORK/one-cpu" /sys/devices/system/cpu/online
[[ $(testbed_exec spark2 getconf _NPROCESSORS_ONLN) == 1 ]] || fail "spark2 does not show one online core"
sparks "$WORK/ok.log" "${args[@]}" || fail "sparks.sh after spark4 came back: $(tail -5 "$WORK/ok.log")"
grep -q "4 ranks x 1 threads from" "$WORK/ok.log" || fail "THREADS not the fewest cores: $(grep -m1 'ranks x' "$WORK/ok.log")"
grep -q "\[rank 0\] \[info\] .*: 4 ranks x 1 threads" "$WORK/ok.log" || fail "the ranks did not run 1 thread each"
echo "PASS: sparks.sh refuses, naming the host, a dead host, a down interface and a missing one; THREADS from the hosts"

