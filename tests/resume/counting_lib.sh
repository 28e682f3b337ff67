# Shared start of the bad-input script tests (sourced, not a test itself): they run every
# case and count failures instead of stopping at the first (lib.sh's fail exits).
# Sets source_dir, job (the demo job), work (a mktemp -d folder removed on exit) and
# failures; fail() prints and counts. Exits 77 (skip) without SHARDQ_BIN.
set -euo pipefail

[ -n "${SHARDQ_BIN:-}" ] || { echo "SHARDQ_BIN is not set"; exit 77; }
source_dir="${SHARDQ_SOURCE_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"
job="$source_dir/jobs/demo-engram-nvfp4.toml"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0

fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
