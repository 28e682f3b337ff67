#!/usr/bin/env bash
# A linear whose values pass 2^63 when squared (E8M0 scale byte 254, 2^127, on E4M3 codes
# near 2^-4: values ~2^123, still fp32) quantizes, and its kind's row sums pass ExactSum's
# range: the report's rel_rms_error for that kind is null (NaN), and verify, recomputing
# the same NaN, passes the output (it failed it while figures were compared with ==).
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"

JOBINT8="$SHARDQ_SOURCE_DIR/jobs/demo-w8a8-int8.toml"
make_fixture "$WORK/src"
edit_tensor "$WORK/src" layers.8.attn.wq_b.weight fill=18191a1b1c1d1e1f # E4M3 2^-4 x (1 + m/8)
edit_tensor "$WORK/src" layers.8.attn.wq_b.scale fill=fe               # E8M0 2^127

run_shardq 0 "$WORK/run.log" "$JOBINT8" --src "$WORK/src" --dst "$WORK/out" || fail "run: $(tail -3 "$WORK/run.log")"
python3 - "$WORK/out/w8a8-int8.json" <<'PY' || fail "the report's attn.wq_b figure"
import json, sys
kinds = {entry["kind"]: entry for entry in json.load(open(sys.argv[1]))["int8"]}
assert kinds["attn.wq_b"]["rel_rms_error"] is None, kinds["attn.wq_b"]
assert all(k == "attn.wq_b" or e["rel_rms_error"] is not None for k, e in kinds.items()), kinds
print("report: attn.wq_b rel_rms_error null, every other kind a number")
PY
rc=0
"$SHARDQ_BIN" verify --src "$WORK/src" --dst "$WORK/out" "$JOBINT8" >"$WORK/verify.log" 2>&1 || rc=$?
((rc == 0)) || fail "verify failed a correct output: $(grep -E 'FAIL|error' "$WORK/verify.log" | head -3)"
grep -q "^OK: 0 check(s) failed" "$WORK/verify.log" || fail "verify: $(tail -3 "$WORK/verify.log")"
echo "PASS: a linear past ExactSum's range reports null, and verify passes the output"
