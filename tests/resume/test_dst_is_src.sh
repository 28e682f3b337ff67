#!/usr/bin/env bash
# An output folder that overlaps the source is refused before any work, with one line
# naming both paths: dst equal to src (plainly, with a trailing slash, through a symlink,
# through a bind mount where mounting is permitted), dst inside src, src inside dst; on 1
# rank and on 2. Nothing is written anywhere.
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
echo "PASS: every overlap of dst and src refused before any work"
