#!/usr/bin/env bash
# shardq on four DGX Sparks without Slurm: one rank per node over mpirun, with the same
# stop-and-resume behaviour as under Slurm.
#
#   slurm/sparks.sh [--hostfile FILE] [--until-done] [--max-tries N] JOB.toml [shardq run options]
#
# Before launching: every host in the hostfile must answer over ssh, hold SHARDQ_BIN and
# have SPARK_IFNAME up; otherwise the script names the host and exits 2.
# Ctrl-C or SIGTERM: every rank stops taking work, rank 0 flushes the checkpoint, the
# run exits 75 and this script prints the command that resumes it (the same command).
# A host lost mid-run: the other ranks are stopped, the script names the host and its
# ranks and exits 75; the checkpoint is safe, the same command resumes once it is back.
# A second Ctrl-C stops the ranks at once; the checkpoint on disk still reads back.
# --until-done: rerun while shardq exits 75 for a reason other than this script being
# stopped (a node's shutdown sent SIGTERM to its rank, say), at most --max-tries runs;
# after a lost host, once it answers again (up to HOST_WAIT_S). Hangups are ignored: run
# it in tmux or under nohup for a long job.
#
# Files: the shardq binary must be at the same path on every node (NFS, or a copy per
# node). The source checkpoint may be on NFS or copied to each node at the same path
# (node-local NVMe reads faster; the job fingerprint checks the headers match). The
# output folder (--dst) must be one shared folder (NFS): shard owners on every node
# write into it and rank 0 keeps <dst>/.shardq/checkpoint.h5 there. shardq turns HDF5
# file locking off itself; HDF5_USE_FILE_LOCKING=FALSE is exported for other tools.
#
# Environment:
#   SHARDQ_BIN     shardq binary (default: <this repo>/build/release/shardq)
#   HOSTFILE       default for --hostfile (default: slurm/hostfile next to this script)
#   RANKS_PER_NODE ranks on each Spark (default 1: one rank per Spark, whose compute
#                  threads use the node's cores)
#   THREADS        compute threads per rank (default: the fewest online cores of the
#                  hostfile's hosts / RANKS_PER_NODE, read in the host checks), passed on
#                  as --set run.threads=THREADS
#   NP             ranks (default: hosts in the hostfile x RANKS_PER_NODE)
#   MAP_BY         Open MPI mapping (default ppr:RANKS_PER_NODE:node:pe=THREADS: each rank
#                  bound to its THREADS cores; a MAP_BY of yours runs unbound)
#   SPARK_IFNAME   the ConnectX-7 netdev, the SAME name on every node; find it with
#                  `ibdev2netdev` (an "(Up)" enp1s0f*np* port; default enp1s0f1np1).
#                  NCCL_SOCKET_IFNAME, OMPI_MCA_btl_tcp_if_include and
#                  OMPI_MCA_oob_tcp_if_include default to it; set any of them to override.
#   NCCL_IB_HCA    optional RoCE devices for NCCL (e.g. rocep1s0f1,roceP2p1s0f1: both
#                  halves of the port), passed to the ranks when set
#   UCX_NET_DEVICES  optional, for MPIRUN_ARGS="--mca pml ucx": UCX names RDMA devices
#                  as device:port (e.g. rocep1s0f1:1; a netdev name would select TCP
#                  only), passed to the ranks when set
#   MPIRUN_ARGS    extra mpirun arguments (word-split), e.g. "--mca pml ucx"
#   HOST_WAIT_S    --until-done after a lost host: how long to wait for it (default 600)
#   SHARDQ_LOG, OPENBLAS_CORETYPE, LD_LIBRARY_PATH: passed to every rank when set
#   OMPI_MCA_orte_execute_quiet  1 (default): Open MPI's pages of explanation after a
#                  failure are left out (this script names a lost host); 0 shows them
set -uo pipefail

readonly script_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
readonly EXIT_INTERRUPTED=75

SHARDQ_BIN=${SHARDQ_BIN:-$script_dir/../build/release/shardq}
hostfile=${HOSTFILE:-$script_dir/hostfile}
until_done=0
max_tries=10

export SPARK_IFNAME=${SPARK_IFNAME:-enp1s0f1np1}
export NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-$SPARK_IFNAME}
export OMPI_MCA_btl_tcp_if_include=${OMPI_MCA_btl_tcp_if_include:-$SPARK_IFNAME}
export OMPI_MCA_oob_tcp_if_include=${OMPI_MCA_oob_tcp_if_include:-$SPARK_IFNAME}
export HDF5_USE_FILE_LOCKING=FALSE
export OMPI_MCA_orte_execute_quiet=${OMPI_MCA_orte_execute_quiet:-1}
readonly SSH_TIMEOUT_S=5 # per host check; the checks run in parallel

mpirun_pid=""
stopped_by_user=0
# The host checks' fewest online cores (getconf, not nproc, which follows OMP_NUM_THREADS
# and the shell's affinity), for THREADS' default.
fewest_cores_file=$(mktemp)
trap 'rm -f "$fewest_cores_file"' EXIT

log() { echo "[sparks.sh $(date '+%T')] $*" >&2; }

usage() {
  sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

# A whole number above 0, or the script stops with exit 2 naming the setting.
positive() { # name value
  [[ $2 =~ ^[1-9][0-9]*$ ]] || { log "$1 must be a whole number above 0, not '$2'"; exit 2; }
}

parse_args() {
  while (($#)); do
    case "$1" in
      --hostfile | --max-tries) (($# >= 2)) || { log "$1 needs a value"; exit 2; } ;;&
      --hostfile) hostfile=$2; shift 2 ;;
      --until-done) until_done=1; shift ;;
      --max-tries) positive --max-tries "$2"; max_tries=$2; shift 2 ;;
      -h | --help) usage ;;
      *) break ;;
    esac
  done
  (($#)) || usage
  run_args=("$@")
}

# Names the checkpoint for the messages: --checkpoint, else <--dst>/.shardq/checkpoint.h5.
checkpoint_of() {
  local dst="<dst of the job file>" checkpoint=""
  while (($#)); do
    case "$1" in
      --dst) dst=$2; shift ;;
      --dst=*) dst=${1#--dst=} ;;
      --checkpoint) checkpoint=$2; shift ;;
      --checkpoint=*) checkpoint=${1#--checkpoint=} ;;
    esac
    shift
  done
  echo "${checkpoint:-$dst/.shardq/checkpoint.h5}"
}

hosts_in() { grep -cvE '^[[:space:]]*(#|$)' "$1"; }
# The hosts of a hostfile whose slots= is below N: Open MPI's ppr mapping refuses to put
# N ranks on them (unless oversubscription is allowed, as in the test bed).
hosts_with_fewer_slots() { awk -v n="$2" '!/^[[:space:]]*(#|$)/ && match($0, /slots=[0-9]+/) && substr($0, RSTART + 6, RLENGTH - 6) + 0 < n { print $1 }' "$1"; }
host_names() { awk '!/^[[:space:]]*(#|$)/ { print $1 }' "$1"; }

is_this_host() { [ "$1" = localhost ] || [ "$1" = "$(hostname)" ] || [ "$1" = "$(hostname -s)" ]; }

# Prints why HOST cannot run ranks, nothing if it can: it must answer over ssh (mpirun
# launches there with ssh; not for this host, which mpirun starts locally), hold the
# shardq binary at SHARDQ_BIN, and have SPARK_IFNAME up (administratively and with a
# link: UP and LOWER_UP). A host that can has its online cores written to CORES_FILE.
host_problem() { # HOST CORES_FILE
  local host=$1 out code=0 flags
  local check="test -x $(printf '%q' "$SHARDQ_BIN") || exit 3; echo cores=\$(getconf _NPROCESSORS_ONLN); ip -o link show dev '$SPARK_IFNAME'"
  if is_this_host "$host"; then
    out=$(bash -c "$check" 2>&1) || code=$?
  else
    out=$(ssh -o BatchMode=yes -o ConnectTimeout="$SSH_TIMEOUT_S" "$host" "$check" </dev/null 2>&1) || code=$?
    ((code == 255)) && { echo "does not answer over ssh (${out//$'\n'/ })"; return; }
  fi
  ((code == 3)) && { echo "has no executable $SHARDQ_BIN (SHARDQ_BIN: the same path on every node)"; return; }
  local link
  link=$(grep -v '^cores=' <<<"$out")
  ((code == 0)) || { echo "has no interface $SPARK_IFNAME (SPARK_IFNAME): ${link//$'\n'/ }"; return; }
  flags=${out#*<}
  flags=",${flags%%>*},"
  [[ $flags == *,UP,* && $flags == *,LOWER_UP,* ]] || { echo "has $SPARK_IFNAME (SPARK_IFNAME) down: <${flags:1:-1}>"; return; }
  [[ $out =~ cores=([0-9]+) ]] && echo "${BASH_REMATCH[1]}" >"$2"
}

# Checks every host in parallel (a dead one costs SSH_TIMEOUT_S, not that per host); prints
# "HOST: problem" for each that cannot run ranks; like grep, succeeds if it printed any.
# The fewest online cores of the hosts that can go to fewest_cores_file.
hosts_with_problems() {
  local dir host found=1 checks=()
  dir=$(mktemp -d)
  for host in $(host_names "$hostfile"); do
    host_problem "$host" "$dir/$host.cores" >"$dir/$host" &
    checks+=($!)
  done
  wait "${checks[@]}"
  for host in $(host_names "$hostfile"); do
    [ -s "$dir/$host" ] && { echo "$host: $(cat "$dir/$host")"; found=0; }
  done
  cat "$dir"/*.cores 2>/dev/null | sort -n | head -1 >"$fewest_cores_file"
  rm -rf "$dir"
  return "$found"
}

check_hosts() {
  local problems
  problems=$(hosts_with_problems) || return 0
  log "not launching: $(echo "$problems" | paste -sd ';' | sed 's/;/; /g')"
  log "every host in $hostfile must answer over ssh (passwordless, BatchMode) and have SPARK_IFNAME=$SPARK_IFNAME up"
  exit 2
}

# The ranks on the Nth host of the hostfile (from 0), when the mapping is this script's
# own one rank set per host in hostfile order.
ranks_on() {
  local per_node=${RANKS_PER_NODE:-1} first
  first=$(($1 * per_node))
  if [ -n "${MAP_BY:-}" ] || [ -n "${NP:-}" ]; then echo "its ranks"
  elif ((per_node == 1)); then echo "rank $first"
  else echo "ranks $first-$((first + per_node - 1))"
  fi
}

# After mpirun failed: a host that no longer answers (or lost its interface) is why. Names
# each with its ranks and returns 0; returns 1 if every host looks fine.
report_lost_hosts() {
  local problems host index=0 lost=()
  problems=$(hosts_with_problems) || return 1
  for host in $(host_names "$hostfile"); do
    grep -q "^$host: " <<<"$problems" && lost+=("$host ($(ranks_on "$index"))")
    index=$((index + 1))
  done
  log "lost ${lost[*]}: the other ranks were stopped; the checkpoint $(checkpoint_of "${run_args[@]}") is safe" \
    "(every chunk it records is on disk)"
  log "$(echo "$problems" | paste -sd ';' | sed 's/;/; /g')"
  log "resume with the same command once every host is back: $(printf '%q ' "$0" "${original_args[@]}")"
}

# Ctrl-C / TERM reach only this script (mpirun runs in its own session); pass USR1 on,
# which mpirun hands to every rank. Not TERM or INT: mpirun answers those by killing
# the ranks a few seconds later, maybe in the middle of the checkpoint flush.
on_stop() {
  stopped_by_user=$((stopped_by_user + 1))
  if ((stopped_by_user == 1)); then
    log "stopping: the ranks finish their chunks and checkpoint (Ctrl-C again, a second or more later, stops them at once)"
  fi
  [ -n "$mpirun_pid" ] && kill -USR1 "$mpirun_pid" 2>/dev/null
}

run_once() {
  check_hosts
  ((stopped_by_user)) && return "$EXIT_INTERRUPTED" # stopped during the checks: nothing launched
  # The hosts' own cores, not this one's: the launching machine may be a login node.
  local cores
  cores=$(cat "$fewest_cores_file")
  threads=${THREADS:-$((${cores:-1} / ${RANKS_PER_NODE:-1}))}
  ((threads >= 1)) || threads=1
  log "$np ranks x $threads threads from $hostfile over $SPARK_IFNAME: $SHARDQ_BIN run ${run_args[*]}"
  local exports=(-x PATH -x NCCL_SOCKET_IFNAME -x HDF5_USE_FILE_LOCKING) var
  for var in LD_LIBRARY_PATH NCCL_IB_HCA UCX_NET_DEVICES SHARDQ_LOG OPENBLAS_CORETYPE; do
    [ -n "${!var:-}" ] && exports+=(-x "$var")
  done
  local mapping=(--map-by "ppr:${RANKS_PER_NODE:-1}:node:pe=$threads")
  [ -n "${MAP_BY:-}" ] && mapping=(--map-by "$MAP_BY" --bind-to none)
  # run.threads first: a --set run.threads of the caller's comes later and wins.
  # shellcheck disable=SC2086 # MPIRUN_ARGS is a list of words on purpose
  setsid mpirun --hostfile "$hostfile" -np "$np" "${mapping[@]}" \
    "${exports[@]}" ${MPIRUN_ARGS:-} "$SHARDQ_BIN" run --set "run.threads=$threads" "${run_args[@]}" </dev/null &
  mpirun_pid=$!
  # `wait` returns early for a trap (128 + the signal); once mpirun is gone, its own status
  # (bash keeps it).
  while kill -0 "$mpirun_pid" 2>/dev/null; do
    wait "$mpirun_pid"
  done
  local code=0
  wait "$mpirun_pid" || code=$?
  mpirun_pid=""
  return "$code"
}

# --until-done after a lost host: the next launch waits for every host to answer again
# (checked every HOST_WAIT_STEP_S, 30 s; up to HOST_WAIT_S, 600 s), or the script ends 75.
wait_for_hosts() {
  local waited=0 step=${HOST_WAIT_STEP_S:-30} limit=${HOST_WAIT_S:-600}
  while hosts_with_problems >/dev/null; do
    ((stopped_by_user == 0 && waited < limit)) || return 1
    sleep "$step"
    waited=$((waited + step))
  done
}

report_interrupted() {
  local resume
  resume=$(printf '%q ' "$0" "${original_args[@]}")
  log "exit 75: interrupted, checkpoint saved in $(checkpoint_of "${run_args[@]}")"
  log "progress: $SHARDQ_BIN status $(checkpoint_of "${run_args[@]}")"
  log "resume with the same command: $resume"
}

main() {
  original_args=("$@")
  parse_args "$@"
  [ -r "$hostfile" ] || { log "no hostfile '$hostfile' (copy slurm/hostfile.example)"; exit 2; }
  local name
  for name in RANKS_PER_NODE THREADS NP; do
    [ -z "${!name:-}" ] || positive "$name" "${!name}"
  done
  local short
  short=$(hosts_with_fewer_slots "$hostfile" "${RANKS_PER_NODE:-1}" | paste -sd ' ')
  if [ -z "${MAP_BY:-}" ] && [ -n "$short" ]; then
    log "$hostfile gives $short fewer slots than RANKS_PER_NODE=${RANKS_PER_NODE:-1}: raise their slots= to it"
    exit 2
  fi
  np=${NP:-$(($(hosts_in "$hostfile") * ${RANKS_PER_NODE:-1}))}
  trap on_stop INT TERM
  trap '' HUP # a dropped ssh session must not leave mpirun running unwatched (run it in tmux)

  local try code
  for ((try = 1; ; try++)); do
    run_once
    code=$?
    if ((code != 0 && code != EXIT_INTERRUPTED && !stopped_by_user)); then
      if report_lost_hosts; then
        code=$EXIT_INTERRUPTED
        # --until-done: try again once every host answers again.
        if ((until_done && try < max_tries)) && wait_for_hosts; then
          log "every host answers again; --until-done: resuming, try $((try + 1)) of $max_tries"
          continue
        fi
        break
      fi
      # Quiet, mpirun does not say which rank ended how: give what the exit code tells.
      [ "$OMPI_MCA_orte_execute_quiet" = 1 ] && log "mpirun exited $code$( ((code > 128)) &&
        echo " (a rank ended by signal $((code - 128)))"); OMPI_MCA_orte_execute_quiet=0 shows Open MPI's explanation"
    fi
    ((code == EXIT_INTERRUPTED)) || break
    if ((stopped_by_user || !until_done)); then
      report_interrupted
      break
    fi
    if ((try >= max_tries)); then
      log "exit 75 on try $try of $max_tries; not retrying"
      report_interrupted
      break
    fi
    log "exit 75 (a rank was stopped); --until-done: resuming, try $((try + 1)) of $max_tries"
  done
  ((code == 0)) && log "done"
  exit "$code"
}

main "$@"
