# Sourced by tests/slurm/test_*.sh: a throwaway single-node Slurm on localhost
# (munged, slurmctld, slurmd started directly, no systemd): docs/cluster.md "Testing with a local Slurm".
#
#   local_slurm_start DIR   writes DIR/slurm.conf, starts what is not running, exports
#                           SLURM_CONF; returns 1 with the daemons' error printed if
#                           Slurm cannot come up here (the caller turns that into a skip)
#   local_slurm_stop        stops, by PID, only the daemons local_slurm_start started
#
# Ports are picked per run so that two test runs (or a site Slurm) never collide; the
# node is declared with 4 CPUs on whatever the machine has (config_overrides), so a
# 4-task job does not pend forever on a 2-core CI box.

LOCAL_SLURM_PIDS=()

local_slurm_free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# The settings every test cluster shares (this one and tests/cluster/testbed.sh's), given
# munge's AuthInfo: root daemons, no accounting, pmix, a short KillWait.
local_slurm_common_conf() {
  cat <<EOF
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=$1
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
MpiDefault=pmix
ReturnToService=2
KillWait=5
MailProg=/bin/true
SchedulerType=sched/backfill
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
EOF
}

local_slurm_write_conf() {
  local dir=$1 ctld_port=$2 slurmd_port=$3
  mkdir -p "$dir/state" "$dir/spool"
  cat >"$dir/slurm.conf" <<EOF
ClusterName=shardqtest
SlurmctldHost=localhost
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
$(local_slurm_common_conf cred_expire=30)
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
NodeName=localhost NodeAddr=127.0.0.1 CPUs=4 RealMemory=2000 State=UNKNOWN
PartitionName=test Nodes=localhost Default=YES MaxTime=INFINITE State=UP
EOF
}

local_slurm_munge_works() {
  command -v munge >/dev/null && munge -n 2>/dev/null | unmunge >/dev/null 2>&1
}

local_slurm_start_munge() {
  local_slurm_munge_works && return 0
  command -v munged >/dev/null || { echo "munged is not installed (scripts/deps.sh)"; return 1; }
  mkdir -p /run/munge && chown munge:munge /run/munge && chmod 0755 /run/munge
  if [ ! -s /etc/munge/munge.key ]; then
    mungekey --create --keyfile /etc/munge/munge.key || return 1
    chown munge:munge /etc/munge/munge.key && chmod 0400 /etc/munge/munge.key
  fi
  runuser -u munge -- /usr/sbin/munged || { echo "munged did not start"; return 1; }
  local pid
  pid=$(cat /run/munge/munged.pid 2>/dev/null) && LOCAL_SLURM_PIDS+=("$pid")
  local_slurm_munge_works || { echo "munge does not answer"; return 1; }
}

# Waits until `cond` succeeds, at most `seconds`.
local_slurm_wait_for() {
  local seconds=$1; shift
  local deadline=$((SECONDS + seconds))
  until "$@"; do
    ((SECONDS < deadline)) || return 1
    sleep 0.5
  done
}

local_slurm_node_idle() {
  [ "$(sinfo -h -n localhost -o %T 2>/dev/null)" = idle ]
}

local_slurm_start() {
  local dir=$1
  [ "$(id -u)" -eq 0 ] || { echo "the local Slurm needs root"; return 1; }
  command -v slurmctld >/dev/null && command -v slurmd >/dev/null \
    || { echo "slurmctld/slurmd are not installed (scripts/deps.sh)"; return 1; }
  local_slurm_start_munge || return 1
  local_slurm_write_conf "$dir" "$(local_slurm_free_port)" "$(local_slurm_free_port)"
  export SLURM_CONF=$dir/slurm.conf

  slurmctld -f "$SLURM_CONF" -i || { cat "$dir/slurmctld.log" 2>/dev/null; return 1; }
  local_slurm_wait_for 10 test -s "$dir/slurmctld.pid" && LOCAL_SLURM_PIDS+=("$(cat "$dir/slurmctld.pid")")
  local_slurm_wait_for 20 scontrol ping >/dev/null 2>&1 \
    || { echo "slurmctld is not up:"; tail -n 20 "$dir/slurmctld.log"; return 1; }

  slurmd -f "$SLURM_CONF" -N localhost || { tail -n 20 "$dir/slurmd.log"; return 1; }
  local_slurm_wait_for 10 test -s "$dir/slurmd.pid" && LOCAL_SLURM_PIDS+=("$(cat "$dir/slurmd.pid")")
  local_slurm_wait_for 30 local_slurm_node_idle \
    || { echo "node not idle: $(sinfo -h -N -o '%T %E' 2>&1)"; tail -n 20 "$dir/slurmd.log"; return 1; }
}

local_slurm_stop() {
  local i pid
  for ((i = ${#LOCAL_SLURM_PIDS[@]} - 1; i >= 0; i--)); do
    pid=${LOCAL_SLURM_PIDS[i]}
    kill -TERM "$pid" 2>/dev/null || continue
    local_slurm_wait_for 10 bash -c "! kill -0 $pid 2>/dev/null" || kill -KILL "$pid" 2>/dev/null
  done
  LOCAL_SLURM_PIDS=()
}
