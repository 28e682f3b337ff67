#!/usr/bin/env bash
# `shardq verify` on doctored copies of a good w8a8-int8 output: each must FAIL (exit
# non-zero, a FAIL line naming the tensor or shard, "FAILED: N check(s) failed", the
# table row of the broken check counting the failure), never crash or pass:
#  1. a missing weight_scale (dropped from its shard and from the index);
#  2. a BF16 linear outside the ignore rules (an output made with an ignore list that
#     differs from the job verify is given: the demo list plus attn.wo_b), and an INT8
#     linear the ignore rules make BF16 (the demo list less attn.wq_a); and a run whose
#     list leaves out a natively BF16 linear (attn.indexer.weights_proj) refused before
#     it writes anything, naming the tensor;
#  3. one byte flipped in an Engram table (layers.1.engram.embed.weight, its shard copied
#     first: the output's is a hard link of the source's);
#  4. one INT8 code moved two steps (now 1.5 steps or more from its source value);
#  5. one row's weight_scale NaN, or +inf (codes unchanged);
#  6. a .safetensors file in the folder that the index does not name;
#  7. a report whose figures are not the output's: one all-zero row more for a kind, and
#     another kind's rel RMS error;
#  8. verify given another source: said in one line, each check's failures listed up to 20.
# Every case runs; those verify does not fail as it should are listed at the end.
# The good output itself verifies (OK) first, so each failure is the doctoring's.
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"

JOBINT8="$SHARDQ_SOURCE_DIR/jobs/demo-w8a8-int8.toml"
make_fixture "$WORK/src"
run_shardq 0 "$WORK/good.log" "$JOBINT8" --src "$WORK/src" --dst "$WORK/good" || fail "good run: $(tail -3 "$WORK/good.log")"
"$SHARDQ_BIN" verify --src "$WORK/src" --dst "$WORK/good" "$JOBINT8" >"$WORK/verify-good.log" ||
  { cat "$WORK/verify-good.log"; fail "verify fails the good output"; }

# expect_fail NAME DST CATEGORY TEXT [JOB]: verify of DST (against JOB, default the demo job)
# exits non-zero without crashing, prints a FAIL line containing TEXT, the FAILED summary,
# and a table row for CATEGORY with at least one failure. A case that does not is recorded
# (PROBLEMS) and the next case still runs; the test fails at the end listing them all.
PROBLEMS=()
problem() {
  PROBLEMS+=("$1: $2")
  echo "PROBLEM $1: $2 (log $WORK/verify-$1.log):" >&2
  sed 's/^/    /' "$WORK/verify-$1.log" | grep -v '^    [a-zA-Z].* \+[0-9]\+ \+0 *$' >&2 || true
}
expect_fail() {
  local name=$1 dst=$2 category=$3 text=$4 job=${5:-$JOBINT8} rc=0
  "$SHARDQ_BIN" verify --src "$WORK/src" --dst "$dst" "$job" >"$WORK/verify-$name.log" 2>&1 || rc=$?
  if ((rc == 0)); then problem "$name" "verify passed"; return 0; fi
  if grep -q 'shardq: error' "$WORK/verify-$name.log"; then
    problem "$name" "verify crashed instead of failing a check: $(grep 'shardq: error' "$WORK/verify-$name.log")"
    return 0
  fi
  # Not `grep | grep -q`: with pipefail, grep -q's early exit can fail the first grep (SIGPIPE).
  grep -qF -- "$text" <<<"$(grep '^FAIL  ' "$WORK/verify-$name.log")" || { problem "$name" "no FAIL line naming '$text'"; return 0; }
  grep -Eq '^FAILED: [1-9][0-9]* check\(s\) failed$' "$WORK/verify-$name.log" || { problem "$name" "no FAILED summary"; return 0; }
  awk -v c="$category" 'index($0, c) == 1 { split(substr($0, length(c) + 1), f, " "); if (f[2] + 0 > 0) found = 1 }
    END { exit !found }' "$WORK/verify-$name.log" || { problem "$name" "the table row '$category' counts no failure"; return 0; }
  echo "$name: $(grep '^FAIL  ' "$WORK/verify-$name.log" | grep -F -- "$text" | head -1)"
}

# 1. A missing weight_scale.
copy_of good no-scale
edit_tensor "$WORK/no-scale" layers.3.attn.wq_b.weight_scale drop
expect_fail missing-weight-scale "$WORK/no-scale" "I8 weights paired with F32 [out, 1] scales" \
  "layers.3.attn.wq_b.weight: has no weight_scale"
grep -q 'shardq: error' "$WORK/verify-missing-weight-scale.log" ||
  grep -q '^FAIL  tensor names: 1 missing, 0 extra' "$WORK/verify-missing-weight-scale.log" ||
  problem missing-weight-scale "the key diff does not count the missing tensor"

# ignore_list EXPR: the demo job's ignore list as EXPR (Python, of `ignore`) makes it, as
# JSON without spaces (run_shardq's command line is split on them).
ignore_list() {
  python3 -c 'import json, sys, tomllib
ignore = tomllib.load(open(sys.argv[1], "rb"))["quant"]["ignore"]
print(json.dumps(eval(sys.argv[2]), separators=(",", ":")))' "$JOBINT8" "$1"
}

# 2. A BF16 linear outside the ignore rules: made with attn.wo_b ignored too.
IGNORE_PLUS=$(ignore_list 'ignore + ["attn.wo_b"]')
run_shardq 0 "$WORK/wo_b.log" "$JOBINT8" --src "$WORK/src" --dst "$WORK/wo_b" --set "quant.ignore=$IGNORE_PLUS" ||
  fail "run with attn.wo_b ignored: $(tail -3 "$WORK/wo_b.log")"
grep -q '"layers.0.attn.wo_b.weight_scale"' "$WORK/wo_b/model.safetensors.index.json" && fail "attn.wo_b was not ignored"
expect_fail bf16-outside-ignore "$WORK/wo_b" "no BF16 linear outside the ignore rules" \
  "layers.0.attn.wo_b.weight: is BF16 but matches no ignore entry"

# 2b. The other way round: attn.wq_a left out of the ignore list, so its linears are INT8
#     where the demo job wants BF16.
IGNORE_LESS=$(ignore_list '[e for e in ignore if e != "attn.wq_a"]')
run_shardq 0 "$WORK/wq_a.log" "$JOBINT8" --src "$WORK/src" --dst "$WORK/wq_a" --set "quant.ignore=$IGNORE_LESS" ||
  fail "run with attn.wq_a not ignored: $(tail -3 "$WORK/wq_a.log")"
expect_fail int8-inside-ignore "$WORK/wq_a" "ignore-matched linears BF16" "layers.0.attn.wq_a.weight: is I8"

# 2c. attn.indexer.weights_proj (BF16 in the source, no scale: it cannot become INT8) left
#     out of the ignore list: the run is refused, and no output folder is made.
IGNORE_NO_PROJ=$(ignore_list '[e for e in ignore if e != "attn.indexer.weights_proj"]')
if run_shardq 0 "$WORK/no_proj.log" "$JOBINT8" --src "$WORK/src" --dst "$WORK/no_proj" --set "quant.ignore=$IGNORE_NO_PROJ"; then
  fail "a run with attn.indexer.weights_proj outside the ignore list succeeded"
fi
grep -q "^shardq: error: .*linear 'layers\.[0-9]*\.attn\.indexer\.weights_proj\.weight' is BF16 .*quant\.ignore" "$WORK/no_proj.log" ||
  fail "the refusal does not name the BF16 linear and quant.ignore: $(tail -3 "$WORK/no_proj.log")"
[[ ! -e "$WORK/no_proj" ]] || fail "the refused run made $WORK/no_proj"
echo "no-proj: refused: $(grep '^shardq: error' "$WORK/no_proj.log" | cut -c1-160)"

# 3. One byte of an Engram table.
copy_of good engram
edit_tensor "$WORK/engram" layers.1.engram.embed.weight byte=12345:0x01
engram_shard=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["weight_map"]["layers.1.engram.embed.weight"])' "$WORK/good/model.safetensors.index.json")
cmp -s "$WORK/src/$engram_shard" "$WORK/good/$engram_shard" || fail "the edit went through to the good output or the source"
[[ $(stat -c %i "$WORK/good/$engram_shard") != $(stat -c %i "$WORK/engram/$engram_shard") ]] || fail "the edit wrote through a hard link"
! cmp -s "$WORK/good/$engram_shard" "$WORK/engram/$engram_shard" || fail "the edit changed nothing"
expect_fail engram-byte "$WORK/engram" "Engram tables identical to the source" "$engram_shard"

# 4. One INT8 code of an FP4 expert and one of an FP8 linear, each in its own copy.
copy_of good code-fp4
edit_tensor "$WORK/code-fp4" layers.5.ffn.experts.3.w2.weight code=7,11
expect_fail int8-code-fp4 "$WORK/code-fp4" "INT8 rows within half a step, max |q| 127" \
  "layers.5.ffn.experts.3.w2.weight: row 7 column 11"
copy_of good code-fp8
edit_tensor "$WORK/code-fp8" layers.9.attn.wq_b.weight code=200,3
expect_fail int8-code-fp8 "$WORK/code-fp8" "INT8 rows within half a step, max |q| 127" \
  "layers.9.attn.wq_b.weight: row 200 column 3"

# 5. A weight_scale that is not a finite number (NaN, +inf), its codes unchanged.
for edit in nan:0x7FC00000 inf:0x7F800000; do
  copy_of good "scale-${edit%%:*}"
  edit_tensor "$WORK/scale-${edit%%:*}" layers.4.attn.wq_b.weight_scale "f32=10:${edit#*:}"
  expect_fail "scale-${edit%%:*}" "$WORK/scale-${edit%%:*}" "INT8 rows within half a step, max |q| 127" \
    "layers.4.attn.wq_b.weight: row 10"
done

# 6. A .safetensors file beside the output that its index does not name (a shard of
#    another checkpoint left in the folder).
copy_of good stray
cp "$(find "$WORK/good" -name '*.safetensors' | sort | head -1)" "$WORK/stray/model-00001-of-00099.safetensors"
expect_fail stray-shard "$WORK/stray" "no shard files outside the index" "model-00001-of-00099.safetensors"

# 7. The report's figures: one all-zero row more for ffn.experts.w2, the wq_b error halved.
copy_of good report
python3 - "$WORK/report/w8a8-int8.json" <<'PY'
import json, os, sys
path = sys.argv[1]
report = json.load(open(path))
kinds = {k["kind"]: k for k in report["int8"]}
kinds["ffn.experts.w2"]["all_zero_rows"] += 1
kinds["attn.wq_b"]["rel_rms_error"] /= 2
os.unlink(path)  # a hard link of the good output's: replaced, never written through
json.dump(report, open(path, "w"), indent=2)
PY
expect_fail report-zero-rows "$WORK/report" "W8A8 report figures" "int8 ffn.experts.w2 all_zero_rows: report"
expect_fail report-error "$WORK/report" "W8A8 report figures" "int8 attn.wq_b rel_rms_error: report"

# 8. Another source (the fixture of another seed): the first check says so in one line,
#    and no check lists more than its first 20 failures (the table counts them all).
"$SHARDQ_BIN" fixture --preset dsv41-mini --out "$WORK/src-other" --engram-vocab 600 --seed 7 >/dev/null
rc=0
"$SHARDQ_BIN" verify --src "$WORK/src-other" --dst "$WORK/good" "$JOBINT8" >"$WORK/verify-other-source.log" 2>&1 || rc=$?
if ((rc == 0)); then
  problem other-source "verify passed"
elif ! grep -q "^FAIL  $WORK/src-other: the report records another source" "$WORK/verify-other-source.log"; then
  problem other-source "no FAIL line saying the source is another"
elif ! grep -Eq "^made from this source +1 +1" "$WORK/verify-other-source.log"; then
  problem other-source "the table row 'made from this source' counts no failure"
else
  listed=$(grep -c '^FAIL  ' "$WORK/verify-other-source.log")
  counted=$(sed -nE 's/^FAILED: ([0-9]+) check\(s\) failed$/\1/p' "$WORK/verify-other-source.log")
  cut=$(grep -c "^FAIL  \.\.\. more of '" "$WORK/verify-other-source.log")
  ((cut >= 1 && counted > listed)) || problem other-source "$listed FAIL lines for $counted failures, $cut lists cut"
  echo "other-source: $(grep -m1 '^FAIL  ' "$WORK/verify-other-source.log" | cut -c1-160); $listed lines for $counted failures"
fi

# The good output was never written through.
"$SHARDQ_BIN" verify --src "$WORK/src" --dst "$WORK/good" "$JOBINT8" >"$WORK/verify-good-again.log" ||
  { cat "$WORK/verify-good-again.log"; fail "the doctoring changed the good output"; }
((${#PROBLEMS[@]} == 0)) || fail "verify missed ${#PROBLEMS[@]} doctored output(s): $(printf '%s; ' "${PROBLEMS[@]}")"
echo "PASS: verify fails each doctored w8a8-int8 output, naming what is wrong"
