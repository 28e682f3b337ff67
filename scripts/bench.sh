#!/usr/bin/env bash
# Benchmarks, one function per benchmark; `scripts/bench.sh` runs them all,
# `scripts/bench.sh <name>` runs one (e.g. `scripts/bench.sh kernels`).
# BUILD_DIR (default build/release) must hold a built shardq_bench and shardq_stream_copy.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir="${BUILD_DIR:-build/release}"

# interleaved_report FILTER <<'PY' ... PY: the shardq_bench benchmarks matching FILTER on one
# core, each run BENCH_REPETITIONS times in random interleaving with the others (this VM's
# speed drifts by tens of percent over seconds), then the Python report read from stdin,
# which finds `runs`: {run name: its median run}.
interleaved_report() {
  local filter=$1 json report
  report=$(cat)
  json=$(mktemp)
  taskset -c 0 "$build_dir/tests/shardq_bench" --benchmark_filter="$filter" \
    --benchmark_min_time="${BENCH_MIN_TIME:-0.2}" --benchmark_repetitions="${BENCH_REPETITIONS:-8}" \
    --benchmark_enable_random_interleaving=true --benchmark_report_aggregates_only=true \
    --benchmark_out="$json" --benchmark_out_format=json >/dev/null 2>&1
  local medians='import json, sys
runs = {b["run_name"]: b for b in json.load(open(sys.argv[1]))["benchmarks"] if b.get("aggregate_name") == "median"}
'
  python3 -c "$medians$report" "$json"
  rm -f "$json"
}

now() { date +%s.%N; }
seconds_since() { python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.3f}')" "$1" "$(now)"; }

# copy_and_sync FROM TO FILE...: the FILEs of FROM (read once beforehand: from a warm page
# cache) copied into TO by one `cp`, then each fsynced by one `sync` (given files, GNU sync
# fsyncs each: durable as shardq's shards are); prints the seconds. One process for all the
# files, not one per file: on the CI VM a `cp` + `sync` pair per shard costs ~3 ms of process
# starts, which for the real-count fixture's 46 small shards was more than the copy itself
# (0.20-0.26 s against 0.08 s).
copy_and_sync() {
  local from=$1 to=$2 start
  shift 2
  cat "${@/#/$from/}" >/dev/null
  start=$(now)
  cp "${@/#/$from/}" "$to/" && sync "${@/#/$to/}"
  seconds_since "$start"
}

# stream_and_sync FROM TO FILE...: as copy_and_sync, through shardq_stream_copy (writeback
# started behind each 1 MiB piece, each file fsynced at its end, both cores).
stream_and_sync() {
  local from=$1 to=$2 start
  shift 2
  cat "${@/#/$from/}" >/dev/null
  start=$(now)
  "$build_dir/tests/shardq_stream_copy" "$from" "$to" "$@"
  seconds_since "$start"
}

# NVFP4 row kernels (and the FP8 E8M0-32 source decode, scalar and SIMD) on one core vs
# memcpy of the same fp32 bytes (1 KiB per row of 256 values); prints each kernel's GB/s
# and its ratio to memcpy, medians of interleaved repetitions.
bench_kernels() {
  interleaved_report 'memcpy|nvfp4|fp8_dequantize' <<'PY'
# Skipped ones (the CUDA benchmarks without a device) carry no rate.
runs = {name: b["GB/s"] for name, b in runs.items() if "GB/s" in b}
base = runs["BM_memcpy_fp32_rows"]
print("medians of interleaved repetitions")
print(f"{'benchmark':28s} {'GB/s (fp32 in)':>15s} {'x memcpy':>9s}")
for name, gbs in sorted(runs.items()):
    print(f"{name:28s} {gbs:15.3f} {gbs / base:9.3f}")
PY
}

# GPTQ on one core: rows/s for rtn, mse, gptq, gptq-mse, and GPTQ's FLOP rate (2 * 32,640
# flops per row) next to single-thread SGEMM 256^3 measured in the same run, same BLAS.
bench_gptq() {
  local json
  json=$(mktemp)
  OPENBLAS_NUM_THREADS=1 taskset -c 0 "$build_dir/tests/shardq_bench" \
    --benchmark_filter='sgemm_single|BM_gptq|row_quantizer' --benchmark_min_time="${BENCH_MIN_TIME:-0.5}" \
    --benchmark_out="$json" --benchmark_out_format=json >/dev/null 2>&1
  python3 - "$json" <<'PY'
import json, sys
runs = json.load(open(sys.argv[1]))["benchmarks"]
names = {"BM_row_quantizer/cand:1": "rtn", "BM_row_quantizer/cand:8": "mse"}
print(f"{'benchmark':34s} {'method':9s} {'rows/s':>10s} {'GFLOP/s':>8s} {'sgemm':>7s} {'x sgemm':>8s}")
for b in runs:
    name = b["name"]
    if name.startswith("BM_sgemm"):
        print(f"{name:34s} {'sgemm':9s} {'':>10s} {b['GFLOP/s']:8.2f}")
        continue
    method = names.get(name) or ("gptq-mse" if "cand:8" in name else "gptq")
    line = f"{name:34s} {method:9s} {b['rows/s']:10.0f}"
    if "sgemm_GFLOP/s" in b:
        line += f" {b['GFLOP/s']:8.2f} {b['sgemm_GFLOP/s']:7.2f} {b['GFLOP/s'] / b['sgemm_GFLOP/s']:8.3f}"
    print(line)
PY
  rm -f "$json"
}

# Reader::read_rows over one 1 GiB tensor in 64 MiB and 1 MiB chunks vs `cat FILE > /dev/null`
# on the same file, all warm (page cache); prints GB/s of each and the ratio reader / cat.
bench_reader() {
  local json
  json=$(mktemp)
  "$build_dir/tests/shardq_bench" --benchmark_filter='BM_reader_read_rows|BM_cat_file' \
    --benchmark_min_time="${BENCH_MIN_TIME:-2}" --benchmark_out="$json" --benchmark_out_format=json >/dev/null 2>&1
  python3 - "$json" <<'PY'
import json, sys
runs = {b["name"].rsplit("/", 1)[0]: b["bytes_per_second"] / 1e9 for b in json.load(open(sys.argv[1]))["benchmarks"]}
cat = runs["BM_cat_file"]
for label, name in [("reader, 64 MiB chunks", "BM_reader_read_rows/64"), ("reader, 1 MiB chunks", "BM_reader_read_rows/1")]:
    print(f"{label:24s} {runs[name]:8.2f} GB/s   x cat {runs[name] / cat:5.2f}")
print(f"{'cat > /dev/null':24s} {cat:8.2f} GB/s")
PY
  rm -f "$json"
}

# The fixture of the end-to-end benchmarks, made once and kept: --engram-vocab 170000 gives
# two Engram tables of ~4.1M rows x 256 E4M3 bytes (>= 1 GB each). BENCH_WORK (default
# build_dir/bench-e2e) holds it and the outputs. Prints the folder.
e2e_fixture() {
  local work="${BENCH_WORK:-$build_dir/bench-e2e}"
  if [ ! -f "$work/src/model.safetensors.index.json" ]; then
    "$build_dir/shardq" fixture --preset dsv41-mini --out "$work/src" --engram-vocab "${BENCH_ENGRAM_VOCAB:-170000}" >/dev/null
  fi
  echo "$work"
}

# Shards of the source that hold the Engram tables (the ones `shardq run` rewrites).
e2e_table_shards() {
  python3 - "$1/model.safetensors.index.json" <<'PY'
import json, sys
weight_map = json.load(open(sys.argv[1]))["weight_map"]
print("\n".join(sorted({f for n, f in weight_map.items() if n.endswith(".engram.embed.weight")})))
PY
}

# `shardq run` (one rank) for ranks=1, `mpirun -np N shardq run` otherwise, method rtn
# unless named, into a fresh dst; prints the wall seconds. Chunks of 65536 rows give the
# 4M-row bench tables ~62 chunks each, so the pipeline's fill and drain weigh about what
# they weigh in a real table (384M rows in 1M-row chunks: 366 chunks).
# THREADS: run.threads per rank (default: unset, the cores in the rank's affinity mask);
# the peak RSS of the ranks' largest process goes to $dst.rss (KiB).
e2e_run_seconds() { # work ranks dst [method] [threads]
  local work=$1 ranks=$2 dst=$3 method=${4:-rtn} threads=${5:-} start launcher=()
  [ "$ranks" -gt 1 ] && launcher=(mpirun -np "$ranks")
  rm -rf "$dst"
  start=$(now)
  /usr/bin/time -o "$dst.rss" -f %M "${launcher[@]}" "$build_dir/shardq" run jobs/demo-engram-nvfp4.toml \
    --src "$work/src" --dst "$dst" --set "quant.method=\"$method\"" ${threads:+--set "run.threads=$threads"} \
    --set "run.rows_per_chunk=${BENCH_ROWS_PER_CHUNK:-65536}" >"$dst.log" 2>&1 ||
    { echo "shardq run failed (-np $ranks):" >&2; tail -5 "$dst.log" >&2; return 1; }
  seconds_since "$start"
}

# End-to-end `shardq run` (rtn) on the >= 1 GB tables next to `cp` of the same table shards
# (each cp'd file fsync'd: shardq's output is durable too), both from a warm page cache.
# Target: shardq <= 1.3x cp.
bench_e2e() {
  local work shards=() bytes=0 cp_s run_s
  work=$(e2e_fixture)
  mapfile -t shards < <(e2e_table_shards "$work/src")
  rm -rf "$work/cp" && mkdir -p "$work/cp"
  for shard in "${shards[@]}"; do bytes=$((bytes + $(stat -c %s "$work/src/$shard"))); done
  cp_s=$(copy_and_sync "$work/src" "$work/cp" "${shards[@]}")
  rm -rf "$work/cp"
  run_s=$(e2e_run_seconds "$work" 1 "$work/out-e2e")
  python3 - "$bytes" "$cp_s" "$run_s" "${#shards[@]}" "$(cut -d' ' -f1-3 /proc/loadavg)" <<'PY'
import sys
size, cp_s, run_s, shards, load = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]), sys.argv[4], sys.argv[5]
print(f"table shards: {shards}, {size / 1e9:.3f} GB in; load average {load}")
print(f"{'cp + fsync':24s} {cp_s:9.2f} s {size / cp_s / 1e9:7.3f} GB/s")
print(f"{'shardq run rtn (1 rank, all cores)':24s} {run_s:9.2f} s {size / run_s / 1e9:7.3f} GB/s")
print(f"{'ratio shardq / cp':24s} {run_s / cp_s:9.2f} (target <= 1.3)")
PY
}

# End-to-end throughput of `mpirun -np 2` vs one rank on the same >= 1 GB tables, for rtn
# (I/O-bound: one rank already overlaps reading and writing with compute) and for the
# compute-bound gptq-mse (the product's method: target >= 1.8x). Runs alternate (-np 1,
# -np 2, -np 1, ...; BENCH_PAIRS pairs, default 2) so that the VM's drift hits both alike,
# and the ratio is of the medians. Then (BENCH_CEILING=0 skips it) two independent -np 1
# runs at once: what two cores give two unrelated processes here (2 x alone / together),
# the ceiling for -np 2 on this VM.
bench_scaling() {
  local work method pair shard ones=() twos=() ceiling=""
  work=$(e2e_fixture)
  # shellcheck source=mpi_env.sh
  source scripts/mpi_env.sh
  for method in ${BENCH_SCALING_METHODS:-rtn gptq-mse}; do
    ones=() twos=()
    for ((pair = 0; pair < ${BENCH_PAIRS:-2}; pair++)); do
      ones+=("$(e2e_run_seconds "$work" 1 "$work/out-np1" "$method" 1)")
      twos+=("$(e2e_run_seconds "$work" 2 "$work/out-np2" "$method" 1)")
      for shard in $(e2e_table_shards "$work/src"); do
        cmp -s "$work/out-np1/$shard" "$work/out-np2/$shard" || echo "warning: -np 1 and -np 2 differ in $shard"
      done
    done
    if [ "${BENCH_CEILING:-1}" = 1 ]; then
      e2e_run_seconds "$work" 1 "$work/out-c1" "$method" 1 >"$work/c1.s" &
      e2e_run_seconds "$work" 1 "$work/out-c2" "$method" 1 >"$work/c2.s"
      wait
      ceiling=$(python3 -c "import sys; print(max(float(open(f).read()) for f in sys.argv[1:]))" "$work/c1.s" "$work/c2.s")
      rm -rf "$work/out-c1" "$work/out-c2" "$work/c1.s" "$work/c2.s"
    fi
    rm -rf "$work/out-np1" "$work/out-np2"
    python3 - "$method" "${ones[*]}" "${twos[*]}" "$ceiling" "$(grep -c ^processor /proc/cpuinfo)" "$(cut -d' ' -f1-3 /proc/loadavg)" <<'PY'
import statistics, sys
method, ones, twos, ceiling, cores, load = sys.argv[1:7]
ones, twos = [float(t) for t in ones.split()], [float(t) for t in twos.split()]
one, two = statistics.median(ones), statistics.median(twos)
print(f"{cores} cores, load average {load}")
print(f"{'shardq run ' + method + ' -np 1':28s} {one:9.2f} s  (runs: {', '.join(f'{t:.2f}' for t in ones)})")
print(f"{'shardq run ' + method + ' -np 2':28s} {two:9.2f} s  (runs: {', '.join(f'{t:.2f}' for t in twos)})")
# The target is for the compute-bound product method; rtn waits on the disk (docs/benchmarks.md).
target = "(target >= 1.8)" if method != "rtn" else "(disk-bound: the target is for gptq-mse)"
print(f"{'speedup np2 / np1 ' + method:28s} {one / two:9.2f} {target}")
if ceiling:
    print(f"{'two -np 1 runs at once':28s} {float(ceiling):9.2f} s: ceiling {2 * one / float(ceiling):.2f}x")
PY
  done
}

# Threads per rank (gptq-mse, the compute-bound product method, on the bench tables):
# -np 1 with 2 threads vs 1 thread (target >= 1.8x, or >= 0.95x of the ceiling: two
# independent 1-thread runs at once, measured in the same run), and -np 1 x 2 threads vs
# -np 2 x 1 thread (target >= 0.95x). Runs alternate (BENCH_PAIRS rounds, default 2) and
# medians are compared. Also peak RSS per configuration and the factors stage alone
# (BM_column_factors, 2 threads vs 1). BENCH_THREADS_METHOD picks another method.
bench_threads() {
  local work method=${BENCH_THREADS_METHOD:-gptq-mse} pair t1=() t2=() r2=() ceiling json
  work=$(e2e_fixture)
  # shellcheck source=mpi_env.sh
  source scripts/mpi_env.sh
  for ((pair = 0; pair < ${BENCH_PAIRS:-2}; pair++)); do
    t1+=("$(e2e_run_seconds "$work" 1 "$work/out-t1" "$method" 1)")
    t2+=("$(e2e_run_seconds "$work" 1 "$work/out-t2" "$method" 2)")
    r2+=("$(e2e_run_seconds "$work" 2 "$work/out-r2" "$method" 1)")
    for shard in $(e2e_table_shards "$work/src"); do
      cmp -s "$work/out-t1/$shard" "$work/out-t2/$shard" || echo "warning: 1 and 2 threads differ in $shard"
      cmp -s "$work/out-t1/$shard" "$work/out-r2/$shard" || echo "warning: -np 1 and -np 2 differ in $shard"
    done
  done
  e2e_run_seconds "$work" 1 "$work/out-c1" "$method" 1 >"$work/c1.s" &
  e2e_run_seconds "$work" 1 "$work/out-c2" "$method" 1 >"$work/c2.s"
  wait
  ceiling=$(python3 -c "import sys; print(max(float(open(f).read()) for f in sys.argv[1:]))" "$work/c1.s" "$work/c2.s")
  json=$(mktemp)
  "$build_dir/tests/shardq_bench" --benchmark_filter='BM_column_factors' --benchmark_repetitions="${BENCH_REPETITIONS:-3}" \
    --benchmark_report_aggregates_only=true --benchmark_out="$json" --benchmark_out_format=json >/dev/null 2>&1
  python3 - "$method" "${t1[*]}" "${t2[*]}" "${r2[*]}" "$ceiling" "$(cat "$work/out-t1.rss")" "$(cat "$work/out-t2.rss")" \
    "$json" "$(nproc)" "$(cut -d' ' -f1-3 /proc/loadavg)" <<'PY'
import json, statistics, sys
method, t1, t2, r2, ceiling, rss1, rss2, bench, cores, load = sys.argv[1:11]
runs = {name: [float(t) for t in times.split()] for name, times in (("t1", t1), ("t2", t2), ("r2", r2))}
one, two, ranks = (statistics.median(runs[k]) for k in ("t1", "t2", "r2"))
ceiling = 2 * one / float(ceiling)
print(f"{cores} cores, load average {load}; {method}")
for label, key in (("-np 1 x 1 thread", "t1"), ("-np 1 x 2 threads", "t2"), ("-np 2 x 1 thread", "r2")):
    print(f"{label:28s} {statistics.median(runs[key]):9.2f} s  (runs: {', '.join(f'{t:.2f}' for t in runs[key])})")
print(f"{'two -np 1 runs at once':28s} ceiling {ceiling:.2f}x")
print(f"{'speedup 2 threads / 1':28s} {one / two:9.2f} (target >= 1.8, or >= 0.95 x ceiling = {0.95 * ceiling:.2f})")
print(f"{'2 threads vs 2 ranks':28s} {ranks / two:9.2f} (target >= 0.95)")
print(f"{'peak RSS 1 / 2 threads':28s} {int(rss1) / 1024:.0f} MiB / {int(rss2) / 1024:.0f} MiB")
factors = {b["run_name"]: b["real_time"] for b in json.load(open(bench))["benchmarks"] if b.get("aggregate_name") == "median"}
f1, f2 = factors["BM_column_factors/threads:1/real_time"], factors["BM_column_factors/threads:2/real_time"]
print(f"{'factors stage 2 threads / 1':28s} {f1 / f2:9.2f} ({f1:.1f} ms vs {f2:.1f} ms for 8 columns)")
PY
  rm -rf "$work"/out-t1* "$work"/out-t2* "$work"/out-r2* "$work"/out-c1* "$work"/out-c2* "$work"/c1.s "$work"/c2.s "$json"
}

# The 1017 transcode on one core: the codec's work on expert rows (scales re-expressed,
# codes passed through without a copy) vs memcpy of the same bytes (codes + scales), and
# the Engram MXFP4 quantizer's rows/s. Target: transcode >= 1x memcpy.
bench_transcode() {
  interleaved_report 'transcode|memcpy_mxfp4|mxfp4_quantize' <<'PY'
base = runs["BM_memcpy_mxfp4_expert_bytes"]["GB/s"]
print("medians of interleaved repetitions, one core")
for name, b in sorted(runs.items()):
    line = f"{name:32s}"
    if "GB/s" in b:
        line += f" {b['GB/s']:8.3f} GB/s"
    if "rows/s" in b:
        line += f" {b['rows/s'] / 1e6:8.3f} M rows/s"
    if name == "BM_transcode_mxfp4_nvfp4":
        line += f"   x memcpy {b['GB/s'] / base:.2f} (target >= 1)"
    print(line)
PY
}

# cp_vs_run SRC DST_DIR LABEL TARGET CMD...: the shards of SRC (from a warm page cache)
# copied with `cp` + fsync into DST_DIR/cp, then CMD (which writes DST_DIR/out), then the
# shards CMD wrote under the same names copied the same way (the disk's cost of the bytes
# the job writes, where its output is larger than its input), then those shards again
# through shardq_stream_copy (the floor: as a plan-free streaming engine writes them), in
# turn, BENCH_ROUNDS times (default 3): the disk of a shared VM swings 2-4x between
# minutes, so each round's ratios are taken between neighbours and the median ratio is the
# figure. Prints every round, the medians, and the output size next to the input size.
cp_vs_run() {
  local src=$1 dir=$2 label=$3 target=$4
  shift 4
  local shards=() bytes=0 out_bytes=0 start cp_s run_s cp_out_s stream_out_s times=()
  mapfile -t shards < <(cd "$src" && ls ./*.safetensors | sed 's#^./##')
  for shard in "${shards[@]}"; do bytes=$((bytes + $(stat -c %s "$src/$shard"))); done
  sync # what others left dirty (a build just before, say) is written back before the first round, not during it
  copy_shards() { # COPIER FROM: the shards copied into a fresh $dir/cp by copy_and_sync or stream_and_sync
    rm -rf "$dir/cp" && mkdir -p "$dir/cp"
    "$1" "$2" "$dir/cp" "${shards[@]}"
  }
  for ((round = 0; round < ${BENCH_ROUNDS:-3}; round++)); do
    rm -rf "$dir/out"
    cp_s=$(copy_shards copy_and_sync "$src")
    rm -rf "$dir/cp"
    cat "${shards[@]/#/$src/}" >/dev/null
    start=$(now)
    "$@" --dst "$dir/out" >"$dir/out.log" 2>&1 || { echo "shardq run failed:" >&2; tail -5 "$dir/out.log" >&2; return 1; }
    run_s=$(seconds_since "$start")
    out_bytes=$(cat "${shards[@]/#/$dir/out/}" | wc -c)
    cp_out_s=$(copy_shards copy_and_sync "$dir/out")
    stream_out_s=$(copy_shards stream_and_sync "$dir/out")
    rm -rf "$dir/cp"
    times+=("$cp_s" "$run_s" "$cp_out_s" "$stream_out_s")
  done
  rm -rf "$dir/out"
  python3 - "$bytes" "$out_bytes" "${#shards[@]}" "$label" "$target" "$(cut -d' ' -f1-3 /proc/loadavg)" "$src" "${times[@]}" <<'PY'
import collections, json, os, statistics, sys
size, out_size, shards, label, target, load = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4], float(sys.argv[5]), sys.argv[6]
tensors = len(json.load(open(os.path.join(sys.argv[7], "model.safetensors.index.json")))["weight_map"])
times = [float(t) for t in sys.argv[8:]]
Round = collections.namedtuple("Round", "cp run cp_out stream")
rounds = [Round(*times[i:i + 4]) for i in range(0, len(times), 4)]
print(f"rewritten shards: {shards}, {size / 1e9:.3f} GB in, {out_size / 1e9:.3f} GB out; load average {load}")
for i, x in enumerate(rounds):
    print(f"round {i}: cp + fsync {x.cp:6.2f} s, shardq {x.run:6.2f} s, ratio {x.run / x.cp:5.2f}; "
          f"cp + fsync of its output {x.cp_out:6.2f} s, ratio {x.run / x.cp_out:5.2f}; streamed {x.stream:6.2f} s")
cp_s = statistics.median(x.cp for x in rounds)
run_s = statistics.median(x.run for x in rounds)
cp_out_s = statistics.median(x.cp_out for x in rounds)
stream_s = statistics.median(x.stream for x in rounds)
print(f"{'cp + fsync (median)':28s} {cp_s:9.2f} s {size / cp_s / 1e9:7.3f} GB/s")
print(f"{label + ' (median)':28s} {run_s:9.2f} s {size / run_s / 1e9:7.3f} GB/s in, {out_size / run_s / 1e9:.3f} GB/s out")
print(f"{'cp + fsync of its output':28s} {cp_out_s:9.2f} s {out_size / cp_out_s / 1e9:7.3f} GB/s")
# The same output bytes written as a plan-free streaming engine writes them (shardq_stream_copy:
# writeback started behind each piece, both cores). The faster of the two copies in a round
# is its floor, what writing these bytes alone takes here; what the target leaves above it
# is the budget for everything else a job does. A floor on small shards only: after a job
# writes GBs this VM's disk slows for seconds, and the copies that follow can take longer
# than the job did (docs/benchmarks.md).
print(f"{'streamed copy of its output':28s} {stream_s:9.2f} s {out_size / stream_s / 1e9:7.3f} GB/s")
floor = lambda x: min(x.cp_out, x.stream)
print(f"{'median ratio shardq / cp':28s} {statistics.median(x.run / x.cp for x in rounds):9.2f} (target <= {target})")
print(f"{'  ... / cp of its output':28s} {statistics.median(x.run / x.cp_out for x in rounds):9.2f}")
print(f"{'  budget above the floor':28s} {statistics.median(target * x.cp - floor(x) for x in rounds) * 1e3:9.1f} ms "
      f"(target x cp - the faster copy of its output); shardq above the floor "
      f"{statistics.median(x.run - floor(x) for x in rounds) * 1e3:.1f} ms")
# What the job costs beyond the disk's share of its own output, spread over the source's
# tensors: the engine's fixed cost per tensor, which a fixture of many small ones exposes.
print(f"{'  beyond cp of its output':28s} {statistics.median(x.run - x.cp_out for x in rounds) / tensors * 1e6:9.2f} us per source tensor ({tensors} tensors)")
PY
}

# The whole nvfp4-1017 job (one rank) on the e2e fixture (>= 1 GB Engram tables) and its
# reference, next to `cp` + fsync of the shards it rewrites (cp_vs_run). Target: <= 1.3x.
bench_1017() {
  local work ref
  work=$(e2e_fixture)
  ref="$work/ref"
  if [ ! -f "$ref/model.safetensors.index.json" ]; then
    "$build_dir/shardq" fixture --preset dsv41-mini-ref-nvfp4 --out "$ref" --engram-vocab "${BENCH_ENGRAM_VOCAB:-170000}" >/dev/null
  fi
  cp_vs_run "$work/src" "$work/1017" "shardq run 1017" 1.3 "$build_dir/shardq" run jobs/demo-1017-nvfp4.toml \
    --src "$work/src" --set "quant.input_scales_from=\"$ref\"" --set "run.rows_per_chunk=${BENCH_ROWS_PER_CHUNK:-65536}"
}

# W8A8 INT8 rows on one core (4096 rows x 2048 columns): FP8 32x32-block and FP4 expert
# rows decoded and quantized per channel (quantize_linear_row_int8, the fused SIMD row; the
# *_ref lines: the scalar decode_linear_row + quantize_row_int8_ref), and the codec's whole
# chunk (encode_chunk), next to memcpy of the same output bytes (I8 codes + F32 scales);
# prints GB/s of output and the ratio to memcpy. Target: rows >= 0.5x memcpy.
# SHARDQ_BENCH_SIMD=SSE4 runs the kernels on that Highway target instead of the best one:
# 128-bit vectors, the width of the DGX Spark's NEON, where no Arm machine is at hand.
bench_int8_rows() {
  interleaved_report 'int8' <<'PY'
import os
base = runs["BM_memcpy_int8_output"]["GB/s"]
print("medians of interleaved repetitions, one core; GB/s of output (I8 codes + F32 scales); "
      f"SIMD target: {os.environ.get('SHARDQ_BENCH_SIMD') or 'the best this CPU runs'}")
print(f"{'benchmark':24s} {'GB/s':>8s} {'M rows/s':>9s} {'x memcpy':>9s}")
for name in ("BM_memcpy_int8_output", "BM_int8_fp8_rows", "BM_int8_fp4_rows", "BM_int8_fp8_rows_narrow",
             "BM_int8_fp4_rows_narrow", "BM_int8_fp4_rows_narrow32", "BM_int8_fp8_codec", "BM_int8_fp4_codec", "BM_int8_fp8_rows_ref", "BM_int8_fp4_rows_ref"):
    b = runs[name]
    target = "   (target >= 0.5)" if name.endswith("_rows") else ""
    print(f"{name:24s} {b['GB/s']:8.3f} {b['rows/s'] / 1e6:9.3f} {b['GB/s'] / base:9.3f}{target}")
PY
}

# The whole w8a8-int8 job (one rank, all cores) on the real-count fixture (`shardq fixture
# --shape real-count`: 40 layers x 384 routed experts, ~100K tensors in 46 shards, ~83 MB,
# made once in BENCH_WORK/real-count): what the engine costs per tensor, next to `cp` +
# fsync of the same shards. Target: <= 1.5x.
bench_int8_many() {
  local work="${BENCH_WORK:-$build_dir/bench-e2e}/real-count"
  if [ ! -f "$work/src/model.safetensors.index.json" ]; then
    rm -rf "$work/src" && mkdir -p "$work" && "$build_dir/shardq" fixture --shape real-count --out "$work/src" >/dev/null
  fi
  cp_vs_run "$work/src" "$work" "shardq run int8 (real-count)" 1.5 "$build_dir/shardq" run jobs/demo-w8a8-int8.toml --src "$work/src"
}

# The fixed costs of int8_many, in process: make_plan for jobs/demo-w8a8-int8.toml on its
# real-count fixture (~100K tensors, 638 tasks; headers, index, recipe, layouts,
# fingerprint), its first steps apart (the source index; the index and every shard header,
# read together), and the output index rendered from that plan (on its own thread during a
# run). Wall time, both cores (the plan's own threads use the second); medians of
# BENCH_REPETITIONS (default 5).
bench_plan() {
  local json
  json=$(mktemp)
  SHARDQ_BENCH_PLAN_DIR="${BENCH_WORK:-$build_dir/bench-e2e}/real-count/src" "$build_dir/tests/shardq_bench" \
    --benchmark_filter='real_count' --benchmark_min_time="${BENCH_MIN_TIME:-0.5}" \
    --benchmark_repetitions="${BENCH_REPETITIONS:-5}" --benchmark_report_aggregates_only=true \
    --benchmark_out="$json" --benchmark_out_format=json >/dev/null 2>&1
  python3 - "$json" <<'PY'
import json, sys
runs = {b["run_name"].split("/")[0]: b for b in json.load(open(sys.argv[1]))["benchmarks"] if b.get("aggregate_name") == "median"}
plan, index = runs["BM_plan_int8_real_count"], runs["BM_output_index_int8_real_count"]
source_index, view = runs["BM_read_index_real_count"], runs["BM_checkpoint_view_real_count"]
print(f"make_plan (w8a8-int8, real-count): {plan['real_time']:7.1f} ms for {plan['tasks']:.0f} tasks")
print(f"  the source index alone:          {source_index['real_time']:7.1f} ms for {source_index['names']:.0f} names")
print(f"  index and shard headers (view):  {view['real_time']:7.1f} ms for {view['tensors']:.0f} tensors")
print(f"output index from the plan:        {index['real_time']:7.1f} ms for {index['names']:.0f} names")
PY
  rm -f "$json"
}

# The INT8 bench's own source (the e2e fixture's linears are ~32 MB: INT8 links the Engram
# shards it does not rewrite): BENCH_INT8_LAYERS shards (default 4), each one layer of
# DeepSeek-sized linears (hidden 7168): attn.wq_a [1536, 7168] (BF16 by the demo ignore
# list), wq_b [4096, 1536], wo_b [7168, 4096], shared experts w1/w3 [2048, 7168] and w2
# [7168, 2048] in FP8 with E8M0 32x32 blocks, BENCH_INT8_EXPERTS (default 8) FP4 experts
# of the same shapes (E2M1 two per byte, E8M0 per 32), a norm and a router gate in BF16:
# ~1.07 GB in by default. Random codes (no NaN), scales 2^-15..2^-4. Made once, kept in
# BENCH_WORK (default build_dir/bench-e2e)/int8-src. Prints the folder.
int8_fixture() {
  local src="${BENCH_WORK:-$build_dir/bench-e2e}/int8-src"
  if [ ! -f "$src/model.safetensors.index.json" ]; then
    python3 - "$src" "${BENCH_INT8_LAYERS:-4}" "${BENCH_INT8_EXPERTS:-8}" <<'PY'
import json, os, struct, sys
import numpy as np
out, layers, experts = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
hidden, inter, q_lora, heads_dim = 7168, 2048, 1536, 4096
os.makedirs(out, exist_ok=True)
rng = np.random.default_rng(3)
def scales(shape):
    return ("F8_E8M0", rng.integers(112, 124, size=shape, dtype=np.uint8))
def fp8(shape):  # E4M3 codes [out, in], E8M0 [ceil(out/32), ceil(in/32)]
    codes = rng.integers(0, 256, size=shape, dtype=np.uint8)
    codes[(codes & 0x7F) == 0x7F] = 0x7E
    return [("F8_E4M3", codes), scales(((shape[0] + 31) // 32, (shape[1] + 31) // 32))]
def fp4(shape):  # E2M1 codes [out, in/2], E8M0 [out, in/32]
    return [("I8", rng.integers(0, 256, size=(shape[0], shape[1] // 2), dtype=np.uint8)), scales((shape[0], shape[1] // 32))]
def bf16(shape):
    return ("BF16", (rng.standard_normal(shape).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16))
weight_map, total = {}, 0
for layer in range(layers):
    shard, p = f"model-{layer + 1:05d}-of-{layers:05d}.safetensors", f"layers.{layer}"
    tensors = [(f"{p}.attn_norm.weight", *bf16((hidden,)))]
    def linear(name, make, shape):
        (wd, w), (sd, s) = make(shape)
        tensors.extend([(f"{name}.weight", wd, w), (f"{name}.scale", sd, s)])
    linear(f"{p}.attn.wq_a", fp8, (q_lora, hidden))
    linear(f"{p}.attn.wq_b", fp8, (heads_dim, q_lora))
    linear(f"{p}.attn.wo_b", fp8, (hidden, heads_dim))
    tensors.append((f"{p}.ffn.gate.weight", *bf16((experts, hidden))))
    projections = (("w1", (inter, hidden)), ("w2", (hidden, inter)), ("w3", (inter, hidden)))
    for w, shape in projections:
        linear(f"{p}.ffn.shared_experts.{w}", fp8, shape)
    for e in range(experts):
        for w, shape in projections:
            linear(f"{p}.ffn.experts.{e}.{w}", fp4, shape)
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, dtype, data in tensors:
        header[name] = {"dtype": dtype, "shape": list(data.shape), "data_offsets": [offset, offset + data.nbytes]}
        offset += data.nbytes
        weight_map[name] = shard
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(f"{out}/{shard}", "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for _, _, data in tensors:
            f.write(data.tobytes())
    total += offset
json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, open(f"{out}/model.safetensors.index.json", "w"), indent=2)
config = {"architectures": ["DeepseekV41ForCausalLM"], "model_type": "deepseek_v4_1", "hidden_size": hidden,
          "num_hidden_layers": layers, "moe_intermediate_size": inter, "n_routed_experts": experts,
          "quantization_config": {"quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": [32, 32],
                                  "scale_fmt": "ue8m0", "expert_dtype": "fp4"}}
json.dump(config, open(f"{out}/config.json", "w"), indent=2)
PY
  fi
  echo "$src"
}

# The whole w8a8-int8 job (one rank, the demo job's ignore list) on int8_fixture, next to
# `cp` + fsync of the shards it rewrites (all of them here; cp_vs_run). INT8 writes more
# than it reads (an FP4 expert doubles, a BF16 linear doubles), so the ratio per byte
# written is printed too. Target: shardq <= 1.5x cp.
bench_int8() {
  local src
  src=$(int8_fixture)
  cp_vs_run "$src" "$(dirname "$src")/int8" "shardq run int8" 1.5 "$build_dir/shardq" run jobs/demo-w8a8-int8.toml \
    --src "$src" --set "run.rows_per_chunk=${BENCH_ROWS_PER_CHUNK:-2048}"
}

main() {
  local benches=(bench_kernels bench_gptq bench_reader bench_e2e bench_scaling bench_transcode bench_1017 bench_int8_rows bench_int8
    bench_int8_many bench_plan bench_threads)
  if [ $# -ge 1 ]; then
    "bench_$1"
  else
    for bench in "${benches[@]}"; do "$bench"; done
  fi
}

main "$@"
