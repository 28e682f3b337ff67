#!/usr/bin/env bash
# `shardq verify` passes on a finished output (rtn and gptq-mse) and fails, naming the
# tensor and row, when one byte of an output table or of a copied tensor is changed.
set -euo pipefail
: "${SHARDQ_BIN:?}" "${SHARDQ_SOURCE_DIR:?}"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
job="$SHARDQ_SOURCE_DIR/jobs/demo-engram-nvfp4.toml"

"$SHARDQ_BIN" fixture --preset dsv41-mini --out "$work/src" --engram-vocab 600 >/dev/null
for method in rtn gptq-mse; do
  "$SHARDQ_BIN" run "$job" --src "$work/src" --dst "$work/$method" --set quant.method="$method" >/dev/null 2>&1
  "$SHARDQ_BIN" verify --src "$work/src" --dst "$work/$method" >"$work/verify.log" || { cat "$work/verify.log"; exit 1; }
  grep -q "^OK: 0 check(s) failed" "$work/verify.log"
done

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
