#!/usr/bin/env bash
# Builds the standalone prototype check of the FP8 block-scaled kernel for sm_90a into $1 (default
# build-proto). Run the binaries on the GPU machine with the folder carried, e.g.
#   run(command="build-proto/fp8_check_128x128", carry=["build-proto"])
# (The MXFP4 prototype check went with the shared-memory-widening prototype kernel when the packed
# layout gained its row exponents, docs/perf.md v10: the [w4] GPU tests cover the 4-bit kernels.)
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
out=${1:-$root/build-proto}
mkdir -p "$out"
build() {  # source, output, extra flags...
  local src=$1 bin=$2
  shift 2
  nvcc -std=c++20 -O2 -gencode arch=compute_90a,code=sm_90a -I"$root/kernel_templates" -Xptxas -v "$@" \
    "$root/tests/gpu/standalone/$src" -o "$out/$bin" -L/usr/local/cuda/lib64/stubs -lcuda 2>&1 |
    grep -E "error|registers|spill|C75" | sed "s/^/$bin: /" || true
}
build fp8_block_scaled_check.cu fp8_check_128x128 -DBM=128 -DBN=128 -DSTAGES=6
build fp8_block_scaled_check.cu fp8_check_64x256 -DBM=64 -DBN=256 -DSTAGES=5
