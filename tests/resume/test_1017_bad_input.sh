#!/usr/bin/env bash
# Bad input to the nvfp4-1017 product, refused before any work (no .partial, no index in
# dst) with one message naming what is wrong:
#  1. a reference without an expert's input_scale;
#  2. a reference of another layout (a tensor of another shape; a tensor missing);
#  3. a source expert whose .scale shape does not match its weight;
#  4. no reference at all (quant.input_scales_from unset);
#  5. a source config.json of another architecture than the reference's;
#  6. quant.keep_mtp = false (the reference has no input scales for the MTP experts);
# a finished output is refused to a job naming another reference (input_scales_from is in
# the fingerprint);
# and a source the transcode cannot represent exactly (a block 18 binades below its
# expert's largest, codes not zero): the run completes, the report counts the block under
# its tensor, and `verify` fails naming that tensor.
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"

JOB1017="$SHARDQ_SOURCE_DIR/jobs/demo-1017-nvfp4.toml"
make_fixture "$WORK/src"
"$SHARDQ_BIN" fixture --preset dsv41-mini-ref-nvfp4 --out "$WORK/ref" --engram-vocab 600 >/dev/null

# expect_refusal NAME TEXT ARGS...: the run fails, says TEXT, and leaves no work behind.
expect_refusal() {
  local name=$1 text=$2 dst="$WORK/out-$1"
  shift 2
  if "$SHARDQ_BIN" run "$JOB1017" --dst "$dst" "$@" >"$WORK/$name.log" 2>&1; then
    fail "$name: the run succeeded"
  fi
  grep -qF -- "$text" "$WORK/$name.log" || fail "$name: the message does not say '$text': $(cat "$WORK/$name.log")"
  [[ $(grep -c 'shardq: error' "$WORK/$name.log") == 1 ]] || fail "$name: not one error line: $(cat "$WORK/$name.log")"
  compgen -G "$dst/*.partial" >/dev/null && fail "$name: work started (.partial files in $dst)"
  [[ -e "$dst/model.safetensors.index.json" ]] && fail "$name: an index was written"
  echo "$name: refused: $(grep 'shardq: error' "$WORK/$name.log")"
}

copy_of ref ref-no-scale
edit_tensor "$WORK/ref-no-scale" layers.3.ffn.experts.1.w2.input_scale drop
expect_refusal missing-input-scale "layers.3.ffn.experts.1.w2.input_scale" \
  --src "$WORK/src" --set "quant.input_scales_from=\"$WORK/ref-no-scale\""

copy_of ref ref-shape
edit_tensor "$WORK/ref-shape" layers.0.ffn.experts.0.w1.weight_scale shape=256,8
expect_refusal reference-shape "layers.0.ffn.experts.0.w1.weight_scale" \
  --src "$WORK/src" --set "quant.input_scales_from=\"$WORK/ref-shape\""

copy_of ref ref-missing
edit_tensor "$WORK/ref-missing" layers.5.attn.wq_b.weight drop
expect_refusal reference-missing-tensor "the reference has no 'layers.5.attn.wq_b.weight'" \
  --src "$WORK/src" --set "quant.input_scales_from=\"$WORK/ref-missing\""

copy_of src src-scale
edit_tensor "$WORK/src-scale" layers.2.ffn.experts.3.w1.scale shape=64,16
expect_refusal source-scale-shape "layers.2.ffn.experts.3.w1.scale" \
  --src "$WORK/src-scale" --set "quant.input_scales_from=\"$WORK/ref\""

expect_refusal no-reference "quant.input_scales_from" --src "$WORK/src" --set 'quant.input_scales_from=""'

# A source config.json of another architecture than the reference's (the output would take
# the reference's): one key changed. Its file is replaced, not written
# through (the copy is of hard links).
copy_of src src-config
python3 - "$WORK/src-config/config.json" <<'PY'
import json, os, sys
config = json.load(open(sys.argv[1]))
(config if "num_experts_per_tok" in config else config["text_config"])["num_experts_per_tok"] += 1
os.unlink(sys.argv[1])
json.dump(config, open(sys.argv[1], "w"), indent=2)
PY
expect_refusal source-config "num_experts_per_tok' is" --src "$WORK/src-config" --set "quant.input_scales_from=\"$WORK/ref\""
# Block 0 of row 0 of one w1 scaled 2^-18 below the largest E8M0 byte of its w1 + w3.
copy_of src src-inexact
python3 - "$WORK/src-inexact" layers.4.ffn.experts.2 <<'PY'
import json, os, struct, sys
folder, expert = sys.argv[1:3]
index = json.load(open(f"{folder}/model.safetensors.index.json"))["weight_map"]
def locate(name):
    shard = f"{folder}/{index[name]}"
    with open(shard, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        entry = json.loads(f.read(n))[name]
    return shard, 8 + n + entry["data_offsets"][0], entry
def read(name):
    shard, at, entry = locate(name)
    with open(shard, "rb") as f:
        f.seek(at)
        return f.read(entry["data_offsets"][1] - entry["data_offsets"][0])
emax = max(max(read(f"{expert}.w{p}.scale")) for p in (1, 3))
codes = read(f"{expert}.w1.weight")[:16]
assert any(b & 0x77 for b in codes), "block 0 of row 0 has only zero codes"
shard, at, _ = locate(f"{expert}.w1.scale")
data = open(shard, "rb").read()
os.unlink(shard)  # a hard link of the fixture: replace, never write through
with open(shard, "wb") as f:
    f.write(data[:at] + bytes([emax - 18]) + data[at + 1:])
PY
expect_refusal keep-mtp "quant.keep_mtp = false: the reference $WORK/ref has no input scales for the MTP layers'" \
  --src "$WORK/src" --set "quant.input_scales_from=\"$WORK/ref\"" --set quant.keep_mtp=false

"$SHARDQ_BIN" run "$JOB1017" --src "$WORK/src-inexact" --set "quant.input_scales_from=\"$WORK/ref\"" \
  --dst "$WORK/out-inexact" >"$WORK/inexact.log" 2>&1 || fail "the run with an inexact block failed: $(tail -3 "$WORK/inexact.log")"
python3 - "$WORK/out-inexact/nvfp4-1017.json" <<'PY' || fail "the report does not count the inexact block"
import json, sys
experts = json.load(open(sys.argv[1]))["experts"]
assert experts["inexact_blocks"] == 1 and not experts["lossless"], experts
assert experts["inexact_tensors"] == [{"tensor": "layers.4.ffn.experts.2.w1.weight", "inexact_blocks": 1}], experts
PY
if "$SHARDQ_BIN" verify --src "$WORK/src-inexact" --dst "$WORK/out-inexact" >"$WORK/verify-inexact.log"; then
  fail "verify passed an output with an inexact block"
fi
grep -q "^FAIL  layers.4.ffn.experts.2.w1.weight: " "$WORK/verify-inexact.log" ||
  fail "verify does not name the inexact tensor: $(cat "$WORK/verify-inexact.log")"
echo "inexact block: counted in the report, verify fails: $(grep '^FAIL' "$WORK/verify-inexact.log")"

copy_of ref ref-copy
if "$SHARDQ_BIN" run "$JOB1017" --src "$WORK/src-inexact" --set "quant.input_scales_from=\"$WORK/ref-copy\"" \
  --dst "$WORK/out-inexact" >"$WORK/other-ref.log" 2>&1; then
  fail "a finished output was taken for a job naming another reference"
fi
grep -qF "of another job" "$WORK/other-ref.log" && grep -qF "key 'input_scales_from' is" "$WORK/other-ref.log" ||
  fail "the refusal does not name input_scales_from: $(cat "$WORK/other-ref.log")"
echo "another reference: refused: $(grep 'shardq: error' "$WORK/other-ref.log" | cut -c1-220)"
echo "PASS: bad 1017 input refused before any work, naming the tensor; an inexact block reported and failed by verify"
