#!/usr/bin/env bash
# The demo: installs what is missing, builds, makes the miniature DeepSeek-V4.1 fixture,
# runs the Engram NVFP4 job (gptq-mse) on 4 MPI ranks, interrupts it once, resumes it to
# the end and shows the report; then the 1017-NVFP4 job (experts transcoded, Engram to
# MXFP4, input scales from the reference fixture) and the W8A8 INT8 job on 4 ranks, each
# verified, and a short summary of every report.
set -euo pipefail
cd "$(dirname "$0")/.."
SHARDQ_SKIP_AARCH64=1 bash scripts/deps.sh # the demo runs natively: no cross toolchain
source scripts/mpi_env.sh

cmake --preset release >/dev/null
cmake --build --preset release -j "$(nproc)" --target shardq
shardq=build/release/shardq

rm -rf out/demo && mkdir -p out/demo
"$shardq" fixture --preset dsv41-mini --out out/demo/dsv41-mini
"$shardq" fixture --preset dsv41-mini-ref-nvfp4 --out out/demo/dsv41-mini-ref-nvfp4
"$shardq" inspect out/demo/dsv41-mini/model-00006-of-00006.safetensors

job=jobs/demo-engram-nvfp4.toml
checkpoint=out/demo/dsv41-mini-nvfp4-engram/.shardq/checkpoint.h5
echo "== run on 4 ranks; interrupted (USR1, which mpirun forwards to the ranks) once a few chunks are done"
set +e
# The fixture takes seconds: pace the first run (40 ms more per chunk) so there is time to
# interrupt it, and interrupt once rank 0 has handed out 16 quantize chunks (its debug log).
# --quiet: the planned stop's exit 75 is no failure, so no Open MPI banner saying a process
# "returned a non-zero exit code"; rank 0's line says the checkpoint is saved.
first_log=out/demo/first-run.log
SHARDQ_LOG=debug SHARDQ_TEST_CHUNK_DELAY_MS=40 mpirun --quiet -np 4 "$shardq" run "$job" >"$first_log" 2>&1 &
pid=$!
until [ "$(grep -c 'assign 2 task' "$first_log")" -ge 16 ]; do
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.1
done
kill -USR1 "$pid" 2>/dev/null
wait "$pid"
code=$?
set -e
grep -v '\[debug\]' "$first_log"
echo "== first run exited $code (75 = interrupted, checkpoint saved)"
"$shardq" status "$checkpoint"

if [ "$code" = 75 ]; then
  echo "== resume"
  time mpirun -np 4 "$shardq" run "$job"
  "$shardq" status "$checkpoint"
fi
"$shardq" verify --src out/demo/dsv41-mini --dst out/demo/dsv41-mini-nvfp4-engram
summaries=(out/demo/dsv41-mini-nvfp4-engram/engram-nvfp4.json)

echo "== nvfp4-1017 on 4 ranks (reference: out/demo/dsv41-mini-ref-nvfp4)"
time mpirun -np 4 "$shardq" run jobs/demo-1017-nvfp4.toml
"$shardq" verify --src out/demo/dsv41-mini --dst out/demo/dsv41-mini-1017-nvfp4 jobs/demo-1017-nvfp4.toml
summaries+=(out/demo/dsv41-mini-1017-nvfp4/nvfp4-1017.json)

echo "== w8a8-int8 on 4 ranks"
time mpirun -np 4 "$shardq" run jobs/demo-w8a8-int8.toml
"$shardq" verify --src out/demo/dsv41-mini --dst out/demo/dsv41-mini-w8a8-int8 jobs/demo-w8a8-int8.toml
summaries+=(out/demo/dsv41-mini-w8a8-int8/w8a8-int8.json)

echo "== summary"
for report in "${summaries[@]}"; do python3 scripts/report_summary.py "$report"; done
