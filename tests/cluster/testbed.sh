#!/usr/bin/env bash
# Four DGX Sparks on this one machine: each "host" is a network namespace on a Linux
# bridge with its own hostname (UTS namespace), its own mounts, an `eth0` (the same
# interface name on every host, like the Sparks' ConnectX port), an sshd for root by key,
# and optionally a slurmd; the shared file system stands in for NFS. docs/cluster.md
# "Testing on four hosts" says what this relies on.
#
# Sourced by tests/cluster/test_*.sh (or run by hand: `testbed.sh up [N]`, `testbed.sh down`):
#   testbed_up [N]            N hosts spark1..N (default 4) answering ssh; needs root
#   testbed_down              stops and removes everything testbed_up (and the calls
#                             below) made; safe to call twice and after a partial start
#   testbed_exec HOST CMD...  runs CMD on HOST: its network, hostname and mounts
#   testbed_kill_host HOST    SIGKILL to every process on HOST (a host dying)
#   testbed_revive_host HOST  starts a dead host's sshd (and slurmd) again
#   testbed_slurm_up          slurmctld on this machine, one slurmd per host; exports SLURM_CONF
#
# Everything made is recorded under TESTBED_STATE, so a later `testbed_down` (or the next
# testbed_up, after a test bed whose shell was killed) removes it: pid files, the
# namespaces and links by their fixed names, the lines tagged "shardq-testbed" in
# /etc/hosts and ~/.ssh/config. One test bed at a time: testbed_up holds a lock.
# shellcheck disable=SC2034 # TESTBED_* are read by the tests that source this

readonly TESTBED_STATE=/run/shardq-testbed
readonly TESTBED_TAG=shardq-testbed
readonly TESTBED_SUBNET=10.231.7       # hosts .1..N, this machine (the bridge) .254
readonly TESTBED_BRIDGE=shqtb0
readonly TESTBED_IFNAME=eth0           # SPARK_IFNAME on every host
readonly TESTBED_TMPFS=/var/tmp/shardq-testbed # per-host tmpfs: Slurm's TmpFS
readonly TESTBED_SSH_CONFIG=/root/.ssh/config
TESTBED_HOSTS=()

testbed_log() { echo "[testbed $(date '+%T')] $*" >&2; }

testbed_netns() { echo "shardq-$1"; }
testbed_addr() { echo "$TESTBED_SUBNET.${1#spark}"; }
testbed_holder_pid() { cat "$TESTBED_STATE/pids/holder-$1.pid" 2>/dev/null; }

# Waits until CMD succeeds, at most SECONDS; stops early if CMD returns 2 (never will).
testbed_wait_for() {
  local seconds=$1 code
  shift
  local deadline=$((SECONDS + seconds))
  while true; do
    code=0
    "$@" || code=$?
    ((code == 0)) && return 0
    ((code != 2 && SECONDS < deadline)) || return 1
    sleep 0.2
  done
}

testbed_exec() {
  local host=$1; shift
  local holder
  holder=$(testbed_holder_pid "$host") || { testbed_log "no host $host"; return 1; }
  # nsenter, not `ip netns exec`: that one remounts /sys, which leaves no cgroup tree
  # and Slurm 22.05's slurmd refuses to start.
  nsenter --target "$holder" --net --uts --mount --wd="$PWD" -- "$@" 9>&-
}

# Removes what testbed_up added to a system file: lines tagged with TESTBED_TAG and the
# block between the tagged ">>>" and "<<<" lines. Rewritten in place: /etc/hosts may be a
# bind mount (containers) that a rename (sed -i) cannot replace.
testbed_drop_tagged_lines() {
  local file=$1 kept
  [ -f "$file" ] || return 0
  kept=$(awk -v tag="$TESTBED_TAG" '
    $0 ~ "^# >>> " tag { skip = 1 } !skip && index($0, tag) == 0 { print } $0 ~ "^# <<< " tag { skip = 0 }' "$file")
  if [ -n "$kept" ]; then printf '%s\n' "$kept" >"$file"; else : >"$file"; fi
}

testbed_add_names() {
  local host
  for host in "${TESTBED_HOSTS[@]}"; do
    echo "$(testbed_addr "$host") $host # $TESTBED_TAG" >>/etc/hosts
  done
}

# Root's ssh client: the test bed's key and no host key prompts for these names only.
# The block goes first because ssh takes the first value it reads for each option;
# "Host *" after it puts options at the top of the old file back in the global scope.
testbed_add_ssh_config() {
  local old=""
  if [ ! -d /root/.ssh ]; then
    mkdir -m 700 /root/.ssh
    touch "$TESTBED_STATE/made-ssh-folder" # removed again if left empty
  fi
  [ -f "$TESTBED_SSH_CONFIG" ] && old=$(cat "$TESTBED_SSH_CONFIG")
  {
    printf '%s\n' "# >>> $TESTBED_TAG (removed by tests/cluster/testbed.sh down)" \
      "Host ${TESTBED_HOSTS[*]}" \
      "  IdentityFile $TESTBED_STATE/id_ed25519" \
      "  StrictHostKeyChecking no" \
      "  UserKnownHostsFile /dev/null" \
      "  LogLevel ERROR" \
      "  BatchMode yes" \
      "Host *" \
      "# <<< $TESTBED_TAG"
    [ -n "$old" ] && printf '%s\n' "$old"
  } >"$TESTBED_SSH_CONFIG"
  chmod 600 "$TESTBED_SSH_CONFIG"
}

testbed_make_keys() {
  ssh-keygen -q -t ed25519 -N '' -f "$TESTBED_STATE/id_ed25519"
  ssh-keygen -q -t ed25519 -N '' -f "$TESTBED_STATE/ssh_host_ed25519_key"
  cp "$TESTBED_STATE/id_ed25519.pub" "$TESTBED_STATE/authorized_keys"
}

testbed_make_bridge() {
  ip link add "$TESTBED_BRIDGE" type bridge
  ip addr add "$TESTBED_SUBNET.254/24" dev "$TESTBED_BRIDGE"
  ip link set "$TESTBED_BRIDGE" up
}

# A namespace, an eth0 in it on the bridge, and a holder process that owns the host's
# hostname and mounts (a private tmpfs at TESTBED_TMPFS: Slurm names its per-step folders
# by job and step only, so hosts sharing one would collide). Everything on the host is
# started inside the holder's namespaces; the holder is the machine, not a process on it.
testbed_make_host() {
  local host=$1 netns
  netns=$(testbed_netns "$host")
  ip netns add "$netns"
  ip link add "shqtb-$host" type veth peer name "$TESTBED_IFNAME" netns "$netns"
  ip link set "shqtb-$host" master "$TESTBED_BRIDGE" up
  ip -n "$netns" addr add "$(testbed_addr "$host")/24" dev "$TESTBED_IFNAME"
  ip -n "$netns" link set "$TESTBED_IFNAME" up
  ip -n "$netns" link set lo up
  mkdir -p "$TESTBED_TMPFS"
  nsenter --net="/run/netns/$netns" -- unshare --uts --mount --propagation private -- \
    bash -c 'hostname "$1" && mount -t tmpfs -o size=64m tmpfs "$2" && exec sleep infinity' \
    holder "$host" "$TESTBED_TMPFS" </dev/null >/dev/null 2>&1 9>&- &
  echo $! >"$TESTBED_STATE/pids/holder-$host.pid"
  testbed_wait_for 10 testbed_host_named "$host" || { testbed_log "$host did not come up"; return 1; }
}

testbed_mac() { ip -n "$(testbed_netns "$1")" -o link show dev "$TESTBED_IFNAME" | sed -n 's#.*link/ether \([0-9a-f:]*\).*#\1#p'; }

# Every host, and the machine, knows every other's MAC address for good (permanent
# neighbour entries): no ARP on the bridge. On a loaded 2-core machine an ARP answer can
# come later than the kernel waits (3 probes, 1 s apart); the connect then fails with
# "no route to host", and Open MPI 4.1's TCP transport, whose connections open lazily at
# the first message, leaves that message queued forever instead of failing: a hung test,
# not a red one.
testbed_pin_neighbours() {
  local host peer mac
  declare -A macs=([bridge]=$(cat "/sys/class/net/$TESTBED_BRIDGE/address"))
  for host in "${TESTBED_HOSTS[@]}"; do
    mac=$(testbed_mac "$host")
    [ -n "$mac" ] || { testbed_log "no MAC address for $host's $TESTBED_IFNAME"; return 1; }
    macs[$host]=$mac
    ip neigh replace "$(testbed_addr "$host")" lladdr "$mac" dev "$TESTBED_BRIDGE" nud permanent || return 1
  done
  for host in "${TESTBED_HOSTS[@]}"; do
    ip -n "$(testbed_netns "$host")" neigh replace "$TESTBED_SUBNET.254" lladdr "${macs[bridge]}" \
      dev "$TESTBED_IFNAME" nud permanent || return 1
    for peer in "${TESTBED_HOSTS[@]}"; do
      [ "$peer" = "$host" ] && continue
      ip -n "$(testbed_netns "$host")" neigh replace "$(testbed_addr "$peer")" lladdr "${macs[$peer]}" \
        dev "$TESTBED_IFNAME" nud permanent || return 1
    done
  done
}

testbed_host_named() { [ "$(testbed_exec "$1" hostname 2>/dev/null)" = "$1" ]; }

testbed_start_sshd() {
  local host=$1 config=$TESTBED_STATE/sshd-$1.conf
  cat >"$config" <<EOF
ListenAddress $(testbed_addr "$host")
HostKey $TESTBED_STATE/ssh_host_ed25519_key
PidFile $TESTBED_STATE/pids/sshd-$host.pid
PermitRootLogin prohibit-password
AuthorizedKeysFile $TESTBED_STATE/authorized_keys
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
# The state folder is not root's home: do not require home-folder permissions on its path.
StrictModes no
EOF
  mkdir -p /run/sshd # privilege separation folder
  testbed_exec "$host" /usr/sbin/sshd -f "$config"
  testbed_wait_for 10 ssh "$host" true 2>/dev/null || { testbed_log "ssh to $host does not answer"; return 1; }
}

testbed_up() {
  local count=${1:-4} i host
  [ "$(id -u)" -eq 0 ] || { testbed_log "the test bed needs root"; return 1; }
  command -v /usr/sbin/sshd >/dev/null || { testbed_log "sshd is not installed (scripts/deps.sh)"; return 1; }
  testbed_lock || return 1
  # A test bed whose shell was killed left its state: remove it first.
  [ -d "$TESTBED_STATE" ] && testbed_down
  mkdir -p "$TESTBED_STATE/pids"
  for ((i = 1; i <= count; i++)); do TESTBED_HOSTS+=("spark$i"); done
  printf '%s\n' "${TESTBED_HOSTS[@]}" >"$TESTBED_STATE/hosts"

  testbed_make_keys
  testbed_add_names
  testbed_add_ssh_config
  testbed_make_bridge
  for host in "${TESTBED_HOSTS[@]}"; do
    testbed_make_host "$host" || return 1
    testbed_start_sshd "$host" || return 1
  done
  testbed_pin_neighbours || { testbed_log "could not pin the hosts' neighbour entries"; return 1; }
  testbed_log "up: ${TESTBED_HOSTS[*]} on $TESTBED_SUBNET.0/24 ($TESTBED_IFNAME), state in $TESTBED_STATE"
}

testbed_write_slurm_conf() {
  local dir=$1 host
  mkdir -p "$dir/state"
  cat >"$dir/slurm.conf" <<EOF
# As tests/slurm/local_slurm.sh, with one node per test bed host.
ClusterName=shardqsparks
SlurmctldHost=$(hostname -s)($TESTBED_SUBNET.254)
SlurmctldPort=$(local_slurm_free_port)
SlurmdPort=$(local_slurm_free_port)
$(local_slurm_common_conf "cred_expire=30,socket=$TESTBED_STATE/munge/munge.socket")
TmpFS=$TESTBED_TMPFS
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool-%n
SlurmctldPidFile=$TESTBED_STATE/pids/slurmctld.pid
SlurmdPidFile=$TESTBED_STATE/pids/slurmd-%n.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd-%n.log
EOF
  for host in "${TESTBED_HOSTS[@]}"; do
    echo "NodeName=$host NodeAddr=$(testbed_addr "$host") CPUs=2 RealMemory=2000 State=UNKNOWN" >>"$dir/slurm.conf"
  done
  echo "PartitionName=sparks Nodes=$(IFS=,; echo "${TESTBED_HOSTS[*]}") Default=YES MaxTime=INFINITE State=UP" \
    >>"$dir/slurm.conf"
}

testbed_start_slurmd() {
  local host=$1
  testbed_exec "$host" slurmd -f "$SLURM_CONF" -N "$host" \
    || { tail -n 20 "$TESTBED_STATE/slurm/slurmd-$host.log"; return 1; }
}

testbed_nodes_idle() {
  [ "$(sinfo -h -N -o '%T' 2>/dev/null | grep -c '^idle$')" -eq "${#TESTBED_HOSTS[@]}" ]
}

# The test bed's own munged, key and socket (AuthInfo socket=): the machine's munged may
# belong to another test that stops it while this one runs.
testbed_start_munge() {
  local dir=$TESTBED_STATE/munge
  mkdir -p "$dir"
  mungekey --create --keyfile "$dir/munge.key" && chmod 400 "$dir/munge.key" || return 1
  /usr/sbin/munged --socket="$dir/munge.socket" --key-file="$dir/munge.key" --seed-file="$dir/munged.seed" \
    --pid-file="$TESTBED_STATE/pids/munged.pid" --log-file="$dir/munged.log" 9>&- \
    || { cat "$dir/munged.log"; return 1; }
}

# slurmctld here (SlurmctldHost must be this machine's own name), one slurmd per host,
# started inside the host with nsenter (see testbed_exec).
testbed_slurm_up() {
  local dir=$TESTBED_STATE/slurm host
  command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v munged >/dev/null \
    || { testbed_log "slurmctld/slurmd/munged are not installed (scripts/deps.sh)"; return 1; }
  # shellcheck source=../slurm/local_slurm.sh
  source "$(dirname "${BASH_SOURCE[0]}")/../slurm/local_slurm.sh" # local_slurm_free_port
  testbed_start_munge || return 1
  testbed_write_slurm_conf "$dir"
  export SLURM_CONF=$dir/slurm.conf
  slurmctld -f "$SLURM_CONF" -i 9>&- || { cat "$dir/slurmctld.log"; return 1; }
  testbed_wait_for 20 scontrol ping >/dev/null 2>&1 || { tail -n 20 "$dir/slurmctld.log"; return 1; }
  for host in "${TESTBED_HOSTS[@]}"; do testbed_start_slurmd "$host" || return 1; done
  testbed_wait_for 60 testbed_nodes_idle || { sinfo -N; tail -n 20 "$dir"/slurm*.log; return 1; }
  testbed_log "Slurm up: $(sinfo -h -o '%P %D %N %T'), SLURM_CONF=$SLURM_CONF"
}

# TERM, then KILL after 5 s, to the process in PIDFILE; the file goes.
testbed_stop_pidfile() {
  local file=$1 pid
  pid=$(cat "$file" 2>/dev/null) || return 0
  rm -f "$file"
  kill -TERM "$pid" 2>/dev/null || return 0
  testbed_wait_for 5 bash -c "! kill -0 $pid 2>/dev/null" || kill -KILL "$pid" 2>/dev/null
}

# Every process in HOST's namespaces but its holder: by the UTS namespace the holder made
# (one `ls` of every process's link: a readlink per process takes seconds on a busy box;
# ls fails for processes that end meanwhile).
testbed_host_pids() {
  local holder uts
  holder=$(testbed_holder_pid "$1") || return 0
  uts=$(readlink "/proc/$holder/ns/uts") || return 0
  # shellcheck disable=SC2012 # the link targets are what is wanted, and they are plain text
  { ls -l /proc/[0-9]*/ns/uts 2>/dev/null || true; } | awk -v uts="$uts" -v holder="/proc/$holder/ns/uts" \
    '$NF == uts && $(NF - 2) != holder { split($(NF - 2), path, "/"); print path[3] }'
}

testbed_kill_host() {
  local pids
  pids=$(testbed_host_pids "$1")
  # shellcheck disable=SC2086 # a list of pids
  [ -n "$pids" ] && kill -KILL $pids 2>/dev/null
  rm -f "$TESTBED_STATE/pids/sshd-$1.pid" "$TESTBED_STATE/pids/slurmd-$1.pid"
  return 0
}

testbed_revive_host() {
  testbed_start_sshd "$1" || return 1
  [ -f "$TESTBED_STATE/slurm/slurm.conf" ] && testbed_start_slurmd "$1"
  return 0
}

# The lock is fd 9 of the shell that took it, so it goes when that shell dies however it
# ends; whatever the test bed starts to outlive a command closes it (9>&-).
testbed_lock() {
  exec 9>/run/lock/shardq-testbed.lock
  flock -w 900 9 || { testbed_log "another test bed is still up after 900 s"; return 1; }
  TESTBED_LOCKED=1
}

testbed_down() {
  local -
  set +e # every step runs, even after one fails
  local file host
  # Only the shell holding the lock tears down: a test that never got it made nothing.
  [ -n "${TESTBED_LOCKED:-}" ] || return 0
  if [ -d "$TESTBED_STATE" ]; then
    for file in "$TESTBED_STATE"/pids/slurmd-*.pid "$TESTBED_STATE"/pids/slurmctld.pid \
      "$TESTBED_STATE"/pids/sshd-*.pid; do
      [ -e "$file" ] && testbed_stop_pidfile "$file"
    done
    while read -r host; do
      testbed_kill_host "$host" # what the tests left running there (ranks, orted, srun steps)
      testbed_stop_pidfile "$TESTBED_STATE/pids/holder-$host.pid"
      ip netns del "$(testbed_netns "$host")" 2>/dev/null # its eth0 and the veth's other end go with it
    done <"$TESTBED_STATE/hosts"
    [ -e "$TESTBED_STATE/pids/munged.pid" ] && testbed_stop_pidfile "$TESTBED_STATE/pids/munged.pid"
  fi
  ip link del "$TESTBED_BRIDGE" 2>/dev/null
  testbed_drop_tagged_lines /etc/hosts
  testbed_drop_tagged_lines "$TESTBED_SSH_CONFIG"
  [ -s "$TESTBED_SSH_CONFIG" ] || rm -f "$TESTBED_SSH_CONFIG"
  [ -e "$TESTBED_STATE/made-ssh-folder" ] && rmdir /root/.ssh 2>/dev/null
  rm -rf "$TESTBED_STATE"
  rmdir "$TESTBED_TMPFS" 2>/dev/null
  TESTBED_HOSTS=()
  return 0
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  set -euo pipefail
  case "${1:-}" in
    up) testbed_up "${2:-4}" ;;
    down) testbed_lock && testbed_down ;; # waits while a test uses the test bed
    *) echo "usage: $0 up [N] | down" >&2; exit 2 ;;
  esac
fi
