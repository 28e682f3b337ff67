#!/usr/bin/env bash
# Four aarch64 hosts whose CPUs differ in SVE width still write one rank's bytes: the aarch64
# shardq over the cluster test bed (tests/cluster: four hosts as network namespaces,
# slurm/sparks.sh from the first), each host's qemu at its own vector length: 128 bits (the
# Spark's GB10), 256 (Graviton 3), 512 (A64FX) and 2048 (the architecture's most). Ranks
# that took different SIMD paths once gave different MXFP4 bytes (docs/design.md,
# "Determinism"). The 1017-NVFP4 and W8A8 demo jobs; the Engram one's GPTQ takes over
# 15 minutes on four emulated hosts.
# Env: SHARDQ_BIN (the aarch64 binary as a command: a script that runs it under qemu),
# SHARDQ_SOURCE_DIR.
set -euo pipefail

[ -n "${SHARDQ_BIN:-}" ] || { echo "SHARDQ_BIN is not set"; exit 77; }
# shellcheck source=../cluster/lib.sh
source "$SHARDQ_SOURCE_DIR/tests/cluster/lib.sh"

# The binary as each host starts it: qemu's vector length by the host's name (this host,
# where the one-rank reference runs, at the Spark's).
emulated=$SHARDQ_BIN
SHARDQ_BIN=$WORK/shardq-by-host
cat >"$SHARDQ_BIN" <<SCRIPT
#!/bin/sh
case "\$(hostname)" in
  spark2) bytes=32 ;;
  spark3) bytes=64 ;;
  spark4) bytes=256 ;;
  *) bytes=16 ;;
esac
QEMU_CPU=max,sve-default-vector-length=\$bytes exec "$emulated" "\$@"
SCRIPT
chmod +x "$SHARDQ_BIN"

cluster_up
make_demo_fixtures
for job in demo-1017-nvfp4.toml demo-w8a8-int8.toml; do
  check_job_over_four_hosts "$SHARDQ_SOURCE_DIR/jobs/$job"
done
echo "PASS: four hosts of SVE widths 128, 256, 512 and 2048 bits give the one-rank bytes"
