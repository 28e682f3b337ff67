#!/usr/bin/env bash
# An output folder that overlaps the source is refused before any work, with one line
# naming both paths: dst equal to src (plainly, with a trailing slash, through a symlink,
# through a bind mount where mounting is permitted), dst inside src, src inside dst; on 1
# rank and on 2; dst equal to, or inside, nvfp4-1017's reference. Nothing is written anywhere.
source "$(dirname "$0")/lib.sh"
command -v mpirun >/dev/null || { echo "no mpirun"; exit 77; }

make_fixture "$WORK/src"
ln -s src "$WORK/src_link"
mkdir -p "$WORK/outer"
cp -al "$WORK/src" "$WORK/outer/src" # a source inside the output folder (hard links: no copy)
listing() { (cd "$WORK" && find src outer -printf '%p %s %T@\n' | sort); }
before=$(listing)

# refused NAME NP EXPECTED SRC DST: the run fails with one error line holding EXPECTED and both paths.
refused() {
  local name=$1 np=$2 expected=$3 src=$4 dst=$5 log="$WORK/$1.log" rc=0
  run_shardq "$np" "$log" "$JOB" --src "$src" --dst "$dst" || rc=$?
  ((rc != 0 && rc != 75)) || fail "$name: exit $rc"
  [[ $(grep -c "shardq: error" "$log") == 1 ]] || fail "$name: expected one error line: $(cat "$log")"
  local line
  line=$(grep "shardq: error" "$log")
  for part in "dst '$dst'" "$expected src '$src'"; do
    grep -qF -- "$part" <<<"$line" || fail "$name: the refusal does not say \"$part\": $line"
  done
  echo "$name (np $np): $line"
}

refused same 0 "is the same folder as" "$WORK/src" "$WORK/src"
refused same_slash 2 "is the same folder as" "$WORK/src" "$WORK/src/"
refused symlink 0 "is the same folder as" "$WORK/src" "$WORK/src_link"
refused symlink_src 2 "is the same folder as" "$WORK/src_link" "$WORK/src"
refused dst_inside 0 "lies inside" "$WORK/src" "$WORK/src/out"
refused dst_inside_link 0 "lies inside" "$WORK/src" "$WORK/src_link/sub/out"
refused src_inside 2 "contains" "$WORK/outer/src" "$WORK/outer"
after=$(listing)
[[ $before == "$after" ]] || fail "a refused run wrote: $(diff <(echo "$before") <(echo "$after"))"

if mkdir -p "$WORK/bind" && mount --bind "$WORK/src" "$WORK/bind" 2>/dev/null; then
  MOUNTS+=("$WORK/bind")
  refused bind_mount 0 "is the same folder as" "$WORK/src" "$WORK/bind"
else
  echo "bind mount: not permitted here, not tested"
fi

# The nvfp4-1017 reference is an input too: a dst that is it (with --fresh, which would
# delete its shards) or lies inside it is refused alike, the reference left as it was.
"$SHARDQ_BIN" fixture --preset dsv41-mini-ref-nvfp4 --out "$WORK/ref" --engram-vocab 600 >/dev/null
ref_listing() { (cd "$WORK" && find ref -printf '%p %s %T@\n' | sort); }
ref_before=$(ref_listing)
JOB1017="$SHARDQ_SOURCE_DIR/jobs/demo-1017-nvfp4.toml"
for case in "same $WORK/ref --fresh" "inside $WORK/ref/out"; do
  read -r name dst flag <<<"$case"
  rc=0
  run_shardq 0 "$WORK/ref-$name.log" "$JOB1017" --src "$WORK/src" --dst "$dst" --set "quant.input_scales_from=\"$WORK/ref\"" $flag || rc=$?
  ((rc != 0 && rc != 75)) || fail "reference $name: exit $rc"
  grep -qF "reference '$WORK/ref'" "$WORK/ref-$name.log" && grep -qF "apart from the reference" "$WORK/ref-$name.log" ||
    fail "reference $name: $(grep -m1 error "$WORK/ref-$name.log")"
  echo "reference $name: $(grep -m1 error "$WORK/ref-$name.log")"
done
[[ $ref_before == "$(ref_listing)" ]] || fail "a refused run changed the reference"

# A dst that cannot be a folder is refused naming what is in the way, nothing made.
touch "$WORK/a-file"
ln -s "$WORK/nothing-here" "$WORK/dangling"
for case in "file $WORK/a-file $WORK/a-file exists and is not a folder" \
  "through $WORK/a-file/out $WORK/a-file exists and is not a folder" \
  "dangling $WORK/dangling $WORK/dangling is a symbolic link to $WORK/nothing-here, which does not exist"; do
  read -r name dst expected <<<"$case"
  rc=0
  run_shardq 0 "$WORK/dst-$name.log" "$JOB" --src "$WORK/src" --dst "$dst" || rc=$?
  ((rc == 1)) || fail "dst $name: exit $rc"
  grep -qxF "shardq: error: dst $dst: $expected" "$WORK/dst-$name.log" || fail "dst $name: $(grep -m1 error "$WORK/dst-$name.log")"
  echo "dst $name: $(grep -m1 error "$WORK/dst-$name.log")"
done
[[ -f $WORK/a-file && ! -s $WORK/a-file && ! -e $WORK/nothing-here ]] || fail "a refused dst was written"
echo "PASS: every overlap of dst and src (or the reference) refused before any work"
