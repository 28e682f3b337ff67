# Shared helpers for the resume and MPI script tests (sourced, not a test itself).
# Needs SHARDQ_BIN and SHARDQ_SOURCE_DIR (ctest sets both). Every test works in its own
# mktemp -d folder, removed on exit, and ends every process it started by pid.

set -euo pipefail

: "${SHARDQ_BIN:?SHARDQ_BIN must name the shardq binary}"
: "${SHARDQ_SOURCE_DIR:?SHARDQ_SOURCE_DIR must name the source tree}"
# shellcheck source=/dev/null
source "$SHARDQ_SOURCE_DIR/scripts/mpi_env.sh"

JOB="$SHARDQ_SOURCE_DIR/jobs/demo-engram-nvfp4.toml"
WORK="$(mktemp -d)"
STARTED_PIDS=()
MOUNTS=()

cleanup() {
  local pid mount_point
  for pid in "${STARTED_PIDS[@]:-}"; do
    [[ -n "$pid" ]] && kill_tree "$pid" 2>/dev/null || true
  done
  for mount_point in "${MOUNTS[@]:-}"; do
    [[ -n "$mount_point" ]] && umount "$mount_point" 2>/dev/null || true
  done
  rm -rf "$WORK"
}
trap cleanup EXIT

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

note() { echo "--- $*" >&2; }

now() { date +%s.%N; }
seconds_since() { python3 -c "import sys,time; print(f'{time.time()-float(sys.argv[1]):.3f}')" "$1"; }

# kill -9 a process and its children (mpirun's ranks run in their own process groups).
kill_tree() {
  local pid=$1 child
  for child in $(pgrep -P "$pid" 2>/dev/null || true); do kill_tree "$child"; done
  kill -9 "$pid" 2>/dev/null || true
}

# The ranks mpirun started: its children running the shardq binary.
rank_pids() {
  local pid
  for pid in $(pgrep -P "$1" 2>/dev/null || true); do
    [[ "$(readlink "/proc/$pid/exe" 2>/dev/null)" == "$(readlink -f "$SHARDQ_BIN")" ]] && echo "$pid"
  done
  return 0
}

# The pid of rank R under mpirun pid P (from the rank's environment).
rank_pid() {
  local parent=$1 rank=$2 pid
  for pid in $(rank_pids "$parent"); do
    if tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -x "OMPI_COMM_WORLD_RANK=$rank" >/dev/null; then
      echo "$pid"
      return 0
    fi
  done
  return 1
}

# mount_scratch DIR FSTYPE [OPTIONS]: a file system of that type mounted at DIR for this
# test, unmounted on exit; the test is skipped (exit 77) where mounting is not permitted.
mount_scratch() {
  local dir=$1 fstype=$2
  mkdir -p "$dir"
  mount -t "$fstype" ${3:+-o "$3"} "$fstype" "$dir" 2>/dev/null || {
    echo "cannot mount a $fstype here"
    exit 77
  }
  MOUNTS+=("$dir")
}

# edit_tensor FOLDER TENSOR EDIT: one tensor of a checkpoint folder dropped, reshaped or
# its data doctored, copy-on-write (tests/resume/edit_tensor.py says which edits).
edit_tensor() { python3 "$SHARDQ_SOURCE_DIR/tests/resume/edit_tensor.py" "$@"; }

# copy_of NAME COPY: $WORK/COPY, a copy of $WORK/NAME whose files are hard links.
copy_of() { cp -al "$WORK/$1" "$WORK/$2"; }

# make_fixture DIR [engram_vocab]: the miniature checkpoint (smaller tables = faster tests).
make_fixture() {
  "$SHARDQ_BIN" fixture --preset dsv41-mini --out "$1" --engram-vocab "${2:-600}" >/dev/null
}

# shardq_cmd NP ARGS...: the command line of `shardq run` on NP ranks (NP=0: no mpirun).
shardq_cmd() {
  local np=$1
  shift
  if [[ "$np" == 0 ]]; then
    echo "$SHARDQ_BIN" run "$@"
  else
    echo mpirun -np "$np" "$SHARDQ_BIN" run "$@"
  fi
}

# run_shardq NP LOG ARGS...: runs to the end; returns shardq's (or mpirun's) exit code.
run_shardq() {
  local np=$1 log=$2
  shift 2
  local rc=0
  # shellcheck disable=SC2046
  $(shardq_cmd "$np" "$@") >"$log" 2>&1 || rc=$?
  return $rc
}

# wait_for_log LOG PID PATTERN [COUNT]: returns once LOG holds COUNT (default 1) lines
# matching PATTERN (e.g. rank 0's "assign 2 task" under SHARDQ_LOG=debug: quantize work is
# under way); fails when PID ends first or after 60 s.
wait_for_log() {
  local log=$1 pid=$2 pattern=$3 count=${4:-1} i
  for i in $(seq 1 1200); do
    (($(grep -c -- "$pattern" "$log" 2>/dev/null) >= count)) && return 0
    kill -0 "$pid" 2>/dev/null || fail "the run ended before $count lines of '$pattern': $(tail -5 "$log")"
    sleep 0.05
  done
  fail "no $count lines of '$pattern' within 60 s ($log)"
}

# wait_for_done_chunks CHECKPOINT PID COUNT [SECONDS]: returns once the checkpoint records
# COUNT chunks done (work is under way, without the debug log that wait_for_log reads);
# fails when PID ends first or after SECONDS (default 60).
wait_for_done_chunks() {
  local checkpoint=$1 pid=$2 count=$3 seconds=${4:-60} i
  for i in $(seq 1 $((seconds * 10))); do
    (($(done_chunks "$checkpoint" 2>/dev/null | wc -l) >= count)) && return 0
    kill -0 "$pid" 2>/dev/null || fail "the run ended before $checkpoint recorded $count chunks done"
    sleep 0.1
  done
  fail "$checkpoint did not record $count chunks done within $seconds s"
}

# killed_run SPEC NP LOG ARGS...: `shardq run ARGS...` on NP ranks (0 = no mpirun) into
# LOG, killed at SPEC: a crash point (SHARDQ_CRASH_AT, e.g. quantize:30: kill -9 there) or
# wall:SECONDS (the whole process tree kill -9'd that long after the start). Returns the
# run's exit code (0 when it ended first).
killed_run() {
  local spec=$1 np=$2 log=$3 rc=0
  shift 3
  if [[ $spec == wall:* ]]; then
    # shellcheck disable=SC2046
    $(shardq_cmd "$np" "$@") >"$log" 2>&1 &
    local pid=$!
    STARTED_PIDS+=("$pid")
    sleep "${spec#wall:}"
    kill_tree "$pid"
    wait "$pid" || rc=$?
  else
    SHARDQ_CRASH_AT=$spec run_shardq "$np" "$log" "$@" || rc=$?
  fi
  return $rc
}

# The checkpoint's records as an independent reader sees them: the HDF5 base through
# h5dump, then the journal replayed (tests/resume/checkpoint_records.py).
checkpoint_records() { python3 "$SHARDQ_SOURCE_DIR/tests/resume/checkpoint_records.py" "$@"; }

# done_chunks CHECKPOINT: "T I" for every chunk the checkpoint records done (task T, chunk I).
done_chunks() { checkpoint_records "$1" done; }

# pending_count CHECKPOINT chunks|reductions: how many records are not done; 0 while there
# is no checkpoint yet.
pending_count() { checkpoint_records "$1" pending "$2"; }

# finished_steps CHECKPOINT: the checkpoint's finished steps, one a line.
finished_steps() { checkpoint_records "$1" finished; }

# assigned_quantize LOG: "T I" for every quantize assignment rank 0 logged (SHARDQ_LOG=debug).
assigned_quantize() {
  grep -o 'assign 2 task [0-9]* index [0-9]*' "$1" | awk '{print $4, $6}' || true
}

# check_no_redo BEFORE_DONE LOG: no chunk recorded done before the run was assigned again.
check_no_redo() {
  local redone
  redone=$(comm -12 <(sort -u "$1") <(assigned_quantize "$2" | sort -u))
  [[ -z "$redone" ]] || fail "chunks recorded done were computed again: $(echo "$redone" | tr '\n' ';') (log $2)"
}

# check_resumed_without_redo BEFORE_DONE LOG: check_no_redo for a resume that had chunks
# left to do, so it must have logged assignments (SHARDQ_LOG=debug): with none the check
# would see nothing.
check_resumed_without_redo() {
  [[ -n $(assigned_quantize "$2") ]] || fail "no quantize assignment logged in $2: the no-redo check would be vacuous"
  check_no_redo "$@"
}

# digest DST: one line per output file: sha256 and name; the report is compared without
# its timing fields (run section, per-table chunks/compute_seconds/rows_per_compute_second).
digest() {
  python3 - "$1" <<'EOF'
import hashlib, json, os, sys
dst = sys.argv[1]
for name in sorted(os.listdir(dst)):
    path = os.path.join(dst, name)
    if name.startswith(".") or os.path.isdir(path):
        continue
    data = open(path, "rb").read()
    if name in ("engram-nvfp4.json", "nvfp4-1017.json", "w8a8-int8.json"):  # the reports
        report = json.loads(data)
        report.pop("run", None)
        for table in report.get("tables", []):
            for key in ("chunks", "compute_seconds", "rows_per_compute_second"):
                table.pop(key, None)
        data = json.dumps(report, sort_keys=True).encode()
    print(hashlib.sha256(data).hexdigest(), name)
EOF
}

# same_output REFERENCE_DST DST: byte-identical outputs (report without timing fields).
same_output() {
  local a b
  a=$(digest "$1")
  b=$(digest "$2")
  if [[ "$a" != "$b" ]]; then
    diff <(echo "$a") <(echo "$b") >&2 || true
    fail "$2 differs from the uninterrupted output $1"
  fi
  [[ -n "$(ls "$2"/*.partial 2>/dev/null)" ]] && fail "$2 still holds .partial files"
  return 0
}
