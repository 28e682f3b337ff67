#!/usr/bin/env bash
# --force and --fresh start over next to an older checkpoint of the same job. Killed (kill
# -9) right after they rewrote the output's .partial files, before their first save, the
# plain command that follows must not trust that older checkpoint's chunks (their bytes
# are gone): it ends byte-identical to an uninterrupted run, and verify passes.
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"

JOBINT8="$SHARDQ_SOURCE_DIR/jobs/demo-w8a8-int8.toml"
make_fixture "$WORK/src"
ARGS=("$JOBINT8" --src "$WORK/src" --set run.threads=1)
run_shardq 0 "$WORK/ref.log" "${ARGS[@]}" --dst "$WORK/uninterrupted" || fail "uninterrupted run: $(tail -3 "$WORK/ref.log")"

check_start_over() {
  local flag=$1 dst="$WORK/out$1"
  # The older checkpoint: a complete run (--force) or one killed half-way (--fresh).
  if [[ $flag == --force ]]; then
    run_shardq 0 "$dst.first.log" "${ARGS[@]}" --dst "$dst" || fail "$flag: the first run failed"
  else
    killed_run quantize:20 0 "$dst.first.log" "${ARGS[@]}" --dst "$dst" --set run.rows_per_chunk=64 || true
  fi
  [[ -f "$dst/.shardq/checkpoint.h5" ]] || fail "$flag: the first run left no checkpoint"
  local rc=0
  killed_run outputs:1 0 "$dst.killed.log" "${ARGS[@]}" --dst "$dst" "$flag" || rc=$?
  ((rc != 0)) || fail "$flag: the run was not killed at outputs:1"
  ls "$dst"/*.partial >/dev/null 2>&1 || fail "$flag: the killed run left no .partial files"
  run_shardq 0 "$dst.resume.log" "${ARGS[@]}" --dst "$dst" || fail "$flag: the resume failed: $(tail -3 "$dst.resume.log")"
  same_output "$WORK/uninterrupted" "$dst"
  "$SHARDQ_BIN" verify --src "$WORK/src" --dst "$dst" "$JOBINT8" >"$dst.verify.log" ||
    { cat "$dst.verify.log"; fail "$flag: verify failed on the resumed output"; }
  echo "ok: $flag killed after rewriting the outputs, resumed to identical bytes"
}

check_start_over --force
check_start_over --fresh
echo "PASS: --force and --fresh killed before their first save resume to identical bytes"
