#!/usr/bin/env bash
# On the GPU machine: Nsight Compute on the fused GEMM1 (gather + bias + swiglu_oai) of one
# gpt-oss-120b layer and on the plain grouped GEMM of the same shape, for the question docs/perf.md
# v5 leaves open: why the fused GEMM1 costs +16% (bf16) / +12-18% (MXFP4) over plain at 16384
# tokens while Qwen3's costs nothing. examples/moe_layer with --reps 1 launches moejit_grouped_gemm
# in this order: the checked layer, 5 warm-up layers and 1 timed one (GEMM1, GEMM2 each: launches
# 0..13), then the plain GEMM1 (3 warm-ups + 1: 14..17). Launch 0 is the first fused GEMM1, launch
# 14 the first plain one (the route() before the checked layer launches routing kernels only).
#   WEIGHTS (default "bf16 mxfp4")   TOKENS (default 16384)   NCU_SECTIONS (default below)
set -uo pipefail
OUT=${OUT:-/tmp/moejit-out}
mkdir -p "$OUT"
export MOEJIT_CACHE_DIR=${MOEJIT_CACHE_DIR:-/tmp/moejit-cache}
export PATH=/usr/local/cuda/bin:$PATH
BUILD=${BUILD:-build}
# SourceCounters with -lineinfo kernels: the warp-stall samples by source line (top stall locations).
export MOEJIT_LINEINFO=1
sections=${NCU_SECTIONS:-"SpeedOfLight MemoryWorkloadAnalysis WarpStateStats SchedulerStats LaunchStats Occupancy SourceCounters"}
section_args=()
for s in $sections; do section_args+=(--section "$s"); done
status=0
for w in ${WEIGHTS:-bf16 mxfp4}; do
  # Compile first (outside the profiler), so that ncu's replays time only the kernels.
  "$BUILD"/examples/moe_layer --model gpt-oss-120b --tokens "${TOKENS:-16384}" --weights "$w" --reps 1 \
    > /dev/null 2> "$OUT/layer_$w.txt" || status=1
  for which in fused:0 plain:14; do
    name=${which%%:*} skip=${which##*:}
    echo "== ncu: gpt-oss-120b ${TOKENS:-16384} tokens, $w weights, $name GEMM1 (launch $skip)"
    ncu -k moejit_grouped_gemm --launch-skip "$skip" --launch-count 1 "${section_args[@]}" \
      "$BUILD"/examples/moe_layer --model gpt-oss-120b --tokens "${TOKENS:-16384}" --weights "$w" --reps 1 \
      > "$OUT/ncu_${w}_${name}.txt" 2>&1 || status=1
    grep -E "Duration|Compute \(SM\) Throughput|Memory Throughput|L2 Cache Throughput|DRAM Throughput|Issue Slots Busy|No Eligible|Stall|Registers Per Thread|Grid Size" \
      "$OUT/ncu_${w}_${name}.txt" | head -30
  done
done
exit $status
