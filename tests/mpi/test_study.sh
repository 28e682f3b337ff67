#!/usr/bin/env bash
# `shardq study` on the fixture's anisotropic wkv: every method side by side, seeded, with
# study.json, study.png and the anisotropy figure; GPTQ's weighted error is clearly below
# the row quantizers' (the fixture's wkv has median max/min diag ratio >= 30).
set -euo pipefail
: "${SHARDQ_BIN:?}"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$SHARDQ_BIN" fixture --preset dsv41-mini --out "$work/src" --engram-vocab 600 >/dev/null
"$SHARDQ_BIN" study --src "$work/src" --layer 14 --sample 2400 --out "$work/a" | tee "$work/table.txt"
"$SHARDQ_BIN" study --src "$work/src" --layer 14 --sample 2400 --out "$work/b" >/dev/null
grep -q "Gram anisotropy (max/min diag of H_c): median" "$work/table.txt"
test -s "$work/a/study.png"
python3 - "$work/a/study.json" "$work/b/study.json" <<'PY'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
strip = lambda s: {m: {k: v for k, v in r.items() if k != "rows_per_second"} for m, r in s["methods"].items()}
assert strip(a) == strip(b), "same seed must give the same figures"
m = a["methods"]
assert set(m) == {"rtn", "mse", "gptq", "gptq-mse"}, m.keys()
assert a["sample"] == 2400 and len(m["rtn"]["per_column"]) == 24
assert a["anisotropy"]["median"] >= 30, a["anisotropy"]["median"]
# docs/gptq.md "What the tests hold": on an anisotropic W the weighted error is clearly below the row quantizer's.
assert m["gptq"]["weighted_rel_error"] < 0.7 * m["rtn"]["weighted_rel_error"], m
assert m["gptq-mse"]["weighted_rel_error"] < 0.7 * m["mse"]["weighted_rel_error"], m
# The MSE search never loses to the amax rule on plain error, and shrinks a share of scales.
assert m["mse"]["rel_rms_error"] <= m["rtn"]["rel_rms_error"]
assert 0.05 < m["mse"]["scale_below_amax_share"] < 0.95 and m["rtn"]["scale_below_amax_share"] == 0
print("study: weighted error rtn %.4g gptq %.4g, mse %.4g gptq-mse %.4g" % tuple(
    m[k]["weighted_rel_error"] for k in ("rtn", "gptq", "mse", "gptq-mse")))
PY
