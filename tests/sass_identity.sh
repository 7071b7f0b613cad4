#!/usr/bin/env bash
# Checks that kernels untouched by a change compile to byte-identical SASS: a bf16 Hopper config
# (128x256x64 s4, CTA pairs, dynamic scheduler, contiguous), a portable one (128x128x32, masked,
# dynamic) and four unfused quantized ones (portable FP8 and MXFP4, Hopper NVFP4 4-bit and FP8) are compiled with nvcc against kernel_templates/ of BASE (default: the merge base with main) and of the
# working tree, and their cuobjdump -sass compared. CPU only. Usage: [KEEP=1] tests/sass_identity.sh [BASE]
# (KEEP=1 leaves the work folder with both trees' .sass files for a diff). The Hopper 4-bit kernel
# takes its tail rows' tensor map since the commit that added them: a BASE before it does not compile it.
# Likewise the Hopper FP8 and 4-bit kernels take C's tensor map (their TMA-store epilogues) since v24.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
base=${1:-$(git -C "$root" merge-base HEAD main)}
work=$(mktemp -d)
trap '[ -n "${KEEP:-}" ] || rm -rf "$work"' EXIT
mkdir -p "$work/base"
git -C "$root" archive "$base" kernel_templates | tar -x -C "$work/base"
cat > "$work/hopper.cu" <<'CU'
#include "moejit/hopper/grouped_gemm_sm90.cuh"
extern "C" __global__ void __launch_bounds__(384, 1) moejit_grouped_gemm(
    const __grid_constant__ moejit::GroupedGemmParams p, const __grid_constant__ moejit::TmaDescriptor tma_a,
    const __grid_constant__ moejit::TmaDescriptor tma_b, const __grid_constant__ moejit::TmaDescriptor tma_c) {
  moejit::hopper::grouped_gemm<128, 256, 4, moejit::kBF16, moejit::kBF16, moejit::kLayoutContiguous,
                               moejit::kSchedulerDynamic, 2>(p, tma_a, tma_b, tma_c);
}
CU
cat > "$work/portable.cu" <<'CU'
#include "moejit/portable/grouped_gemm_sm80.cuh"
extern "C" __global__ void __launch_bounds__(256, 2) moejit_grouped_gemm(const moejit::GroupedGemmParams p) {
  moejit::portable::grouped_gemm<128, 128, 32, 4, 2, 4, moejit::kBF16, moejit::kBF16, moejit::kLayoutMasked,
                                 moejit::kSchedulerDynamic>(p);
}
CU
# Quantized unfused kernels (their bodies host the quantized fusions): portable FP8 and MXFP4, Hopper NVFP4 and FP8.
cat > "$work/portable_fp8.cu" <<'CU'
#include "moejit/portable/grouped_gemm_sm80.cuh"
extern "C" __global__ void __launch_bounds__(256, 1) moejit_grouped_gemm(const moejit::GroupedGemmParams p) {
  moejit::portable::grouped_gemm<128, 128, 32, 4, 2, 4, moejit::kE4M3, moejit::kBF16, moejit::kLayoutContiguous,
                                 moejit::kSchedulerStatic>(p);
}
CU
cat > "$work/portable_w4.cu" <<'CU'
#include "moejit/portable/grouped_gemm_sm80.cuh"
extern "C" __global__ void __launch_bounds__(256, 2) moejit_grouped_gemm(const moejit::GroupedGemmParams p) {
  moejit::portable::grouped_gemm<128, 128, 32, 4, 2, 4, moejit::kBF16, moejit::kBF16, moejit::kLayoutContiguous,
                                 moejit::kSchedulerStatic, moejit::kMXFP4>(p);
}
CU
cat > "$work/hopper_w4.cu" <<'CU'
#include "moejit/hopper_w4/grouped_gemm_sm90_w4_rs.cuh"
extern "C" __global__ void __launch_bounds__(384, 1) moejit_grouped_gemm(
    const __grid_constant__ moejit::GroupedGemmParams p, const __grid_constant__ moejit::TmaDescriptor tma_a,
    const __grid_constant__ moejit::TmaDescriptor tma_tail, const __grid_constant__ moejit::TmaDescriptor tma_c) {
  moejit::hopper::grouped_gemm_w4_rs<128, 8, moejit::kF16, moejit::kLayoutMasked, moejit::kNVFP4>(p, tma_a, tma_tail, tma_c);
}
CU
cat > "$work/hopper_fp8.cu" <<'CU'
#include "moejit/hopper_fp8/grouped_gemm_sm90_fp8.cuh"
extern "C" __global__ void __launch_bounds__(384, 1) moejit_grouped_gemm(
    const __grid_constant__ moejit::GroupedGemmParams p, const __grid_constant__ moejit::TmaDescriptor tma_a,
    const __grid_constant__ moejit::TmaDescriptor tma_b, const __grid_constant__ moejit::TmaDescriptor tma_c) {
#ifdef MOEJIT_FP8_TMA_S  // since v33 the kernel takes a map of A's scales (the same SASS whichever map is passed)
  moejit::hopper::grouped_gemm_fp8<128, 128, 6, moejit::kBF16, moejit::kLayoutContiguous>(p, tma_a, tma_b, tma_c, tma_c);
#else
  moejit::hopper::grouped_gemm_fp8<128, 128, 6, moejit::kBF16, moejit::kLayoutContiguous>(p, tma_a, tma_b, tma_c);
#endif
}
CU
cuobjdump=${MOEJIT_CUOBJDUMP:-cuobjdump}
status=0
for kernel in hopper:90a portable:80 portable_fp8:80 portable_w4:80 hopper_w4:90a hopper_fp8:90a; do
  name=${kernel%%:*} arch=${kernel##*:}
  for tree in base work; do
    inc=$([ $tree = base ] && echo "$work/base/kernel_templates" || echo "$root/kernel_templates")
    flags=()
    grep -q "const TmaDescriptor& tma_s" "$inc/moejit/hopper_fp8/grouped_gemm_sm90_fp8.cuh" && flags=(-DMOEJIT_FP8_TMA_S)
    nvcc -std=c++20 -O3 -cubin -gencode arch=compute_$arch,code=sm_$arch -I"$inc" "${flags[@]}" -w "$work/$name.cu" -o "$work/$name.$tree.cubin"
    "$cuobjdump" -sass "$work/$name.$tree.cubin" > "$work/$name.$tree.sass"
  done
  if cmp -s "$work/$name.base.sass" "$work/$name.work.sass"; then
    echo "$name: SASS identical to $base ($(wc -l < "$work/$name.work.sass") lines)"
  else
    echo "$name: SASS DIFFERS from $base"; status=1
  fi
done
exit $status
