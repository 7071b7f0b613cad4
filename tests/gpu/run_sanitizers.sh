#!/usr/bin/env bash
# On the GPU machine: compute-sanitizer memcheck and racecheck over the GPU tests' mixed-size
# case (every layout × scheduler × dtype of each family; empty groups, M=1, ragged N and K).
# Kernels are compiled with -lineinfo (MOEJIT_LINEINFO=1) so reports name source lines.
set -uo pipefail
OUT=${OUT:-/tmp/moejit-out}
mkdir -p "$OUT"
export MOEJIT_CACHE_DIR=${MOEJIT_CACHE_DIR:-/tmp/moejit-cache}
export PATH=/usr/local/cuda/bin:$PATH
export MOEJIT_LINEINFO=1
export MOEJIT_TEST_QUICK=1  # bf16 only: every tile × layout × scheduler
# Catch test spec: the mixed-size case by default; SANITIZE_CASES="[gpu]" runs the whole suite.
case_name=${SANITIZE_CASES:-"every variant: mixed*"}
status=0
for tool in ${SANITIZE_TOOLS:-memcheck racecheck}; do
  for family in ${SANITIZE_FAMILIES:-hopper portable}; do
    echo "== compute-sanitizer --tool $tool, $family family"
    MOEJIT_TEST_FAMILY=$family timeout ${SANITIZE_TIMEOUT:-140} compute-sanitizer --tool $tool --error-exitcode 3 \
      "${BUILD:-build}/tests/moejit_gpu_tests" "$case_name" > "$OUT/sanitizer_${tool}_${family}.txt" 2>&1
    rc=$?
    tail -3 "$OUT/sanitizer_${tool}_${family}.txt"
    echo "exit code $rc"
    [ $rc = 0 ] || status=1
  done
done
exit $status
