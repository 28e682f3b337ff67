#!/usr/bin/env bash
# Resume does not depend on the rank count: a run interrupted on 4 ranks (kill -9 in
# the quantize stage, and for gptq-mse also right after the GPTQ factors are saved) and
# resumed on 1 rank gives the bytes of an uninterrupted 1-rank run, and no chunk
# recorded done is computed again.
source "$(dirname "$0")/../resume/lib.sh"
command -v mpirun >/dev/null || { echo "no mpirun"; exit 77; }

# case NAME METHOD CRASH...: interrupted on 4 ranks at each CRASH in turn, then resumed on 1.
resume_case() {
  local name=$1 method=$2
  shift 2
  local common=(--src "$WORK/src" --set "quant.method=$method" --set run.rows_per_chunk=512)
  run_shardq 0 "$WORK/$name.ref.log" "$JOB" "${common[@]}" --dst "$WORK/$name.ref" || fail "$name: uninterrupted run failed"
  local dst="$WORK/$name" crash fired=()
  for crash in "$@"; do
    # At most the chunks still to do (a fast machine did more); before the first save there
    # is no checkpoint, and every chunk is still to do.
    if [[ $crash == quantize:* && -f $dst/.shardq/checkpoint.h5 ]]; then
      local left
      left=$(pending_count "$dst/.shardq/checkpoint.h5" chunks)
      ((left > 0)) || continue
      crash="quantize:$((left < ${crash#quantize:} ? left : ${crash#quantize:}))"
    fi
    # Paced (50 ms more a chunk) so that a save kill lands before the last chunk is recorded.
    SHARDQ_TEST_CHUNK_DELAY_MS=50 SHARDQ_CRASH_AT=$crash run_shardq 4 "$WORK/$name.$crash.log" "$JOB" "${common[@]}" --dst "$dst" &&
      fail "$name: the crash at $crash did not happen"
    fired+=("$crash")
  done
  [[ " ${fired[*]} " == *" quantize:"* ]] || fail "$name: no kill in the quantize stage (fired: ${fired[*]})"
  done_chunks "$dst/.shardq/checkpoint.h5" >"$WORK/$name.done"
  echo "$name: interrupted on 4 ranks at ${fired[*]}, $(wc -l <"$WORK/$name.done") chunks done"
  (($(wc -l <"$WORK/$name.done") > 0)) || fail "$name: no chunk recorded done before the resume"
  SHARDQ_LOG=debug run_shardq 0 "$WORK/$name.resume.log" "$JOB" "${common[@]}" --dst "$dst" ||
    fail "$name: resume on 1 rank failed: $(tail -3 "$WORK/$name.resume.log")"
  check_resumed_without_redo "$WORK/$name.done" "$WORK/$name.resume.log"
  same_output "$WORK/$name.ref" "$dst"
}

make_fixture "$WORK/src"
resume_case mse mse quantize:8 save:2 quantize:8
# gptq-mse on a smaller fixture: its factor stage is the slow part.
rm -rf "$WORK/src"
make_fixture "$WORK/src" 100
resume_case gptq gptq-mse factors:1 factors:1 save:2 quantize:4
echo "PASS: interrupted on 4 ranks, resumed on 1, same bytes"
