#!/usr/bin/env bash
# On the GPU machine (H100): the quantized-format GPU tests, then the formats benchmark on the
# moe-shapes suite with its peers and ceilings, all one run. Results in $OUT:
#   gpu_tests_formats.txt  moejit_gpu_tests "[fp8],[w4]" (FP8 and 4-bit through the Runtime)
#   bench_{e4m3,mxfp4,nvfp4}.csv, routing.csv, peers_formats.csv, formats_table.md, turns_e4m3.csv
#   (FP8 against torch._scaled_grouped_mm in turns, tests/gpu/torch_turns.py)
# Needs a build with examples and tests (cmake --build build) and torch + triton for the peers.
# Example device call: run(command="tests/gpu/run_formats.sh", carry=["build"]).
set -uo pipefail
OUT=${OUT:-/tmp/moejit-out}
BUILD=${BUILD:-build}
mkdir -p "$OUT"
export MOEJIT_CACHE_DIR=${MOEJIT_CACHE_DIR:-/tmp/moejit-cache}
# Two device calls fit the 10-minute limit better: SKIP_BENCH=1 (tests only), then SKIP_TESTS=1
# (benchmark only). MODELS / TOKENS limit the suite as in bench_suite.
status=0
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  "$BUILD"/tests/moejit_gpu_tests "[fp8],[w4]" --durations yes > "$OUT/gpu_tests_formats.txt" 2>&1 || status=1
  tail -5 "$OUT/gpu_tests_formats.txt"
fi
if [ "${SKIP_BENCH:-0}" != 1 ]; then
  for fmt in e4m3 mxfp4 nvfp4; do
    FORMAT=$fmt "$BUILD"/examples/bench_suite "$OUT/routing_$fmt.csv" > "$OUT/bench_$fmt.csv" 2> "$OUT/bench_$fmt.log" || status=1
  done
  # Every format draws the same routing (bench_suite keeps operand randomness apart); check, then share it.
  cmp -s "$OUT/routing_e4m3.csv" "$OUT/routing_mxfp4.csv" || echo "WARNING: routing differs between formats"
  cp "$OUT/routing_e4m3.csv" "$OUT/routing.csv"
  PYTHONUNBUFFERED=1 python3 tests/gpu/peers_formats.py "$OUT/routing.csv" > "$OUT/peers_formats.csv" 2> "$OUT/peers_formats.log" || status=1
  python3 tests/gpu/formats_report.py "$OUT" | tee "$OUT/formats_table.md" || status=1
  # FP8 against torch._scaled_grouped_mm in turns in one process (the same numbers in both recipes).
  PYTHONUNBUFFERED=1 python3 tests/gpu/torch_turns.py "$OUT/routing.csv" "$BUILD/examples/libmoejit_bench_capi.so" e4m3 \
    > "$OUT/turns_e4m3.csv" 2> "$OUT/turns_e4m3.log" || status=1
  tail -1 "$OUT/turns_e4m3.csv"
fi
exit $status
