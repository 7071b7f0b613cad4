#!/usr/bin/env bash
# On the GPU machine: DeepGEMM as a peer (tests/gpu/deepgemm_peer.py) beside moejit's suite, FP8 and
# bf16, one call; tables in $OUT (deepgemm_{fp8,bf16}.md). DeepGEMM is not in the repo and the device
# has no network: stage it on the CPU machine first, in an ignored folder (scratch/ is), e.g. with
# the library's fetch tool (github:deepseek-ai/DeepGEMM, NVIDIA/cutlass, fmtlib/fmt) and
#   git -C DEEPGEMM archive HEAD csrc deep_gemm | tar -x -C scratch/dg
#   git -C CUTLASS archive <DeepGEMM's pinned commit> include | tar -x -C scratch/dg/third-party/cutlass
#   git -C FMT archive HEAD include | tar -x -C scratch/dg/third-party/fmt
# (~30 MB), then run(command="tests/gpu/run_deepgemm.sh", carry=["build/examples", "scratch"]).
# The first call builds DeepGEMM's extension (~45 s) and JIT-compiles its kernels with NVCC (~2 min
# for both formats; its NVRTC path misses CUDA 13's headers).
set -uo pipefail
OUT=${OUT:-/tmp/moejit-out}
mkdir -p "$OUT"
export PATH=/usr/local/cuda/bin:$PATH
export MOEJIT_CACHE_DIR=${MOEJIT_CACHE_DIR:-/tmp/moejit-cache}
export DG_ROOT=${DG_ROOT:-$PWD/scratch/dg} DG_BUILD=${DG_BUILD:-/tmp/dg-build} DG_JIT_CACHE_DIR=${DG_JIT_CACHE_DIR:-/tmp/dg-cache}
export DG_JIT_USE_NVRTC=0
BUILD=${BUILD:-build}
status=0
for kind in fp8 bf16; do
  format=$([ $kind = fp8 ] && echo e4m3 || echo bf16)
  FORMAT=$format "$BUILD"/examples/bench_suite "$OUT/routing_$kind.csv" > "$OUT/bench_$kind.csv" 2> /dev/null || status=1
  (cd tests/gpu && PYTHONUNBUFFERED=1 python3 deepgemm_peer.py "$OUT/routing_$kind.csv" $kind > "$OUT/deepgemm_$kind.csv" 2> "$OUT/deepgemm_$kind.log") || status=1
  python3 tests/gpu/deepgemm_report.py "$OUT/bench_$kind.csv" "$OUT/deepgemm_$kind.csv" $kind > "$OUT/deepgemm_$kind.md" || status=1
  tail -1 "$OUT/deepgemm_$kind.md"
done
exit $status
