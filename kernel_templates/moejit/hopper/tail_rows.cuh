// Absorbed tail rows of the 16-bit Hopper kernel (KernelSpec::tail, docs/design.md): a group's last
// whole 128-row tile also multiplies the up to kTailRows (24) rows past it, so that those rows do not
// take a tile of their own, which would load the whole B tile for a few rows (docs/perf.md v40).
//
// The rows come with the tile's stages (a 24-row TMA box after the 128 rows of A) and are multiplied
// with the roles swapped, on the B stage already there: each consumer warpgroup computes
// C_tail^T = B_slice x A_tail^T for its 128 weight rows as two m64n24k16 wgmmas per k16 step (weight
// rows as wgmma's M, the tail rows as its N). Both operands are K-major in 128-byte-swizzled shared
// memory, as the main wgmma's. The 24 accumulators per thread are PTX registers of their own,
// %tacc0..%tacc23 (slice s: %tacc(12 s)..), beside the main tile's %acc (wgmma_ops.cuh says why
// named registers).
#pragma once
#include "moejit/params.cuh"
#include "moejit/common/types.cuh"
#include "moejit/common/fusion.cuh"

namespace moejit::hopper {

constexpr int kTailAccRegs = 24;  // 2 slices x m64n24 (12 per thread each)

struct TailAccRegs {
  __device__ __forceinline__ static void declare() { asm volatile(".reg .f32 %%tacc<%0>;" ::"n"(kTailAccRegs)); }
  // K == 0 runs no wgmma: the tail rows' C is then the empty sum.
  __device__ __forceinline__ static void zero() {
    asm volatile(
        "mov.b32 %%tacc0, %0;\nmov.b32 %%tacc1, %0;\nmov.b32 %%tacc2, %0;\n"
        "mov.b32 %%tacc3, %0;\nmov.b32 %%tacc4, %0;\nmov.b32 %%tacc5, %0;\n"
        "mov.b32 %%tacc6, %0;\nmov.b32 %%tacc7, %0;\nmov.b32 %%tacc8, %0;\n"
        "mov.b32 %%tacc9, %0;\nmov.b32 %%tacc10, %0;\nmov.b32 %%tacc11, %0;\n"
        "mov.b32 %%tacc12, %0;\nmov.b32 %%tacc13, %0;\nmov.b32 %%tacc14, %0;\n"
        "mov.b32 %%tacc15, %0;\nmov.b32 %%tacc16, %0;\nmov.b32 %%tacc17, %0;\n"
        "mov.b32 %%tacc18, %0;\nmov.b32 %%tacc19, %0;\nmov.b32 %%tacc20, %0;\n"
        "mov.b32 %%tacc21, %0;\nmov.b32 %%tacc22, %0;\nmov.b32 %%tacc23, %0;\n" ::"n"(0));
  }
  __device__ __forceinline__ static void read(float (&d)[kTailAccRegs]) {
    asm volatile(
        "mov.b32 %0, %%tacc0;\nmov.b32 %1, %%tacc1;\nmov.b32 %2, %%tacc2;\nmov.b32 %3, %%tacc3;\n"
        "mov.b32 %4, %%tacc4;\nmov.b32 %5, %%tacc5;\nmov.b32 %6, %%tacc6;\nmov.b32 %7, %%tacc7;\n"
        "mov.b32 %8, %%tacc8;\nmov.b32 %9, %%tacc9;\nmov.b32 %10, %%tacc10;\nmov.b32 %11, %%tacc11;\n"
        "mov.b32 %12, %%tacc12;\nmov.b32 %13, %%tacc13;\nmov.b32 %14, %%tacc14;\nmov.b32 %15, %%tacc15;\n"
        "mov.b32 %16, %%tacc16;\nmov.b32 %17, %%tacc17;\nmov.b32 %18, %%tacc18;\nmov.b32 %19, %%tacc19;\n"
        "mov.b32 %20, %%tacc20;\nmov.b32 %21, %%tacc21;\nmov.b32 %22, %%tacc22;\nmov.b32 %23, %%tacc23;\n"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3]), "=f"(d[4]), "=f"(d[5]), "=f"(d[6]), "=f"(d[7]),
          "=f"(d[8]), "=f"(d[9]), "=f"(d[10]), "=f"(d[11]), "=f"(d[12]), "=f"(d[13]), "=f"(d[14]), "=f"(d[15]),
          "=f"(d[16]), "=f"(d[17]), "=f"(d[18]), "=f"(d[19]), "=f"(d[20]), "=f"(d[21]), "=f"(d[22]), "=f"(d[23]));
  }
};

// One k16 step of the tail rows for one 64-row weight slice (kSlice 0 or 1): D_s += W x T^T, W the
// slice's 64 weight rows (desc_w), T the 24 tail rows (desc_t); scale_d == 0 overwrites (first step).
#define MOEJIT_TAIL_ACC0 "%%tacc0, %%tacc1, %%tacc2, %%tacc3, %%tacc4, %%tacc5, %%tacc6, %%tacc7, %%tacc8, %%tacc9, %%tacc10, %%tacc11"
#define MOEJIT_TAIL_ACC1 \
  "%%tacc12, %%tacc13, %%tacc14, %%tacc15, %%tacc16, %%tacc17, %%tacc18, %%tacc19, %%tacc20, %%tacc21, %%tacc22, %%tacc23"
#define MOEJIT_TAIL_MMA(TYPE, ACC)                                                                        \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %2, 0;\n"                                              \
               "wgmma.mma_async.sync.aligned.m64n24k16.f32." TYPE "." TYPE " {" ACC "}, %0, %1, p, 1, 1, 0, 0;\n}\n" \
               ::"l"(desc_w), "l"(desc_t), "r"(scale_d))
template <int kSlice, bool kHalf>
__device__ __forceinline__ void tail_mma(unsigned long long desc_w, unsigned long long desc_t, int scale_d) {
  static_assert(kSlice == 0 || kSlice == 1, "two 64-row slices per consumer");
  if constexpr (kSlice == 0 && kHalf) MOEJIT_TAIL_MMA("f16", MOEJIT_TAIL_ACC0);
  if constexpr (kSlice == 0 && !kHalf) MOEJIT_TAIL_MMA("bf16", MOEJIT_TAIL_ACC0);
  if constexpr (kSlice == 1 && kHalf) MOEJIT_TAIL_MMA("f16", MOEJIT_TAIL_ACC1);
  if constexpr (kSlice == 1 && !kHalf) MOEJIT_TAIL_MMA("bf16", MOEJIT_TAIL_ACC1);
}
#undef MOEJIT_TAIL_MMA
#undef MOEJIT_TAIL_ACC1
#undef MOEJIT_TAIL_ACC0

// The tail rows' C from the swapped accumulators: slice s, register 4j + 2h + e of lane l in warp w
// is weight row 64 s + 16 w + l/4 + 8 h (a column of C) and tail row 8 j + 2 (l % 4) + e (a row of
// C). row0: C's row of the first tail row; rows: tail rows in the group (1..24); col0: C's column of
// this consumer's first weight row. Eight lanes with the same l % 4 write 8 neighbouring columns
// of one row (16 bytes for 16-bit C): 12 KB a tile, stored by the threads.
template <int kTypeC>
__device__ __forceinline__ void store_tail_rows(const GroupedGemmParams& p, const float (&t)[kTailAccRegs], int row0, int rows,
                                                int col0, int warp_in_group, int lane) {
#pragma unroll
  for (int s = 0; s < 2; ++s)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int col = col0 + 64 * s + 16 * warp_in_group + lane / 4 + 8 * h;
      if (col >= p.n) continue;
#pragma unroll
      for (int j = 0; j < 3; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int r = 8 * j + 2 * (lane % 4) + e;
          if (r < rows) store_one<kTypeC>(p.c, static_cast<long long>(row0 + r) * p.n + col, t[12 * s + 4 * j + 2 * h + e]);
        }
    }
}

// The same for a fused kernel with a linear epilogue on scattered rows (KernelSpec::tail: fuse=scatter,
// with weight and bias as the spec has them, no activation): tail row r's value (+ bias[group][col])
// x routing_weights[row0 + r] goes to C row scatter_rows[row0 + r] (out of [0, num_out_rows): not
// written), as fused_epilogue.cuh does for the tile's rows.
template <int kTypeC, class Fuse>
__device__ __forceinline__ void store_tail_rows_scattered(const GroupedGemmParams& p, const FusionParams& f,
                                                          const float (&t)[kTailAccRegs], int row0, int rows, int group,
                                                          int col0, int warp_in_group, int lane) {
  static_assert(Fuse::scatter && !Fuse::gather && !Fuse::glu && Fuse::act == kActNone && !Fuse::atomic,
                "absorbed tail rows: fused with a linear epilogue on scattered rows only");
  // This lane's six tail rows (8 j + 2 (lane % 4) + e): where each goes and its weight.
  long long out_row[6];
  float weight[6];
#pragma unroll
  for (int j = 0; j < 3; ++j)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int r = 8 * j + 2 * (lane % 4) + e;
      int to = -1;
      float w = 1.f;
      if (r < rows) {
        to = __ldg(f.scatter_rows + row0 + r);
        if constexpr (Fuse::weight) w = __ldg(f.routing_weights + row0 + r);
      }
      out_row[2 * j + e] = (unsigned)to < (unsigned)f.num_out_rows ? to : -1;
      weight[2 * j + e] = w;
    }
#pragma unroll
  for (int s = 0; s < 2; ++s)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int col = col0 + 64 * s + 16 * warp_in_group + lane / 4 + 8 * h;
      if (col >= p.n) continue;
      float bias = 0.f;
      if constexpr (Fuse::bias) bias = __ldg(f.bias + (long long)group * p.n + col);
#pragma unroll
      for (int i = 0; i < 6; ++i)
        if (out_row[i] >= 0)
          store_one<kTypeC>(p.c, out_row[i] * p.n + col, (t[12 * s + 4 * (i / 2) + 2 * h + i % 2] + bias) * weight[i]);
    }
}

}  // namespace moejit::hopper
