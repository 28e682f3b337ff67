#!/usr/bin/env bash
# `shardq verify` passes on a finished output (rtn, mse and gptq-mse; rtn and mse tables
# equal to the method's own bytes; mse with other search settings, read from the report;
# with a job file, the report's method and settings must be the job's)
# and fails, naming the tensor and row, when one byte of
# an output table is changed, when a row is re-quantized at twice the scales mse picks
# (within the bound, not the method's bytes), when the global scale's header is F32 [1], and
# when the report's table figures (amax, block counters, MSE wins) are not the output's.
set -euo pipefail
: "${SHARDQ_BIN:?}" "${SHARDQ_SOURCE_DIR:?}"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
job="$SHARDQ_SOURCE_DIR/jobs/demo-engram-nvfp4.toml"

"$SHARDQ_BIN" fixture --preset dsv41-mini --out "$work/src" --engram-vocab 600 >/dev/null
for method in rtn mse gptq-mse; do
  "$SHARDQ_BIN" run "$job" --src "$work/src" --dst "$work/$method" --set quant.method="$method" >/dev/null 2>&1
  "$SHARDQ_BIN" verify --src "$work/src" --dst "$work/$method" >"$work/verify.log" || { cat "$work/verify.log"; exit 1; }
  grep -q "^OK: 0 check(s) failed" "$work/verify.log"
  if [[ $method != gptq-mse ]]; then
    grep -Eq "^nvfp4 table bytes as the method makes them +2 +0" "$work/verify.log" ||
      { cat "$work/verify.log"; echo "FAIL: $method tables not compared with the method's bytes"; exit 1; }
  fi
done

# An mse output with other search settings: verify without the job file takes them from the
# report (with the defaults it would make other bytes and other candidate wins).
"$SHARDQ_BIN" run "$job" --src "$work/src" --dst "$work/mse12" --set quant.method=mse --set quant.mse_candidates=12 \
  --set quant.mse_alpha_min=0.5 >/dev/null 2>&1
"$SHARDQ_BIN" verify --src "$work/src" --dst "$work/mse12" >"$work/verify-mse12.log" ||
  { cat "$work/verify-mse12.log"; echo "FAIL: verify without the job file used other mse settings"; exit 1; }
grep -Eq "^nvfp4 table bytes as the method makes them +2 +0" "$work/verify-mse12.log" || { cat "$work/verify-mse12.log"; exit 1; }
echo "verify: takes the job's mse settings from the report"

# With the job file, an output made another way fails "made by this job": the rtn output
# against the gptq-mse job (whose audit checks no error bound for GPTQ), the 12-candidate
# mse output against an 8-candidate mse job.
if "$SHARDQ_BIN" verify --src "$work/src" --dst "$work/rtn" "$job" >"$work/verify-other.log"; then
  cat "$work/verify-other.log"; echo "FAIL: an rtn output passed the gptq-mse job's audit"; exit 1
fi
grep -q "^FAIL  engram-nvfp4.json: method: report rtn, job gptq-mse" "$work/verify-other.log" || { cat "$work/verify-other.log"; exit 1; }
sed 's/^method = "gptq-mse"$/method = "mse"/' "$job" >"$work/mse-job.toml"
if "$SHARDQ_BIN" verify --src "$work/src" --dst "$work/mse12" "$work/mse-job.toml" >"$work/verify-other.log"; then
  cat "$work/verify-other.log"; echo "FAIL: a 12-candidate output passed an 8-candidate job's audit"; exit 1
fi
grep -q "^FAIL  engram-nvfp4.json: mse_candidates: report 12, job 8" "$work/verify-other.log" || { cat "$work/verify-other.log"; exit 1; }
"$SHARDQ_BIN" verify --src "$work/src" --dst "$work/gptq-mse" "$job" >"$work/verify-same.log" || { cat "$work/verify-same.log"; exit 1; }
echo "verify: with a job file, fails an output the job did not make"

# One row of the mse output's last table re-quantized, round to nearest, at twice each
# block's scale: every value stays within half a step at the scale stored, so only the
# comparison with the method's own bytes can fail it.
cp -r "$work/mse" "$work/rescaled"
shard=$(ls "$work/rescaled" | grep 'safetensors$' | sort | tail -1)
rm "$work/rescaled/$shard" && cp "$work/mse/$shard" "$work/rescaled/$shard"
python3 - "$work/src" "$work/rescaled/$shard" <<'PY'
import json, os, struct, sys
import numpy as np
sys.path.insert(0, os.path.join(os.environ["SHARDQ_SOURCE_DIR"], "tests", "resume"))
from edit_tensor import e4m3_value

def e4m3(code):
    return -e4m3_value(code & 0x7F) if code & 0x80 else e4m3_value(code & 0x7F)

def tensors(path):
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    return json.loads(data[8:8 + n]), 8 + n

src_dir, out_path = sys.argv[1:3]
header, base = tensors(out_path)
table = next(k for k in header if k.endswith("embed.weight"))
layer = table.rsplit(".", 1)[0]
index = json.load(open(f"{src_dir}/model.safetensors.index.json"))["weight_map"]
src_header, src_base = tensors(f"{src_dir}/{index[table]}")
src = open(f"{src_dir}/{index[table]}", "rb").read()
row, cols = 9, 256
w0 = src_base + src_header[table]["data_offsets"][0] + row * cols
s0 = src_base + src_header[layer + ".scale"]["data_offsets"][0] + row * (cols // 32)
x = np.array([e4m3(src[w0 + c]) * 2.0 ** (src[s0 + c // 32] - 127) for c in range(cols)], dtype=np.float32)
out = bytearray(open(out_path, "rb").read())
(g,) = struct.unpack("<f", out[base + header[layer + ".weight_scale_2"]["data_offsets"][0]:][:4])
p0 = base + header[table]["data_offsets"][0] + row * cols // 2
q0 = base + header[layer + ".weight_scale"]["data_offsets"][0] + row * cols // 16
grid = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6], dtype=np.float32)
for b in range(cols // 16):
    code = out[q0 + b]
    if not 8 <= code < 0x77:
        continue  # a subnormal or the top scale: doubling would not be one code step of 8
    out[q0 + b] = code + 8
    unit = np.float32(e4m3(code + 8)) * np.float32(g)
    for c in range(16 * b, 16 * b + 16):
        v = np.float32(x[c]) / unit
        nibble = int(np.argmin(np.abs(grid - abs(v)))) | (8 if v < 0 else 0)
        at, shift = p0 + c // 2, 4 * (c % 2)
        out[at] = (out[at] & ~(15 << shift) & 0xFF) | (nibble << shift)
open(out_path, "wb").write(out)
PY
if "$SHARDQ_BIN" verify --src "$work/src" --dst "$work/rescaled" >"$work/verify-rescaled.log"; then
  cat "$work/verify-rescaled.log"; echo "FAIL: verify passed a table at twice the method's scales"; exit 1
fi
grep -Eq "^nvfp4 table values +2 +0" "$work/verify-rescaled.log" ||
  { cat "$work/verify-rescaled.log"; echo "FAIL: the rescaled row is not within the bound (the doctoring is wrong)"; exit 1; }
grep -q "^FAIL  layers.14.engram.embed.weight: row 9: codes or scales differ from what mse makes" "$work/verify-rescaled.log" ||
  { cat "$work/verify-rescaled.log"; exit 1; }
echo "verify: fails a row at twice the scales mse picks, within the bound"

# Flip the high nibble of one code byte of the last table (rtn output), well inside the data.
shard=$(ls "$work/rtn" | grep 'safetensors$' | sort | tail -1)
python3 - "$work/rtn/$shard" <<'PY'
import json, struct, sys
path = sys.argv[1]
with open(path, "r+b") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    header = json.loads(f.read(n))
    name = next(k for k in header if k.endswith("embed.weight"))
    begin = header[name]["data_offsets"][0]
    row_bytes = header[name]["shape"][1]
    at = 8 + n + begin + 5 * row_bytes + 3   # row 5, byte 3
    f.seek(at); b = f.read(1)[0]
    f.seek(at); f.write(bytes([b ^ 0x70]))
PY
if "$SHARDQ_BIN" verify --src "$work/src" --dst "$work/rtn" >"$work/verify.log"; then
  cat "$work/verify.log"; echo "FAIL: verify passed a corrupted table"; exit 1
fi
grep -q "FAIL  layers.14.engram.embed.weight values: layers.14.engram.embed.weight: row 5 column" "$work/verify.log" || { cat "$work/verify.log"; exit 1; }
echo "verify: passes finished outputs, names the corrupted row"

# The global scale's header made F32 [1] (the same bytes): a loader wants a scalar.
cp -al "$work/mse" "$work/scalar"
python3 "$SHARDQ_SOURCE_DIR/tests/resume/edit_tensor.py" "$work/scalar" layers.1.engram.embed.weight_scale_2 shape=1 >/dev/null
if "$SHARDQ_BIN" verify --src "$work/src" --dst "$work/scalar" >"$work/verify-scalar.log"; then
  cat "$work/verify-scalar.log"; echo "FAIL: verify passed a global scale of shape [1]"; exit 1
fi
grep -q "^FAIL  layers.1.engram.embed.weight_scale_2: is F32 \[1\], planned F32 \[\]" "$work/verify-scalar.log" ||
  { cat "$work/verify-scalar.log"; exit 1; }
echo "verify: fails a global scale whose header is not F32 []"

# The report's figures of a table recomputed: a report claiming one zero block more, one
# scale underflow less, another MSE candidate's win, another amax, or no MSE wins at all
# fails, naming each.
cp -al "$work/mse" "$work/report"
python3 - "$work/report/engram-nvfp4.json" <<'PY'
import json, os, sys
path = sys.argv[1]
report = json.load(open(path))
table = report["tables"][1]
table["zero_blocks"] += 1
table["scale_underflows"] -= 1
wins = table["mse_candidate_wins"]
wins[0]["wins"] += 1
wins[-1]["wins"] -= 1
report["tables"][0]["amax"] *= 2
del report["tables"][0]["mse_candidate_wins"]  # an mse table's wins left out
os.unlink(path)  # a hard link of the mse output's: replaced, never written through
json.dump(report, open(path, "w"), indent=2)
PY
if "$SHARDQ_BIN" verify --src "$work/src" --dst "$work/report" >"$work/verify-report.log"; then
  cat "$work/verify-report.log"; echo "FAIL: verify passed a report with doctored figures"; exit 1
fi
for figure in "layers.14.engram.embed.weight zero_blocks" "layers.14.engram.embed.weight scale_underflows" \
  "layers.14.engram.embed.weight mse_candidate_wins" "layers.1.engram.embed.weight amax" \
  "layers.1.engram.embed.weight mse_candidate_wins"; do
  grep -q "^FAIL  $figure: report " "$work/verify-report.log" || { cat "$work/verify-report.log"; echo "FAIL: $figure not failed"; exit 1; }
done
grep -Eq "^nvfp4 report figures +[0-9]+ +5 *$" "$work/verify-report.log" || { cat "$work/verify-report.log"; exit 1; }
echo "verify: fails a report whose table figures are not the output's"
