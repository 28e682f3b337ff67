#!/usr/bin/env bash
# The w8a8-int8 product on the fixture (dsv41-mini: 162 FP8 32x32-block linears, 432 FP4
# experts, Engram tables in shards of their own):
#  1. -np 1, -np 4 and -np 4 with write_mode direct give the same bytes, with chunks of 64
#     rows so that every linear taller than 64 rows spans chunks (and ranks);
#  2. `shardq verify` with the job passes and its table shows each of the product's checks
#     with the expected number of tensors and 0 failed: 529 INT8 linears, 65 BF16 (the
#     ignore list: attn.wq_a, attn.wkv, attn.wo_a, compressor.wkv/wgate, indexer.wk,
#     engram.wkv), the Engram table shards identical; without the job file (the keys from
#     the report) it prints the same table;
#  3. config.json's quantization_config is the product's block with the job's ignore list,
#     and the rest of config.json is the source's.
# shellcheck source=../resume/lib.sh
source "$(dirname "$0")/../resume/lib.sh"

JOBINT8="$SHARDQ_SOURCE_DIR/jobs/demo-w8a8-int8.toml"
make_fixture "$WORK/src"
COMMON=(--src "$WORK/src" --set run.rows_per_chunk=64)

start=$(now)
run_shardq 1 "$WORK/np1.log" "$JOBINT8" "${COMMON[@]}" --dst "$WORK/np1" || fail "-np 1: $(tail -3 "$WORK/np1.log")"
note "-np 1: $(seconds_since "$start") s"
start=$(now)
run_shardq 4 "$WORK/np4.log" "$JOBINT8" "${COMMON[@]}" --dst "$WORK/np4" || fail "-np 4: $(tail -3 "$WORK/np4.log")"
note "-np 4: $(seconds_since "$start") s"
start=$(now)
run_shardq 4 "$WORK/np4d.log" "$JOBINT8" "${COMMON[@]}" --set 'run.write_mode="direct"' --dst "$WORK/np4d" ||
  fail "-np 4 direct: $(tail -3 "$WORK/np4d.log")"
note "-np 4 direct: $(seconds_since "$start") s"
same_output "$WORK/np1" "$WORK/np4"
same_output "$WORK/np1" "$WORK/np4d"
[[ -f "$WORK/np1/w8a8-int8.json" ]] || fail "no report w8a8-int8.json in the output"
echo "same bytes on 1 and 4 ranks, owner and direct writes"

# Chunks really were small: the largest linear (engram.wkv, 1280 rows) took 20 chunks.
python3 - "$WORK/np1/w8a8-int8.json" <<'PY' || fail "the report does not count the linears"
import json, sys
report = json.load(open(sys.argv[1]))
int8 = {k["kind"]: k for k in report["int8"]}
bf16 = {k["kind"]: k for k in report["bf16"]}
assert sum(k["tensors"] for k in int8.values()) == 529, report["int8"]
assert sum(k["tensors"] for k in bf16.values()) == 65, report["bf16"]
assert set(bf16) == {"attn.wq_a", "attn.wkv", "attn.wo_a", "attn.compressor.wkv", "attn.compressor.wgate",
                     "attn.indexer.wk", "engram.wkv", "mtp.attn.wq_a", "mtp.attn.wkv", "mtp.attn.wo_a"}, sorted(bf16)
assert int8["ffn.experts.w1"]["tensors"] == 128 and int8["ffn.experts.w1"]["rows"] == 128 * 128, int8["ffn.experts.w1"]
assert all(0 < k["rel_rms_error"] < 0.02 for k in int8.values()), report["int8"]
# E4M3 and E2M1 times a power of two fit BF16 exactly: the ignored linears lose nothing.
assert all(k["rel_rms_error"] == 0 for k in bf16.values()), report["bf16"]
assert report["all_zero_rows"] == 0
# The card's list names the vision tower and its aligner, which the fixture does not have.
assert report["ignore_unmatched"] == ["vision.", "aligner."], report["ignore_unmatched"]
PY

"$SHARDQ_BIN" verify --src "$WORK/src" --dst "$WORK/np1" "$JOBINT8" >"$WORK/verify.log" || { cat "$WORK/verify.log"; fail "verify failed"; }
cat "$WORK/verify.log"
expect_row() { # CATEGORY CHECKED: the table row with that many checks and 0 failed
  grep -Eq "^$1 +$2 +0( |$)" "$WORK/verify.log" || fail "verify's table has no row '$1  $2  0'"
}
expect_row 'INT8 rows within half a step, max \|q\| 127' 529
expect_row 'BF16 rows rounded from the source' 65
expect_row 'I8 weights paired with F32 \[out, 1\] scales' 529
expect_row 'ignore-matched linears BF16' 68 # the 65 converted and the 3 natively BF16 indexer.weights_proj
expect_row 'no BF16 linear outside the ignore rules' 529
expect_row 'key diff vs source' 1
expect_row 'shard set continuous and closed' 6
expect_row 'Engram tables identical to the source' 2
grep -q '^OK: 0 check(s) failed$' "$WORK/verify.log" || fail "verify did not print OK"
grep -q '^FAIL' "$WORK/verify.log" && fail "verify printed FAIL lines"
grep -Eq '^dtype totals: .*BF16 [0-9]+ / .*F32 [0-9]+ / .*I8 529( |$)' "$WORK/verify.log" ||
  fail "dtype totals: $(grep 'dtype totals' "$WORK/verify.log")"
echo "verify passes with every product check"

python3 - "$WORK/src" "$WORK/np1" "$JOBINT8" <<'PY' || fail "config.json is not the source's with the INT8 quantization_config"
import json, sys, tomllib
src, dst, job = sys.argv[1:4]
ignore = tomllib.load(open(job, "rb"))["quant"]["ignore"]
source, config = json.load(open(f"{src}/config.json")), json.load(open(f"{dst}/config.json"))
expected = {"quant_method": "w8a8_int8", "activation_scheme": "dynamic", "is_dynamic": True,
            "is_checkpoint_int8_serialized": True, "expert_dtype": "int8", "ignore": ignore}
assert config["quantization_config"] == expected, config["quantization_config"]
assert list(config["quantization_config"]) == list(expected), "key order"
source.pop("quantization_config")
config.pop("quantization_config")
assert config == source, "keys other than quantization_config changed"
PY
echo "quantization_config as specified, the rest of config.json the source's"

# Without JOB.toml, verify takes the job's keys from the report (its parameters.ignore):
# the same checks, the same verdict (less "made by this job", which compares the two).
"$SHARDQ_BIN" verify --src "$WORK/src" --dst "$WORK/np4d" >"$WORK/verify-nojob.log" 2>&1 ||
  { cat "$WORK/verify-nojob.log"; fail "verify without the job file failed on a good output"; }
grep -q "^made by this job  *1  *0" "$WORK/verify.log" || fail "verify with the job file did not compare the report with it"
diff <(grep -v '^dtype totals\|^made by this job' "$WORK/verify.log") <(grep -v '^dtype totals' "$WORK/verify-nojob.log") >&2 ||
  fail "verify without the job file checks something else than with it"
echo "verify without the job file: the same table"
echo "PASS: w8a8-int8 on 1 and 4 ranks (owner, direct), verified (with and without the job file), quantization_config as specified"
