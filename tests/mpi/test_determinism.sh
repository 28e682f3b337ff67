#!/usr/bin/env bash
# Determinism (docs/design.md "Determinism"): the demo job gives the same bytes and the same
# report figures whatever the rank count (-np 1, 2, 4), the chunk size and the write mode.
# Compared: sha256 of every output file except the report (and the run's own .shardq/
# checkpoint folder), and the report's method, parameters and per-table figures without
# the timings and the chunk count (chunks, compute_seconds, rows_per_compute_second).
# Methods: rtn and mse on the default fixture, all seven variants; gptq-mse on a small one
# (--engram-vocab 600) with four of them (-np 1 / 2 / 4, two chunk sizes, both write
# modes): a GPTQ run costs ~10x an mse run. SHARDQ_TEST_GPTQ=all runs all seven for it too.
# Env: SHARDQ_BIN, SHARDQ_SOURCE_DIR. Exit 77 (skip) without them or without mpirun.
set -euo pipefail

[ -n "${SHARDQ_BIN:-}" ] || { echo "SHARDQ_BIN is not set"; exit 77; }
command -v mpirun >/dev/null || { echo "no mpirun"; exit 77; }
source_dir="${SHARDQ_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}"
# shellcheck source=../../scripts/mpi_env.sh
source "$source_dir/scripts/mpi_env.sh"
job="$source_dir/jobs/demo-engram-nvfp4.toml"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The variants compared with the first one: "label np rows_per_chunk write_mode".
variants=(
  "np1 1 4096 owner"
  "np2 2 4096 owner"
  "np4 4 4096 owner"
  "np2-chunk2500 2 2500 owner"
  "np1-chunk2500 1 2500 owner"
  "np2-direct 2 4096 direct"
  "np4-direct-chunk2500 4 2500 direct"
)

run_variant() { # src method label np rows_per_chunk write_mode
  local src=$1 method=$2 label=$3 np=$4 chunk=$5 mode=$6
  local dst="$work/out/$method/$label"
  mpirun -np "$np" "$SHARDQ_BIN" run "$job" --src "$src" --dst "$dst" \
    --set "quant.method=\"$method\"" --set "run.rows_per_chunk=$chunk" --set "run.write_mode=\"$mode\"" \
    >"$dst.log" 2>&1 || { echo "FAIL: $method $label: shardq run exited $?"; tail -20 "$dst.log"; exit 1; }
}

# sha256 of every output file (links are read through), by relative path.
file_hashes() {
  (cd "$1" && find . \( -path ./.shardq -prune \) -o \( \( -type f -o -type l \) -not -name engram-nvfp4.json -print \) |
    LC_ALL=C sort | xargs sha256sum)
}

# The report without what may legitimately differ: timings, chunk counts, the run section.
report_figures() {
  python3 - "$1/engram-nvfp4.json" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
timing = {"chunks", "compute_seconds", "rows_per_compute_second"}
tables = [{k: v for k, v in t.items() if k not in timing} for t in report["tables"]]
print(json.dumps({"method": report["method"], "parameters": report["parameters"], "tables": tables},
                 sort_keys=True, indent=1))
PY
}

check_method() { # src method [variant...] (default: all)
  local src=$1 method=$2 first="" variant label
  shift 2
  local chosen=("$@")
  ((${#chosen[@]})) || chosen=("${variants[@]}")
  for variant in "${chosen[@]}"; do
    read -r label np chunk mode <<<"$variant"
    mkdir -p "$work/out/$method"
    local start=$SECONDS
    run_variant "$src" "$method" "$label" "$np" "$chunk" "$mode"
    echo "$method $label: $((SECONDS - start)) s"
    local dst="$work/out/$method/$label"
    if [ -z "$first" ]; then
      first=$dst
      continue
    fi
    diff <(file_hashes "$first") <(file_hashes "$dst") ||
      { echo "FAIL: $method $label: output files differ from $(basename "$first")"; exit 1; }
    diff <(report_figures "$first") <(report_figures "$dst") ||
      { echo "FAIL: $method $label: report figures differ from $(basename "$first")"; exit 1; }
    rm -rf "$dst"
  done
  [ "$(file_hashes "$first" | wc -l)" -ge 10 ] || { echo "FAIL: $method: too few output files"; exit 1; }
  echo "ok: $method: ${#chosen[@]} variants give identical files and report figures"
}

"$SHARDQ_BIN" fixture --preset dsv41-mini --out "$work/src" >/dev/null
check_method "$work/src" rtn
check_method "$work/src" mse
"$SHARDQ_BIN" fixture --preset dsv41-mini --out "$work/src-small" --engram-vocab 600 >/dev/null
if [ "${SHARDQ_TEST_GPTQ:-}" = all ]; then
  check_method "$work/src-small" gptq-mse
else
  check_method "$work/src-small" gptq-mse "${variants[0]}" "${variants[2]}" "${variants[3]}" "${variants[6]}"
fi
echo "test_determinism: all variants identical"
