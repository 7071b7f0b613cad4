#!/usr/bin/env bash
# On the GPU machine: moejit's suite, then torch._grouped_mm on the same routing and the two
# roofline ceilings, then the merged table (all one run). Results in $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/moejit-out}
mkdir -p "$OUT"
export MOEJIT_CACHE_DIR=${MOEJIT_CACHE_DIR:-/tmp/moejit-cache}
${BUILD:-build}/examples/bench_suite "$OUT/routing.csv" > "$OUT/bench_suite.csv" || exit 1
PYTHONUNBUFFERED=1 python3 tests/gpu/peers.py "$OUT/routing.csv" > "$OUT/peers.csv" || exit 1
python3 tests/gpu/bench_report.py "$OUT/bench_suite.csv" "$OUT/peers.csv" | tee "$OUT/perf_table.md"
