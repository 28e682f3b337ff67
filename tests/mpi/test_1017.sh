#!/usr/bin/env bash
# The nvfp4-1017 product on the fixture (source dsv41-mini, reference dsv41-mini-ref-nvfp4):
#  1. -np 1, -np 4 and -np 4 with write_mode direct give the same bytes, with chunks small
#     enough that an expert's rows span several chunks (its w1+w3 reduction crosses chunks
#     and ranks);
#  2. `shardq verify` passes (experts bit-exact, their global scales the rule's and w1's
#     and w3's one, Engram bytes and cosine, index closed, layout equal to the reference)
#     and prints its table; it fails a w1 at twice its group's global scale with its block
#     scales halved to match (still bit-exact);
#  3. the Engram MXFP4 tables equal the reference's (NVIDIA's rule) byte for byte;
#  4. the MTP layers' experts stay as they are (keep_mtp = false is refused:
#     tests/resume/test_1017_bad_input.sh).
# shellcheck source=../resume/lib.sh
source "$(dirname "$0")/../resume/lib.sh"

JOB1017="$SHARDQ_SOURCE_DIR/jobs/demo-1017-nvfp4.toml"
make_fixture "$WORK/src"
"$SHARDQ_BIN" fixture --preset dsv41-mini-ref-nvfp4 --out "$WORK/ref" --engram-vocab 600 >/dev/null
COMMON=(--src "$WORK/src" --set "quant.input_scales_from=\"$WORK/ref\"" --set run.rows_per_chunk=96)

run_shardq 1 "$WORK/np1.log" "$JOB1017" "${COMMON[@]}" --dst "$WORK/np1" || fail "-np 1: $(tail -3 "$WORK/np1.log")"
run_shardq 4 "$WORK/np4.log" "$JOB1017" "${COMMON[@]}" --dst "$WORK/np4" || fail "-np 4: $(tail -3 "$WORK/np4.log")"
run_shardq 4 "$WORK/np4d.log" "$JOB1017" "${COMMON[@]}" --set 'run.write_mode="direct"' --dst "$WORK/np4d" ||
  fail "-np 4 direct: $(tail -3 "$WORK/np4d.log")"
same_output "$WORK/np1" "$WORK/np4"
same_output "$WORK/np1" "$WORK/np4d"
echo "same bytes on 1 and 4 ranks, owner and direct writes"

"$SHARDQ_BIN" verify --src "$WORK/src" --dst "$WORK/np1" >"$WORK/verify.log" || { cat "$WORK/verify.log"; fail "verify failed"; }
grep -Eq '^experts bit-exact +384 +0' "$WORK/verify.log" || { cat "$WORK/verify.log"; fail "verify did not check the 384 experts"; }
grep -Eq '^layout equal to the reference +[0-9]+ +0' "$WORK/verify.log" || { cat "$WORK/verify.log"; fail "no layout check"; }
cat "$WORK/verify.log"
grep -Eq '^expert global scales 2\^\(emax - 135\) +384 +0' "$WORK/verify.log" ||
  fail "verify did not check the 384 experts' global scales"

# Doctored: one w1 at twice its global scale, its block scales halved to match, so every
# element is still bit-exact; its w3 keeps the shared scale. Verify must fail it.
copy_of np1 doctored
edit_tensor "$WORK/doctored" layers.2.ffn.experts.3.w1.weight_scale_2 f32mul=0:2
edit_tensor "$WORK/doctored" layers.2.ffn.experts.3.w1.weight_scale e4m3mul=0.5
if "$SHARDQ_BIN" verify --src "$WORK/src" --dst "$WORK/doctored" >"$WORK/verify-doctored.log"; then
  fail "verify passed w1 and w3 at different global scales"
fi
grep -Eq '^experts bit-exact +384 +0' "$WORK/verify-doctored.log" || fail "the doctoring changed an element's value"
grep -q '^FAIL  layers.2.ffn.experts.3.w1.weight_scale_2: is .* but its group' "$WORK/verify-doctored.log" ||
  { cat "$WORK/verify-doctored.log"; fail "verify did not name the doctored global scale"; }
echo "verify fails a w1 whose global scale is not its group's: $(grep '^FAIL' "$WORK/verify-doctored.log")"

python3 - "$WORK/ref" "$WORK/np1" <<'PY'
import json, struct, sys
def tensor(folder, name):
    shard = json.load(open(f"{folder}/model.safetensors.index.json"))["weight_map"][name]
    with open(f"{folder}/{shard}", "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        entry = json.loads(f.read(n))[name]
        f.seek(8 + n + entry["data_offsets"][0])
        return f.read(entry["data_offsets"][1] - entry["data_offsets"][0])
for layer in (1, 14):
    for part in ("weight", "scale"):
        name = f"layers.{layer}.engram.embed.{part}"
        assert tensor(sys.argv[1], name) == tensor(sys.argv[2], name), f"{name} differs from the reference's"
print("Engram MXFP4 tables equal the reference's byte for byte")
PY

grep -q '"mtp.0.ffn.experts.0.w1.weight"' "$WORK/np1/model.safetensors.index.json" || fail "the MTP experts are not in the output"
grep -q '"mtp.0.ffn.experts.0.w1.weight_scale_2"' "$WORK/np1/model.safetensors.index.json" && fail "the MTP experts were re-encoded"
echo "PASS: nvfp4-1017 on 1 and 4 ranks, verified, Engram equal to the reference, the MTP experts kept"
