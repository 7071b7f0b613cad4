#!/usr/bin/env bash
# On the GPU machine: moejit's suite, then torch._grouped_mm on the same routing and the two
# roofline ceilings, then the merged table (all one run); then moejit and torch in turns in one
# process (tests/gpu/torch_turns.py: turns.csv, where both see the same clocks). Results in $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/moejit-out}
mkdir -p "$OUT"
export MOEJIT_CACHE_DIR=${MOEJIT_CACHE_DIR:-/tmp/moejit-cache}
${BUILD:-build}/examples/bench_suite "$OUT/routing.csv" > "$OUT/bench_suite.csv" || exit 1
PYTHONUNBUFFERED=1 python3 tests/gpu/peers.py "$OUT/routing.csv" > "$OUT/peers.csv" || exit 1
python3 tests/gpu/bench_report.py "$OUT/bench_suite.csv" "$OUT/peers.csv" | tee "$OUT/perf_table.md"
PYTHONUNBUFFERED=1 python3 tests/gpu/torch_turns.py "$OUT/routing.csv" "${BUILD:-build}/examples/libmoejit_bench_capi.so" bf16 > "$OUT/turns.csv" || exit 1
tail -1 "$OUT/turns.csv"
