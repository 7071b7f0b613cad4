#!/usr/bin/env bash
# On the GPU machine: the heuristic's choice against the autotuner's best for the 40-case suite
# (bench_suite with BENCH_TUNE=1), and the host cost of a launch (launch_overhead). Results in $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/moejit-out}
mkdir -p "$OUT"
export MOEJIT_CACHE_DIR=${MOEJIT_CACHE_DIR:-/tmp/moejit-cache}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee -a "$OUT/device.txt"
${BUILD:-build}/examples/launch_overhead 2>&1 | tee "$OUT/launch_overhead.txt" || exit 1
BENCH_TUNE=1 TUNE_TABLE="$OUT/tune_table.md" ${BUILD:-build}/examples/bench_suite "$OUT/tune_routing.csv" > "$OUT/tune_bench.csv" || exit 1
tail -3 "$OUT/tune_table.md"
