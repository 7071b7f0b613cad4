#!/usr/bin/env bash
# Builds the standalone FP8 prototype check for sm_90a into $1 (default build-fp8), one binary per
# tile config. Run the binaries on the GPU machine: run(command="build-fp8/fp8_check_128x128", carry=["build-fp8"]).
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
out=${1:-$root/build-fp8}
mkdir -p "$out"
for cfg in "128 128 6" "64 256 5"; do
  set -- $cfg
  nvcc -std=c++20 -O2 -gencode arch=compute_90a,code=sm_90a -DBM=$1 -DBN=$2 -DSTAGES=$3 \
    -I"$root/kernel_templates" -Xptxas -v "$root/tests/gpu/standalone/fp8_block_scaled_check.cu" \
    -o "$out/fp8_check_${1}x${2}" -L/usr/local/cuda/lib64/stubs -lcuda 2>&1 | grep -E "error|registers|spill" || true
done
