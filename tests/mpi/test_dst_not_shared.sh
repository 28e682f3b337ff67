#!/usr/bin/env bash
# --dst must be one folder every rank sees (docs/cluster.md). Two ranks where rank 1 runs in
# its own mount namespace with a tmpfs over dst's parent (a folder of its node's own, as a
# node-local --dst on a cluster would be; the folder exists there): the run is refused
# before any work, naming the folder and the rank, and leaves no index. Before the check
# this run ended 0, "done", with a report and rank 1's shard left as .partial on rank 0's
# side. The same two ranks without the tmpfs run.
source "$(dirname "$0")/../resume/lib.sh"
command -v mpirun >/dev/null || { echo "no mpirun"; exit 77; }
unshare -m true 2>/dev/null || { echo "no mount namespaces here (unshare -m)"; exit 77; }

make_fixture "$WORK/src"
mkdir -p "$WORK/node"
DST="$WORK/node/out"
ARGS=("$JOB" --src "$WORK/src" --dst "$DST" --set quant.method=rtn)
# rank 1: its command in a mount namespace of its own; MOUNT_TMPFS=1 hides the shared folder.
# shellcheck disable=SC2016 # expanded by the inner shell
RANK1=(unshare -m sh -c '[ "$MOUNT_TMPFS" = 1 ] && mount -t tmpfs none "$0" && mkdir "$0/out"; exec "$@"' "$WORK/node")

rc=0
MOUNT_TMPFS=1 mpirun -x MOUNT_TMPFS -np 1 "$SHARDQ_BIN" run "${ARGS[@]}" : -np 1 "${RANK1[@]}" "$SHARDQ_BIN" run "${ARGS[@]}" \
  >"$WORK/unshared.log" 2>&1 || rc=$?
((rc != 0)) || fail "a run whose rank 1 has its own --dst folder succeeded"
grep -q "shardq: error: $DST: rank 1 (.*) does not see the file rank 0 (.*) wrote there: --dst must be one folder" \
  "$WORK/unshared.log" || fail "the refusal does not name the folder and rank 1: $(grep -m2 'error' "$WORK/unshared.log")"
[[ ! -e "$DST/model.safetensors.index.json" ]] || fail "an index was written"
echo "refused: $(grep -o 'shardq: error: .*' "$WORK/unshared.log" | head -1)"

MOUNT_TMPFS=0 mpirun -x MOUNT_TMPFS -np 1 "$SHARDQ_BIN" run "${ARGS[@]}" : -np 1 "${RANK1[@]}" "$SHARDQ_BIN" run "${ARGS[@]}" \
  >"$WORK/shared.log" 2>&1 || fail "the same two ranks on one shared folder failed: $(tail -3 "$WORK/shared.log")"
[[ -e "$DST/model.safetensors.index.json" ]] || fail "the shared run wrote no index"
echo "PASS: a --dst that one rank sees as another folder is refused, naming the rank; shared, it runs"
