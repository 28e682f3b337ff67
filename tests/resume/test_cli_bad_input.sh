#!/usr/bin/env bash
# Bad input through the CLI (issue 2 point 8): every case exits non-zero with one error line
# that names the file and the problem.
# `shardq inspect FILE` on a small safetensors file made here with python, then broken:
#  truncated (data shorter than the header says), header length beyond the file, header
#  not JSON, overlapping offsets, gapped offsets, unknown dtype, shape/bytes mismatch.
# `shardq run JOB --src COPY` on a fixture copy whose index names, for one tensor, a shard
#  with `../` (a real file outside the folder), an absolute shard path (a real file), and a
#  shard that does not exist: the error line names the index (and the shard), no output
#  index is written in dst.
# `shardq run --set section.key=v` where the job file holds `section` as a plain value.
# The other commands: an unknown subcommand, a negative or zero count, an unknown preset or
# study method are usage errors (exit 2) naming the option; `fixture` into a folder that is
# not empty, `study` with fewer sampled rows than hash columns and `inspect` into a full
# disk are errors (exit 1); a `study --out` path with a quote and `$(...)` is a path (the
# plot is drawn there, nothing is run).
# Each command's whole output (stdout and stderr) must be that one `shardq: error:` line.
# Env: SHARDQ_BIN, SHARDQ_SOURCE_DIR. Exit 77 (skip) without SHARDQ_BIN.
# shellcheck source-path=SCRIPTDIR source=counting_lib.sh
source "$(dirname "$0")/counting_lib.sh"

# A valid file (a: F32 [2, 3] = 24 bytes, b: BF16 [4] = 8, c: U8 [5] = 5) and one broken
# copy per case, named after the case.
python3 - "$work" <<'PY'
import json, struct, sys
out = sys.argv[1]
good = {"a": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]},
        "b": {"dtype": "BF16", "shape": [4], "data_offsets": [24, 32]},
        "c": {"dtype": "U8", "shape": [5], "data_offsets": [32, 37]}}
data = bytes(range(37))

def write(name, header, data=data, length=None):
    text = json.dumps(header).encode() if isinstance(header, dict) else header
    with open(f"{out}/{name}.safetensors", "wb") as f:
        f.write(struct.pack("<Q", len(text) if length is None else length) + text + data)

def changed(tensor, **fields):
    header = json.loads(json.dumps(good))
    header[tensor].update(fields)
    return header

write("good", good)
write("truncated", good, data[:30])
write("header-length", good, length=10_000)
write("not-json", b'{"a": {"dtype": "F32", "shape": [2, 3], oops}}')
write("overlap", changed("b", data_offsets=[20, 28]) | {"c": {"dtype": "U8", "shape": [9], "data_offsets": [28, 37]}})
write("gap", changed("b", data_offsets=[28, 36]) | {"c": {"dtype": "U8", "shape": [1], "data_offsets": [36, 37]}})
write("dtype", changed("b", dtype="F7"))
write("shape", changed("a", shape=[2, 4]))
PY

# The good file inspects cleanly, so each failure below comes from its one change.
"$SHARDQ_BIN" inspect "$work/good.safetensors" >"$work/good.log" 2>&1 ||
  { fail "good: inspect of the valid file failed"; cat "$work/good.log"; }

# check_error_line LABEL LOG WORDS...: the log is one error line that names each of WORDS.
check_error_line() {
  local label=$1 log=$2 line word before=$failures
  shift 2
  line=$(head -n 1 "$log")
  if [ "$(wc -l <"$log")" -ne 1 ] || [[ "$line" != "shardq: error: "* ]]; then
    fail "$label: the output is not one error line:"
    cat "$log"
    return 0
  fi
  for word in "$@"; do
    [[ "$line" == *"$word"* ]] || fail "$label: the error does not say '$word': $line"
  done
  [ "$failures" -ne "$before" ] || echo "ok: $label: $line"
}

check_inspect() { # case problem_words...
  local name=$1 file="$work/$1.safetensors" log="$work/$1.log"
  shift
  if "$SHARDQ_BIN" inspect "$file" >"$log" 2>&1; then fail "$name: inspect exited 0"; return 0; fi
  check_error_line "$name" "$log" "$file" "$@"
}

check_inspect truncated "reach past the end of the file (data buffer holds 30 bytes)" "tensor 'b'"
check_inspect header-length "header length 10000" "past the end of the file"
check_inspect not-json "not valid JSON"
check_inspect overlap "overlap" "tensor 'b'"
check_inspect gap "a gap of 4 bytes" "tensor 'b'"
check_inspect dtype "unknown dtype" '"F7"'
check_inspect shape "hold 24 bytes but F32 [2, 4] needs 32"

# Fixture copies: shards linked, the index a real copy whose first entry points elsewhere.
"$SHARDQ_BIN" fixture --preset dsv41-mini --out "$work/src" --engram-vocab 600 >/dev/null
index_name=model.safetensors.index.json
first_shard=$(python3 -c 'import json, sys; print(next(iter(json.load(open(sys.argv[1]))["weight_map"].values())))' \
  "$work/src/$index_name")

check_run() { # case shard_name problem_words...
  local name=$1 shard=$2 copy="$work/src-$1" dst="$work/out-$1" log="$work/run-$1.log"
  shift 2
  cp -al "$work/src" "$copy"
  rm "$copy/$index_name"
  python3 - "$work/src/$index_name" "$copy/$index_name" "$shard" <<'PY'
import json, sys
index = json.load(open(sys.argv[1]))
tensor = next(iter(index["weight_map"]))
index["weight_map"][tensor] = sys.argv[3]
json.dump(index, open(sys.argv[2], "w"), indent=2)
PY
  if "$SHARDQ_BIN" run "$job" --src "$copy" --dst "$dst" --set 'quant.method="rtn"' >"$log" 2>&1; then
    fail "$name: shardq run exited 0"
    return 0
  fi
  check_error_line "$name" "$log" "$copy/$index_name" "$@"
  [ ! -e "$dst/$index_name" ] || fail "$name: an output index was written"
}

check_run escape "../src/$first_shard" "'../src/$first_shard'" "contains '/'" "plain file names"
check_run absolute "$work/src/$first_shard" "'$work/src/$first_shard' is an absolute path"
check_run missing model-00099-of-00099.safetensors "shard 'model-00099-of-00099.safetensors'" "is missing"

# --set into a section the job file holds as a plain value (it crashed, rc 139).
printf 'run = 5\n[job]\nrecipe = "w8a8-int8"\n' >"$work/value-section.toml"
if "$SHARDQ_BIN" run "$work/value-section.toml" --src "$work/src" --dst "$work/out-value" --set run.threads=2 \
  >"$work/value-section.log" 2>&1; then
  fail "set-into-value: the run succeeded"
else
  rc=$?
  [ "$rc" -eq 1 ] || fail "set-into-value: exit $rc, 1 expected"
  check_error_line set-into-value "$work/value-section.log" "--set 'run.threads=2'" "'run' in the job file is a value"
fi

# expect_exit LABEL CODE TEXT ARGS...: shardq ARGS exits CODE and its output says TEXT.
expect_exit() {
  local label=$1 code=$2 text=$3 rc=0
  shift 3
  "$SHARDQ_BIN" "$@" >"$work/$label.log" 2>&1 || rc=$?
  [ "$rc" -eq "$code" ] || { fail "$label: exit $rc, $code expected"; cat "$work/$label.log"; return 0; }
  grep -qF -- "$text" "$work/$label.log" || { fail "$label: the output does not say '$text'"; cat "$work/$label.log"; }
  echo "ok: $label: exit $rc: $(head -n 1 "$work/$label.log")"
}
expect_exit unknown-subcommand 2 "unknown subcommand 'bogus'" bogus
expect_exit negative-vocab 2 "--engram-vocab: must be a whole number above 0, not -5" fixture --out "$work/f-neg" --engram-vocab -5
expect_exit zero-sample 2 "--sample: must be a whole number above 0, not 0" study --src "$work/src" --layer 1 --sample 0
expect_exit unknown-preset 2 "--preset: foo not in" fixture --out "$work/f-preset" --preset foo
expect_exit study-method 2 "'fast' is not a method" study --src "$work/src" --layer 1 --methods rtn,fast
expect_exit set-fraction 1 "key 'run.rows_per_chunk' = 2048.5 (from the file or a --set) is not a whole number" \
  run "$SHARDQ_SOURCE_DIR/jobs/demo-w8a8-int8.toml" --src "$work/src" --dst "$work/o-set" --set run.rows_per_chunk=2048.5
expect_exit set-unquoted 1 "key 'job.dst' = true (from the file or a --set) is not a string (in quotes" \
  run "$SHARDQ_SOURCE_DIR/jobs/demo-w8a8-int8.toml" --src "$work/src" --set job.dst=true
expect_exit study-method-twice 2 "'rtn' is given twice" study --src "$work/src" --layer 1 --methods rtn,rtn
# An empty path (`--dst "$OUT"` with OUT unset) is a usage error, never the job file's own
# dst or src: the run would write where the job file points.
sed "s#^dst = .*#dst = \"$work/job-dst\"#" "$SHARDQ_SOURCE_DIR/jobs/demo-w8a8-int8.toml" >"$work/job-dst.toml"
expect_exit empty-dst 2 "--dst: must not be empty (an unset variable?)" run "$work/job-dst.toml" --src "$work/src" --dst ""
expect_exit empty-src 2 "--src: must not be empty" run "$work/job-dst.toml" --src "" --dst "$work/o-empty"
expect_exit empty-checkpoint 2 "--checkpoint: must not be empty" run "$work/job-dst.toml" --src "$work/src" --checkpoint ""
expect_exit empty-verify-dst 2 "--dst: must not be empty" verify --src "$work/src" --dst "" "$work/job-dst.toml"
expect_exit empty-status 2 "checkpoint: must not be empty" status ""
[[ ! -e $work/job-dst && ! -e $work/o-empty ]] || fail "a run with an empty path wrote an output"
# A malformed --set is a usage error, like any malformed option.
expect_exit set-malformed 2 "--set: expected section.key=value, not '=x'" run "$work/job-dst.toml" --src "$work/src" --set =x
expect_exit set-no-section 2 "--set: expected section.key=value, not 'foo=1'" verify --src "$work/src" --dst "$work/o-empty" --set foo=1
# A mistyped ignore entry would leave the module it meant INT8: refused before any work.
expect_exit ignore-typo 1 "quant.ignore entry 'attn.wkvv' matches no tensor of the source, though it has attn linears (" \
  run "$work/job-dst.toml" --src "$work/src" --dst "$work/o-typo" --set 'quant.ignore=["vision.", "aligner.",
  "attn.compressor.wkv", "attn.compressor.wgate", "attn.indexer.weights_proj", "attn.indexer.wk", "attn.wq_a",
  "attn.wkvv", "attn.wo_a", "engram.wkv"]'
[[ ! -e $work/o-typo ]] || fail "a run with a mistyped ignore entry wrote an output"
[ ! -e "$work/f-neg" ] && [ ! -e "$work/f-preset" ] || fail "a refused fixture made its folder"
expect_exit fixture-not-empty 1 "$work/src is not empty" fixture --out "$work/src"
expect_exit study-sample 1 "--sample 5: layer 1 has 24 hash columns" study --src "$work/src" --layer 1 --sample 5 --methods rtn
rc=0
"$SHARDQ_BIN" inspect "$work/good.safetensors" >/dev/full 2>"$work/full.log" || rc=$?
[ "$rc" -eq 1 ] && grep -q "No space left" "$work/full.log" || { fail "inspect into a full disk: exit $rc"; cat "$work/full.log"; }
study_out="$work/it's \$(touch $work/ran)"
if command -v gnuplot >/dev/null; then
  "$SHARDQ_BIN" study --src "$work/src" --layer 1 --sample 48 --methods rtn --out "$study_out" >"$work/study.log" 2>&1 ||
    { fail "study into a folder named with a quote failed"; cat "$work/study.log"; }
  [ -s "$study_out/study.png" ] || fail "study drew no plot in '$study_out'"
  [ ! -e "$work/ran" ] || fail "study ran a command from its --out path"
  echo "ok: study --out '$study_out': plot drawn, nothing run"
fi

[ "$failures" -eq 0 ] || { echo "test_cli_bad_input: $failures failures"; exit 1; }
echo "test_cli_bad_input: all passed"
