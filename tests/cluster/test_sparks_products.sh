#!/usr/bin/env bash
# slurm/sparks.sh as the README documents it, started on the first of four hosts (one
# rank per host with a compute thread per core of its host, launched over ssh, TCP over
# eth0): the demo job of every product
# (jobs/demo-*.toml) gives the bytes of a single-rank run on one host, with both write
# modes (run.write_mode owner and direct). Prints the four-host time next to one host's.
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"

cluster_up
make_demo_fixtures

# seconds_of CMD...: runs CMD, prints how long it took (s, 0.1 s resolution).
seconds_of() {
  local start
  start=$(now)
  "$@" || return
  seconds_since "$start" >"$WORK/seconds"
}

for job in "$SHARDQ_SOURCE_DIR"/jobs/demo-*.toml; do
  name=$(basename "$job" .toml)
  args=(--src "$WORK/src" --set "quant.input_scales_from=\"$WORK/ref-nvfp4\"")
  grep -q input_scales_from "$job" || args=(--src "$WORK/src")

  seconds_of run_shardq 0 "$WORK/$name-one.log" "$job" "${args[@]}" --dst "$WORK/$name-one" ||
    fail "$name on one rank: $(tail -3 "$WORK/$name-one.log")"
  line="$name: one host, 1 rank $(cat "$WORK/seconds") s"
  for mode in owner direct; do
    dst=$WORK/$name-$mode
    seconds_of sparks "$WORK/$name-$mode.log" "$job" "${args[@]}" --set "run.write_mode=\"$mode\"" --dst "$dst" ||
      fail "$name over four hosts ($mode): $(tail -5 "$WORK/$name-$mode.log")"
    grep -q "4 ranks x $(nproc) threads, .* write mode $mode" "$WORK/$name-$mode.log" ||
      fail "$name: not 4 ranks of $(nproc) threads with write mode $mode: $(grep -m1 'ranks x' "$WORK/$name-$mode.log")"
    [[ $(grep -o '\[rank [0-9]\] \[info\] [a-z0-9-]*: 4 ranks x' "$WORK/$name-$mode.log" | sort -u | wc -l) == 4 ]] ||
      fail "$name: not every rank started"
    same_output "$WORK/$name-one" "$dst"
    line+="; four hosts ($mode) $(cat "$WORK/seconds") s"
  done
  echo "figure: $line (four hosts: with the host checks and the ssh launch)"
done
echo "PASS: every demo job over four hosts gives the single-rank bytes in both write modes"
