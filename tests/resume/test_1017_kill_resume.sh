#!/usr/bin/env bash
# nvfp4-1017 killed (kill -9 at a crash point, or of the whole mpirun tree at a wall-clock
# instant) in every stage: expert reductions, encode chunks, checkpoint saves, shard
# finalization, index, config (with hf_quant_config.json) and report; each time the same
# command resumes, on 1 or 2 ranks. The end result is byte-identical to an uninterrupted run.
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"

JOB1017="$SHARDQ_SOURCE_DIR/jobs/demo-1017-nvfp4.toml"
make_fixture "$WORK/src"
"$SHARDQ_BIN" fixture --preset dsv41-mini-ref-nvfp4 --out "$WORK/ref" --engram-vocab 600 >/dev/null
# One compute thread per rank and 5 ms a chunk (1592 chunks): every run stays under way
# long enough for its kill, the wall-clock one included.
ARGS=("$JOB1017" --src "$WORK/src" --set "quant.input_scales_from=\"$WORK/ref\"" --set run.rows_per_chunk=64
  --set run.threads=1)
run_shardq 0 "$WORK/ref.log" "${ARGS[@]}" --dst "$WORK/uninterrupted" || fail "uninterrupted run: $(tail -3 "$WORK/ref.log")"

DST="$WORK/out"
export SHARDQ_TEST_CHUNK_DELAY_MS=5
kills=0
killed_stages=()
for spec in reduce:40 reduce:200 quantize:30 save:2 quantize:200 wall:1.5 save:3 finalize:1 finalize:1 index:1 config:1 report:1; do
  np=$((kills % 3))
  rc=0
  killed_run "$spec" "$np" "$WORK/$kills.log" "${ARGS[@]}" --dst "$DST" || rc=$?
  grep -q "shardq: error" "$WORK/$kills.log" && fail "$spec: the run failed instead of being killed: $(grep 'shardq: error' "$WORK/$kills.log")"
  echo "kill at $spec on $np ranks (0 = no mpirun): exit $rc"
  if ((rc != 0)); then
    kills=$((kills + 1))
    killed_stages+=("${spec%%:*}")
  fi
  sleep 0.2 # the killed ranks' ends
done
# Every stage's crash point must have fired at least once (the wall-clock kill may come
# after its run ended, and a repeated spec may find its stage done).
for stage in reduce quantize save finalize index config report; do
  [[ " ${killed_stages[*]} " == *" $stage "* ]] || fail "no kill in the $stage stage happened (killed: ${killed_stages[*]})"
done
((kills >= 8)) || fail "only $kills of the planned kills happened"
run_shardq 2 "$WORK/final.log" "${ARGS[@]}" --dst "$DST" || fail "final resume: $(tail -3 "$WORK/final.log")"
same_output "$WORK/uninterrupted" "$DST"
echo "PASS: nvfp4-1017 resumed to identical bytes after $kills kills"
