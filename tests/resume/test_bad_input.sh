#!/usr/bin/env bash
# Bad input to `shardq run` (docs/design.md "Bad input": one clear message, non-zero exit, no output
# that claims to be complete):
#  1. a NaN E4M3 code (0x7F, 0xFF) or a NaN E8M0 scale (0xFF) in an Engram table: the error
#     names file, tensor, row and column; no changed shard under its final name, no index;
#  2. engram_num_embeddings in config.json that does not match the table: refused before
#     any work (no .partial file);
#  3. a complete output in dst: refused without --force (message says --force, bytes
#     untouched), overwritten with --force;
#  4. an unknown job key (in the file or through --set), or a [quant] key the recipe does not
#     read (quant.ignore or quant.keep_mtp on engram-nvfp4, quant.method on w8a8-int8): the
#     error names the key and the keys the recipe reads;
#  5. a .safetensors file in dst that the output does not name (refused with --force too,
#     left as it was), or one in the source that its index does not name (refused);
#  6. an index that does not match its shards: refused, naming the tensor.
# Env: SHARDQ_BIN, SHARDQ_SOURCE_DIR. Exit 77 (skip) without SHARDQ_BIN.
# shellcheck source-path=SCRIPTDIR source=counting_lib.sh
source "$(dirname "$0")/counting_lib.sh"

# run_expect_failure LABEL LOG ARGS...: shardq run must exit non-zero.
run_expect_failure() {
  local label=$1 log=$2
  shift 2
  if "$SHARDQ_BIN" run "$job" --set 'quant.method="rtn"' "$@" >"$log" 2>&1; then
    fail "$label: shardq run succeeded"
    return 1
  fi
}

expect_in_log() { # label log text
  grep -qF -- "$3" "$2" || { fail "$1: the message does not say '$3':"; cat "$2"; }
}

# The file holding a tensor, from the source index.
shard_of() { # folder tensor
  python3 -c 'import json, sys; print(json.load(open(sys.argv[1] + "/model.safetensors.index.json"))["weight_map"][sys.argv[2]])' "$1" "$2"
}

# Overwrite one byte of a [rows, cols] tensor with one byte per element, at (row, col).
patch_byte() { # folder tensor row col byte
  python3 - "$@" <<'PY'
import json, struct, sys
folder, tensor, row, col, byte = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5], 0)
shard = json.load(open(folder + "/model.safetensors.index.json"))["weight_map"][tensor]
with open(f"{folder}/{shard}", "r+b") as f:
    (n,) = struct.unpack("<Q", f.read(8))
    entry = json.loads(f.read(n))[tensor]
    rows, cols = entry["shape"]
    assert row < rows and col < cols and entry["data_offsets"][1] - entry["data_offsets"][0] == rows * cols
    f.seek(8 + n + entry["data_offsets"][0] + row * cols + col)
    f.write(bytes([byte]))
PY
}

# A copy of the fixture whose table shards are real copies (patched below), the rest links.
fixture_copy() { # name
  local copy="$work/$1"
  cp -al "$work/src" "$copy"
  for layer in 1 14; do
    local shard
    shard=$(shard_of "$copy" "layers.$layer.engram.embed.weight")
    rm "$copy/$shard"
    cp "$work/src/$shard" "$copy/$shard"
  done
  rm "$copy/config.json"
  cp "$work/src/config.json" "$copy/config.json"
  echo "$copy"
}

no_complete_output() { # label dst
  local label=$1 dst=$2 layer shard
  for layer in 1 14; do
    shard=$(shard_of "$work/src" "layers.$layer.engram.embed.weight")
    [ ! -e "$dst/$shard" ] || fail "$label: $shard has its final name after the failure"
  done
  [ ! -e "$dst/model.safetensors.index.json" ] || fail "$label: an index was written"
  [ ! -e "$dst/engram-nvfp4.json" ] || fail "$label: a report was written"
}

check_nan_in_table() { # label tensor row col byte column_word
  local label=$1 tensor=$2 row=$3 col=$4 byte=$5 column_word=$6
  local src dst="$work/out-$label"
  src=$(fixture_copy "src-$label")
  patch_byte "$src" "$tensor" "$row" "$col" "$byte"
  run_expect_failure "$label" "$dst.log" --src "$src" --dst "$dst" || return 0
  expect_in_log "$label" "$dst.log" "$src/$(shard_of "$src" "$tensor"): $tensor: row $row "
  expect_in_log "$label" "$dst.log" "$column_word $col"
  no_complete_output "$label" "$dst"
  echo "ok: $label: $(grep -m1 'error' "$dst.log")"
}

check_layout_mismatch() {
  local src dst="$work/out-layout"
  src=$(fixture_copy src-layout)
  python3 - "$src/config.json" <<'PY'
import json, sys
config = json.load(open(sys.argv[1]))
config["text_config"]["engram_num_embeddings"][1] += 1
json.dump(config, open(sys.argv[1], "w"), indent=2)
PY
  run_expect_failure layout "$dst.log" --src "$src" --dst "$dst" || return 0
  expect_in_log layout "$dst.log" "engram_num_embeddings"
  if [ -d "$dst" ] && [ -n "$(find "$dst" -name '*.partial')" ]; then fail "layout: .partial files were created"; fi
  no_complete_output layout "$dst"
  echo "ok: layout: $(grep -m1 'error' "$dst.log")"
}

check_force() {
  local dst="$work/out-force" before after
  "$SHARDQ_BIN" run "$job" --src "$work/src" --dst "$dst" --set 'quant.method="rtn"' >"$dst.log" 2>&1 ||
    { fail "force: the first run failed"; cat "$dst.log"; return 0; }
  before=$(cd "$dst" && sha256sum ./*.safetensors ./*.json)
  # The same job again (a requeue after the last save) has nothing to do.
  "$SHARDQ_BIN" run "$job" --src "$work/src" --dst "$dst" --set 'quant.method="rtn"' >"$dst.same.log" 2>&1 ||
    fail "force: rerunning the finished job failed"
  grep -q "nothing to do" "$dst.same.log" || fail "force: the rerun did not say it had nothing to do"
  [ "$before" = "$(cd "$dst" && sha256sum ./*.safetensors ./*.json)" ] || fail "force: the rerun changed the output"
  # Another job (method) into the complete output is refused without --force.
  if run_expect_failure force "$dst.again.log" --src "$work/src" --dst "$dst" --set 'quant.method="mse"'; then
    expect_in_log force "$dst.again.log" "--force"
    after=$(cd "$dst" && sha256sum ./*.safetensors ./*.json)
    [ "$before" = "$after" ] || fail "force: the refused run changed the output"
    echo "ok: force: refused: $(grep -m1 'error' "$dst.again.log")"
  fi
  "$SHARDQ_BIN" run "$job" --src "$work/src" --dst "$dst" --set 'quant.method="mse"' --force >"$dst.force.log" 2>&1 ||
    { fail "force: the run with --force failed"; cat "$dst.force.log"; return 0; }
  grep -q '"method": "mse"' "$dst/engram-nvfp4.json" || fail "force: the report is not the new run's"
  echo "ok: force: overwritten with --force"
}

check_unknown_keys() {
  local dst="$work/out-keys" bad_job="$work/bad-job.toml"
  run_expect_failure unknown-set "$dst.set.log" --src "$work/src" --dst "$dst" --set 'quant.turbo_mode=1' &&
    expect_in_log unknown-set "$dst.set.log" "--set 'quant.turbo_mode=1': unknown key 'quant.turbo_mode'"
  sed 's/^\[run\]$/[run]\nwarp_speed = 9/' "$job" >"$bad_job"
  grep -q warp_speed "$bad_job" || { fail "unknown-file: could not add the key to the job"; return 0; }
  if "$SHARDQ_BIN" run "$bad_job" --src "$work/src" --dst "$dst" >"$dst.file.log" 2>&1; then
    fail "unknown-file: shardq run succeeded"
  else
    expect_in_log unknown-file "$dst.file.log" "$bad_job: unknown key 'run.warp_speed'"
  fi
  local key
  for key in 'quant.ignore=["attn.wkv"]' quant.keep_mtp=true 'quant.input_scales_from="/models/ref"'; do
    run_expect_failure "unread-$key" "$dst.unread.log" --src "$work/src" --dst "$dst" --set "$key" || continue
    expect_in_log "unread-$key" "$dst.unread.log" "--set: ${key%%=*} does nothing for recipe engram-nvfp4"
    expect_in_log "unread-$key" "$dst.unread.log" "it reads quant.method, quant.mse_candidates"
  done
  if "$SHARDQ_BIN" run "$SHARDQ_SOURCE_DIR/jobs/demo-w8a8-int8.toml" --src "$work/src" --dst "$dst" \
    --set 'quant.method="rtn"' >"$dst.int8.log" 2>&1; then
    fail "unread-int8: shardq run succeeded with quant.method on w8a8-int8"
  else
    expect_in_log unread-int8 "$dst.int8.log" "--set: quant.method does nothing for recipe w8a8-int8 (it reads quant.ignore)"
  fi
  # The same key from the file names the file.
  sed 's/^\[quant\]$/[quant]\nmethod = "rtn"/' "$SHARDQ_SOURCE_DIR/jobs/demo-w8a8-int8.toml" >"$work/int8-method.toml"
  if "$SHARDQ_BIN" run "$work/int8-method.toml" --src "$work/src" --dst "$dst" >"$dst.int8-file.log" 2>&1; then
    fail "unread-int8-file: shardq run succeeded with quant.method in a w8a8-int8 job file"
  else
    expect_in_log unread-int8-file "$dst.int8-file.log" "$work/int8-method.toml: quant.method does nothing for recipe w8a8-int8"
  fi
  [ ! -e "$dst" ] || [ -z "$(ls -A "$dst")" ] || fail "unknown keys: output was written"
  echo "ok: unknown keys: $(grep -m1 'error' "$dst.set.log"); $(grep -m1 'error' "$dst.file.log")"
  echo "ok: keys the recipe does not read: $(grep -m1 'error' "$dst.unread.log"); $(grep -m1 'error' "$dst.int8.log")"
}

# Stray .safetensors files: one in dst that the output does not name is refused, --force or
# not, and left as it was (it is not shardq's); one in the source that its index does not
# name is refused before dst is made (it would be linked into the output un-quantized).
check_stray_shards() {
  local dst="$work/out-stray" src
  mkdir -p "$dst"
  echo "another checkpoint's" >"$dst/model-00001-of-00009.safetensors"
  for force in "" --force; do
    # shellcheck disable=SC2086
    run_expect_failure "stray-dst$force" "$dst$force.log" --src "$work/src" --dst "$dst" $force || continue
    expect_in_log "stray-dst$force" "$dst$force.log" "model-00001-of-00009.safetensors"
    expect_in_log "stray-dst$force" "$dst$force.log" "does not name"
  done
  [ "$(cat "$dst/model-00001-of-00009.safetensors")" = "another checkpoint's" ] || fail "stray-dst: the stray file was changed"
  local written
  written=$(find "$dst" -mindepth 1 -maxdepth 1 ! -name .shardq ! -name model-00001-of-00009.safetensors -printf '%f ')
  [ -z "$written" ] || fail "stray-dst: the refused runs wrote $written"
  [ -z "$(find "$dst/.shardq" -type f 2>/dev/null)" ] || fail "stray-dst: the refused runs left a checkpoint"
  echo "ok: stray in dst: $(grep -m1 'error' "$dst--force.log")"
  src=$(fixture_copy src-stray)
  echo "consolidated" >"$src/consolidated.safetensors"
  run_expect_failure stray-src "$work/out-stray-src.log" --src "$src" --dst "$work/out-stray-src" || return 0
  expect_in_log stray-src "$work/out-stray-src.log" "consolidated.safetensors"
  [ ! -e "$work/out-stray-src" ] || fail "stray-src: dst was made"
  echo "ok: stray in the source: $(grep -m1 'error' "$work/out-stray-src.log")"
}

# An index that does not match the shards (a download of mixed revisions): a tensor under
# another shard than the one holding it, a name no shard holds, a tensor no entry names.
# Each is refused before dst is made, naming the tensor (the output index is made from the
# source's, and would otherwise name tensors where they are not).
check_index_against_shards() {
  local case src
  for case in moved ghost unnamed; do
    src=$(fixture_copy "src-index-$case")
    python3 - "$src/model.safetensors.index.json" "$case" <<'PY'
import json, os, sys
path, case = sys.argv[1], sys.argv[2]
index = json.load(open(path))
weights = index["weight_map"]
shards = sorted(set(weights.values()))
if case == "moved":
    weights["layers.0.attn.wq_b.weight"] = next(s for s in shards if s != weights["layers.0.attn.wq_b.weight"])
elif case == "ghost":
    weights["ghost.weight"] = shards[0]
else:
    del weights["layers.0.attn.wo_b.weight"]
os.unlink(path)  # a hard link of the fixture's: replaced, never written through
json.dump(index, open(path, "w"), indent=2)
PY
    run_expect_failure "index-$case" "$work/out-index-$case.log" --src "$src" --dst "$work/out-index-$case" || continue
    case $case in
      moved) expect_in_log index-moved "$work/out-index-moved.log" "names 'layers.0.attn.wq_b.weight' in model-0000" ;;
      ghost) expect_in_log index-ghost "$work/out-index-ghost.log" "names 'ghost.weight' in model-00001-of-00006.safetensors, but no shard holds it" ;;
      unnamed) expect_in_log index-unnamed "$work/out-index-unnamed.log" "holds 'layers.0.attn.wo_b.weight', which the index" ;;
    esac
    [ ! -e "$work/out-index-$case" ] || fail "index-$case: dst was made"
    echo "ok: index $case: $(grep -m1 'error' "$work/out-index-$case.log")"
  done
}

"$SHARDQ_BIN" fixture --preset dsv41-mini --out "$work/src" >/dev/null
table=layers.14.engram.embed.weight
check_nan_in_table nan-7f "$table" 30001 77 0x7F column
check_nan_in_table nan-ff "$table" 41234 200 0xFF column
check_nan_in_table e8m0-ff layers.14.engram.embed.scale 12345 5 0xFF "column"
check_layout_mismatch
check_force
check_unknown_keys
check_stray_shards
check_index_against_shards
[ "$failures" -eq 0 ] || { echo "test_bad_input: $failures failures"; exit 1; }
echo "test_bad_input: all passed"
