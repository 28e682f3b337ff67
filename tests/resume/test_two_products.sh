#!/usr/bin/env bash
# One output folder, two products (docs/checkpoint.md "--fresh, --force"):
#  1. --force with another recipe's job over a finished output removes that output's report
#     first: killed before the end, the folder must not hold a report beside .partial
#     shards; finished, it holds this product's report alone, and verify (no job file)
#     passes;
#  2. a folder holding two reports is refused by verify, naming both; a job file of
#     another recipe than the output's is refused, naming the output's;
#  3. verify takes --set as run did (an output made with --set is verified against its job
#     file with the same --set, and fails "made by this job" without it);
#  4. --fresh on a complete output is refused with the reason that it is complete, not
#     that no checkpoint says whose (the checkpoint is there).
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"

ENGRAM="$SHARDQ_SOURCE_DIR/jobs/demo-engram-nvfp4.toml"
INT8="$SHARDQ_SOURCE_DIR/jobs/demo-w8a8-int8.toml"
make_fixture "$WORK/src"
verify() { "$SHARDQ_BIN" verify --src "$WORK/src" "$@"; }

# 1. An Engram output, then the INT8 job over it with --force: killed mid-way, then finished.
run_shardq 0 "$WORK/engram.log" "$ENGRAM" --src "$WORK/src" --dst "$WORK/out" --set 'quant.method="rtn"' ||
  fail "the engram run: $(tail -3 "$WORK/engram.log")"
SHARDQ_CRASH_AT=quantize:3 run_shardq 0 "$WORK/killed.log" "$INT8" --src "$WORK/src" --dst "$WORK/out" --force &&
  fail "the crash did not happen"
compgen -G "$WORK/out/*.partial" >/dev/null || fail "no .partial shard after the kill"
[[ ! -e $WORK/out/engram-nvfp4.json && ! -e $WORK/out/w8a8-int8.json ]] ||
  fail "a report beside .partial shards: $(ls "$WORK/out")"
run_shardq 0 "$WORK/int8.log" "$INT8" --src "$WORK/src" --dst "$WORK/out" || fail "the int8 run: $(tail -3 "$WORK/int8.log")"
[[ -e $WORK/out/w8a8-int8.json && ! -e $WORK/out/engram-nvfp4.json ]] || fail "reports after the int8 run: $(ls "$WORK/out")"
verify --dst "$WORK/out" >"$WORK/verify.log" || fail "verify of the int8 output: $(tail -3 "$WORK/verify.log")"
echo "--force over another product removes its report first"

# 2. Two reports in one folder; a job of another recipe.
cp "$WORK/out/w8a8-int8.json" "$WORK/out/engram-nvfp4.json"
rc=0
verify --dst "$WORK/out" >"$WORK/two.log" 2>&1 || rc=$?
((rc == 1)) || fail "verify of a folder with two reports exited $rc"
grep -q "^shardq: error: $WORK/out: holds the reports of engram-nvfp4 and w8a8-int8" "$WORK/two.log" ||
  fail "two reports: $(cat "$WORK/two.log")"
rm "$WORK/out/engram-nvfp4.json"
rc=0
verify --dst "$WORK/out" "$ENGRAM" >"$WORK/other.log" 2>&1 || rc=$?
((rc == 1)) || fail "verify with another recipe's job exited $rc"
grep -q "^shardq: error: $WORK/out: an output of recipe w8a8-int8 (its report w8a8-int8.json), not of the job's recipe engram-nvfp4" \
  "$WORK/other.log" || fail "another recipe's job: $(cat "$WORK/other.log")"
echo "verify names two reports, or the output's recipe against the job's"

# 3. --set on verify as on run.
run_shardq 0 "$WORK/mse.log" "$ENGRAM" --src "$WORK/src" --dst "$WORK/mse" --set 'quant.method="mse"' \
  --set quant.mse_candidates=4 || fail "the mse run: $(tail -3 "$WORK/mse.log")"
verify --dst "$WORK/mse" "$ENGRAM" --set 'quant.method="mse"' --set quant.mse_candidates=4 >"$WORK/set.log" ||
  fail "verify with the run's --set: $(grep FAIL "$WORK/set.log" | head -3)"
rc=0
verify --dst "$WORK/mse" "$ENGRAM" >"$WORK/noset.log" || rc=$?
((rc == 1)) || fail "verify without the run's --set exited $rc"
grep -q "^FAIL  engram-nvfp4.json: method: report mse, job gptq-mse" "$WORK/noset.log" || fail "without --set: $(grep FAIL "$WORK/noset.log" | head -3)"
echo "verify takes the run's --set"

# 4. --fresh on a complete output.
rc=0
run_shardq 0 "$WORK/fresh.log" "$INT8" --src "$WORK/src" --dst "$WORK/out" --fresh || rc=$?
((rc == 1)) || fail "--fresh on a complete output exited $rc"
grep -q "holds a complete output already (--fresh starts an unfinished output over); pass --force" "$WORK/fresh.log" ||
  fail "--fresh refusal: $(grep error "$WORK/fresh.log")"
echo "PASS: two products in one folder kept apart"
