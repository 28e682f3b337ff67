#!/usr/bin/env bash
# A source laid out as a Hugging Face cache snapshot (every file a relative link into
# ../../blobs, the model's code in subfolders, a .git folder beside them):
#  1. the output holds files, not links that resolve only beside the snapshot: moved
#     elsewhere it still verifies; links an older shardq left at the planned names (dangling
#     there) are replaced;
#  2. the folders beside the weights (inference/, encoding/) are carried whole, .git is not;
#  3. a link in the source that leads nowhere is refused, naming it, before any work.
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"

JOBINT8="$SHARDQ_SOURCE_DIR/jobs/demo-w8a8-int8.toml"
make_fixture "$WORK/src"

# The snapshot: blobs named by their hash, as the hub names them.
SNAP="$WORK/hub/snapshots/0123abcd"
mkdir -p "$WORK/hub/blobs" "$SNAP/inference" "$SNAP/encoding" "$SNAP/.git"
link_into_blobs() { # FILE LINK DEPTH: FILE's bytes as a blob, LINK a relative link to it
  local blob
  blob=$(sha256sum "$1" | cut -c1-40)
  cp -l "$1" "$WORK/hub/blobs/$blob" 2>/dev/null || cp "$1" "$WORK/hub/blobs/$blob"
  ln -s "$3blobs/$blob" "$2"
}
for file in "$WORK/src"/*; do link_into_blobs "$file" "$SNAP/$(basename "$file")" ../../; done
printf 'def generate():\n    pass\n' >"$WORK/generate.py"
link_into_blobs "$WORK/generate.py" "$SNAP/inference/generate.py" ../../../
printf '# encoding\n' >"$SNAP/encoding/README.md"
echo "ref: refs/heads/main" >"$SNAP/.git/HEAD"

# Links an older shardq made at the planned names: relative, so dangling in the output.
OUT="$WORK/out/w8a8"
mkdir -p "$OUT"
for file in "$WORK/src"/*.safetensors "$WORK/src/tokenizer.json"; do
  ln -s "../../blobs/$(basename "$file")" "$OUT/$(basename "$file")"
done

run_shardq 0 "$WORK/run.log" "$JOBINT8" --src "$SNAP" --dst "$OUT" || fail "run: $(tail -3 "$WORK/run.log")"
links=$(find "$OUT" -type l -printf '%P -> %l\n')
[[ -z $(find "$OUT" -xtype l) ]] || fail "dangling links in the output: $links"
[[ -z $(find "$OUT" -type l -lname '[!/]*') ]] || fail "relative links in the output: $links"
cmp -s "$WORK/generate.py" "$OUT/inference/generate.py" || fail "inference/generate.py was not carried"
cmp -s "$SNAP/encoding/README.md" "$OUT/encoding/README.md" || fail "encoding/README.md was not carried"
[[ ! -e "$OUT/.git" ]] || fail ".git was carried into the output"
"$SHARDQ_BIN" verify --src "$SNAP" --dst "$OUT" "$JOBINT8" >"$WORK/verify.log" || { cat "$WORK/verify.log"; fail "verify"; }
grep -Eq '^other files identical +6 +0' "$WORK/verify.log" ||
  fail "verify did not check the six other files: $(grep 'other files' "$WORK/verify.log")"

mkdir -p "$WORK/elsewhere/deeper"
mv "$OUT" "$WORK/elsewhere/deeper/w8a8"
"$SHARDQ_BIN" verify --src "$SNAP" --dst "$WORK/elsewhere/deeper/w8a8" "$JOBINT8" >"$WORK/verify-moved.log" ||
  { cat "$WORK/verify-moved.log"; fail "the moved output does not verify"; }
echo "linked source: output of files, carried subfolders, verifies where it was and moved"

ln -s ../../blobs/0000000000000000000000000000000000000000 "$SNAP/inference/missing.py"
rc=0
run_shardq 0 "$WORK/dangling.log" "$JOBINT8" --src "$SNAP" --dst "$WORK/out/dangling" || rc=$?
((rc != 0)) || fail "a source with a dangling link was run"
grep -q "^shardq: error: .*inference/missing.py: a link to nothing" "$WORK/dangling.log" ||
  fail "the refusal does not name the link: $(tail -2 "$WORK/dangling.log")"
[[ ! -e "$WORK/out/dangling" ]] || fail "the refused run made its dst"
echo "PASS: $(grep '^shardq: error' "$WORK/dangling.log")"
