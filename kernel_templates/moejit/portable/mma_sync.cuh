// Warp-level tensor-core operations of sm_80+: ldmatrix and mma.sync.m16n8k16, in inline PTX.
//
// Fragment layouts (PTX ISA, "Matrix Fragments for mma.m16n8k16"), lane = 4*group + quad:
//   A 16x16 (row-major): a[0] rows 0-7 / k 0-7, a[1] rows 8-15 / k 0-7,
//                        a[2] rows 0-7 / k 8-15, a[3] rows 8-15 / k 8-15;
//                        each register holds (row group, k 2*quad .. 2*quad+1).
//   B 16x8 (column-major, i.e. stored [n][k] like MoE weights):
//                        b[0] k 0-7, b[1] k 8-15; each holds (n group, k 2*quad .. +1).
//   C 16x8 fp32:         c[0..1] (row group, cols 2*quad, 2*quad+1), c[2..3] the same at row group+8.
#pragma once
#include "moejit/common/types.cuh"

namespace moejit::portable {

// Loads four 8x8 16-bit matrices; lanes 8j..8j+7 give the 8 row addresses of matrix j,
// and register j of every lane receives its (row lane/4, cols 2*(lane%4) .. +1) of matrix j.
__device__ __forceinline__ void ldmatrix_x4(unsigned (&frag)[4], unsigned address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(frag[0]), "=r"(frag[1]), "=r"(frag[2]), "=r"(frag[3])
               : "r"(address));
}

// acc += a * b for one 16x8x16 step, fp32 accumulation; kTypeAB selects bf16 or f16 inputs.
template <int kTypeAB>
__device__ __forceinline__ void mma_m16n8k16(float (&acc)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
  if (kTypeAB == kBF16) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
}

}  // namespace moejit::portable
