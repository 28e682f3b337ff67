#!/usr/bin/env bash
# Threads per rank (docs/design.md "Threads"): the same bytes and report figures for any
# run.threads, on one rank and on two:
#  1. engram-nvfp4, all four methods, threads 1, 2 and 3 on -np 1 and -np 2, chunks of 100
#     rows so that every thread gets chunks (gptq: its factors spread over the threads too);
#  2. nvfp4-1017 and w8a8-int8, threads 1 and 3 on -np 1 and -np 2;
#  3. the report records each rank's threads, `shardq status` and the progress lines show
#     rows/s per rank, and run.threads left unset means the cores in the rank's affinity
#     mask (taskset -c 0: 1 thread).
# shellcheck source=../resume/lib.sh
source "$(dirname "$0")/../resume/lib.sh"

make_fixture "$WORK/src"
"$SHARDQ_BIN" fixture --preset dsv41-mini-ref-nvfp4 --out "$WORK/ref" --engram-vocab 600 >/dev/null

# check_variants NAME JOB ARGS -- VARIANT...: every "NP:THREADS" variant gives the bytes of
# the first one.
check_variants() {
  local name=$1 job=$2 first="" variant np threads dst
  shift 2
  local args=()
  while [[ "$1" != -- ]]; do args+=("$1"); shift; done
  shift
  for variant in "$@"; do
    np=${variant%:*} threads=${variant#*:}
    dst="$WORK/$name-np$np-t$threads"
    run_shardq "$np" "$dst.log" "$job" --src "$WORK/src" --dst "$dst" "${args[@]}" \
      --set run.rows_per_chunk=100 --set "run.threads=$threads" || fail "$name np $np threads $threads: $(tail -3 "$dst.log")"
    grep -q "x $threads threads" "$dst.log" || fail "$name np $np: the log does not show $threads threads per rank"
    if [[ -z "$first" ]]; then
      first=$dst
    else
      same_output "$first" "$dst"
      rm -rf "$dst"
    fi
  done
  note "$name: $* identical"
}

ALL=(1:1 1:2 1:3 2:1 2:2 2:3)
for method in ${SHARDQ_THREADS_METHODS:-rtn mse gptq gptq-mse}; do
  check_variants "engram-$method" "$JOB" --set "quant.method=\"$method\"" -- "${ALL[@]}"
done
check_variants 1017 "$SHARDQ_SOURCE_DIR/jobs/demo-1017-nvfp4.toml" --set "quant.input_scales_from=\"$WORK/ref\"" -- 1:1 1:3 2:1 2:3
check_variants int8 "$SHARDQ_SOURCE_DIR/jobs/demo-w8a8-int8.toml" -- 1:1 1:3 2:1 2:3

# The report's run section: two ranks of three threads.
run_shardq 2 "$WORK/report.log" "$JOB" --src "$WORK/src" --dst "$WORK/report" --set run.threads=3 ||
  fail "report run: $(tail -3 "$WORK/report.log")"
python3 - "$WORK/report/engram-nvfp4.json" <<'PY' || fail "the report does not record threads per rank"
import json, sys
run = json.load(open(sys.argv[1]))["run"]
assert run["ranks"] == 2 and run["threads_per_rank"] == [3, 3], run
PY

# status: a line per rank with its host, threads and rows/s; the progress lines per rank.
"$SHARDQ_BIN" status "$WORK/report/.shardq/checkpoint.h5" >"$WORK/status.txt" || fail "status failed"
[[ $(grep -cE '^  rank +[01]  .+  3 threads  [0-9]+ rows  [0-9]+ rows/s$' "$WORK/status.txt") == 2 ]] ||
  fail "status does not show both ranks' threads and rows/s: $(cat "$WORK/status.txt")"
grep -qE 'rows/s per rank: [0-9.e+]+ [0-9.e+]+$' "$WORK/report.log" || fail "the progress lines do not show rows/s per rank"

# Unset: the affinity mask decides (one core here).
taskset -c 0 "$SHARDQ_BIN" run "$JOB" --src "$WORK/src" --dst "$WORK/affinity" >"$WORK/affinity.log" 2>&1 ||
  fail "affinity run: $(tail -3 "$WORK/affinity.log")"
grep -q "1 ranks x 1 threads" "$WORK/affinity.log" || fail "taskset -c 0 did not give 1 thread: $(grep threads "$WORK/affinity.log")"
echo "test_threads: every thread count gives the same bytes"
