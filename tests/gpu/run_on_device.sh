#!/usr/bin/env bash
# Runs on the GPU machine (the device tool), from the repository root, with the build folder
# carried over from the CPU machine: GPU tests, then the example. Logs go to $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/moejit-out}
mkdir -p "$OUT"
export MOEJIT_CACHE_DIR=/tmp/moejit-cache
export PATH=/usr/local/cuda/bin:$PATH
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee "$OUT/device.txt"
status=0
# SKIP_TESTS=1 / SKIP_EXAMPLE=1 leave a part out (tests/gpu/run_session.sh runs them as stages).
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  echo "== GPU tests"
  # A wrong barrier count hangs rather than fails: the timeout returns the log (with --durations
  # showing the last case that finished) inside the device call's 10 minutes.
  timeout ${GPU_TEST_TIMEOUT:-520} ${BUILD:-build}/tests/moejit_gpu_tests ${GPU_TEST_FILTER:+"$GPU_TEST_FILTER"} --durations yes 2>&1 | tee "$OUT/gpu_tests.txt" | tail -25
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
fi
if [ "${SKIP_EXAMPLE:-0}" != 1 ]; then
  echo "== example"
  for model in ${EXAMPLE_MODELS:-mixtral-8x7b}; do
    ${BUILD:-build}/examples/moe_grouped_gemm --model "$model" --tokens "${EXAMPLE_TOKENS:-4096}" 2>&1 | tee -a "$OUT/example.txt"
    [ "${PIPESTATUS[0]}" = 0 ] || status=1
  done
fi
exit $status
