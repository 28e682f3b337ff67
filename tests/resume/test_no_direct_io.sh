#!/usr/bin/env bash
# A destination that refuses O_DIRECT and reports no size (ramfs, mounted for the test;
# skipped where mounting is not permitted): the shard writes that go out O_DIRECT on a
# disk stay buffered there, the space check has no free count to refuse on, and the
# output equals the one written to the disk, in both write modes on 2 ranks.
source "$(dirname "$0")/lib.sh"
command -v mpirun >/dev/null || { echo "no mpirun"; exit 77; }

RAM="$WORK/ram"
mount_scratch "$RAM" ramfs

# The premise: opening a file there with O_DIRECT fails (EINVAL).
python3 - "$RAM/probe" <<'PY' || fail "this ramfs accepts O_DIRECT: the buffered fallback would not be exercised"
import errno, os, sys
try:
    os.close(os.open(sys.argv[1], os.O_CREAT | os.O_WRONLY | os.O_DIRECT, 0o644))
except OSError as e:
    sys.exit(0 if e.errno == errno.EINVAL else 1)
sys.exit(1)
PY
rm -f "$RAM/probe"

make_fixture "$WORK/src"
# 4096 rows per chunk: each chunk's packed codes (512 KiB) are large enough to go out
# O_DIRECT on the disk (DirectWriter::kMinBytes is 256 KiB).
COMMON=(--src "$WORK/src" --set quant.method=mse --set run.rows_per_chunk=4096)
run_shardq 2 "$WORK/ref.log" "$JOB" "${COMMON[@]}" --dst "$WORK/ref" || fail "the run to the disk failed: $(tail -3 "$WORK/ref.log")"
for mode in owner direct; do
  run_shardq 2 "$WORK/$mode.log" "$JOB" "${COMMON[@]}" --set "run.write_mode=\"$mode\"" --dst "$RAM/$mode" ||
    fail "the run to the ramfs failed (write_mode $mode): $(grep -m1 "error" "$WORK/$mode.log")"
  same_output "$WORK/ref" "$RAM/$mode"
  echo "write_mode $mode: same bytes on ramfs (no O_DIRECT, no size) as on the disk"
done
echo "PASS: without O_DIRECT the shards are written buffered, byte for byte the same"
