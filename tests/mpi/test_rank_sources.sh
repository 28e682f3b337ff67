#!/usr/bin/env bash
# Ranks that plan from different source bytes (a node-local copy on one Spark that differs:
# one shard of another revision, the same headers) are refused before any work, naming the
# rank, its host and the fingerprint field; ranks on equal copies at other paths run, and
# give the one-copy bytes.
# shellcheck source=../resume/lib.sh
source "$(dirname "$0")/../resume/lib.sh"

JOBINT8="$SHARDQ_SOURCE_DIR/jobs/demo-w8a8-int8.toml"
make_fixture "$WORK/src"
cp -r "$WORK/src" "$WORK/copy"
"$SHARDQ_BIN" fixture --preset dsv41-mini --out "$WORK/seed7" --engram-vocab 600 --seed 7 >/dev/null
cp -r "$WORK/src" "$WORK/stale"
shard=$(cd "$WORK/src" && find . -name '*.safetensors' -printf '%f\n' | sort | sed -n 3p)
cp "$WORK/seed7/$shard" "$WORK/stale/$shard" # other bytes under the same header
cmp -s "$WORK/src/$shard" "$WORK/stale/$shard" && fail "the stale copy's $shard is the source's"

# mpmd SRC0 SRC1 DST LOG: rank 0 reads SRC0, rank 1 SRC1.
mpmd() {
  mpirun -np 1 "$SHARDQ_BIN" run "$JOBINT8" --src "$1" --dst "$3" : -np 1 "$SHARDQ_BIN" run "$JOBINT8" --src "$2" --dst "$3" \
    >"$4" 2>&1
}

run_shardq 0 "$WORK/one.log" "$JOBINT8" --src "$WORK/src" --dst "$WORK/one" || fail "one rank: $(tail -3 "$WORK/one.log")"
mpmd "$WORK/src" "$WORK/copy" "$WORK/two" "$WORK/two.log" || fail "two ranks on equal copies: $(tail -3 "$WORK/two.log")"
same_output "$WORK/one" "$WORK/two"
echo "two ranks on equal copies at other paths: the one-rank bytes"

rc=0
mpmd "$WORK/src" "$WORK/stale" "$WORK/stale-out" "$WORK/stale.log" || rc=$?
((rc != 0)) || fail "two ranks on different source bytes ran"
grep -q "^shardq: error: rank 1 (.*) planned another 'source_sample' than rank 0" "$WORK/stale.log" ||
  fail "the refusal does not name rank 1 and the field: $(grep -m3 'error' "$WORK/stale.log")"
[[ ! -e "$WORK/stale-out/model.safetensors.index.json" ]] || fail "the refused run wrote an index"
[[ -z $(find "$WORK/stale-out" -name '*.partial' 2>/dev/null) ]] || fail "the refused run started work"
echo "PASS: $(grep -m1 '^shardq: error' "$WORK/stale.log")"

# refused_once NAME SRC0 SRC1 DST LINE: the two-rank run is refused with exit 1 and one
# error line, LINE (a grep -E pattern after "shardq: error: "), and no rank is aborted.
refused_once() {
  local name=$1 log="$WORK/$1.log" rc=0
  mpmd "$2" "$3" "$4" "$log" || rc=$?
  ((rc == 1)) || fail "$name: exit $rc, not 1"
  [[ $(grep -c '^shardq: error' "$log") == 1 ]] || fail "$name: not one error line: $(grep 'error' "$log")"
  grep -qE "^shardq: error: $5" "$log" || fail "$name: $(grep -m3 'error' "$log")"
  grep -qi "MPI_ABORT" "$log" && fail "$name: a rank was aborted: $(cat "$log")"
  echo "$name: $(grep -m1 '^shardq: error' "$log")"
}

# A source one rank cannot read (its node does not mount it) is one line naming that rank;
# a source no rank can read, one line alone: not a line per rank, and no rank cut short.
refused_once half "$WORK/src" "$WORK/nowhere" "$WORK/half-out" "rank 1 \(.*\): $WORK/nowhere: no such folder"
refused_once none "$WORK/nowhere" "$WORK/nowhere" "$WORK/none-out" "$WORK/nowhere: no such folder"
[[ ! -e "$WORK/half-out" && ! -e "$WORK/none-out" ]] || fail "a refused run made its dst"

# A dst in a symlink loop is refused by every rank alike, before resolving dst meets the
# loop; a dst inside src, by rank 0 alone. Either way: one line, every rank ends, no abort.
ln -s "$WORK/loop" "$WORK/loop"
refused_once loop "$WORK/src" "$WORK/src" "$WORK/loop" "dst $WORK/loop: Too many levels of symbolic links"
refused_once inside "$WORK/src" "$WORK/src" "$WORK/src/out" "dst '$WORK/src/out' lies inside src"
echo "PASS: one line for a source rank 1 cannot read, one for a source none can, one for a refused dst"
