// Absorbed tail rows of the 16-bit Hopper kernel (KernelSpec::tail, docs/design.md): a group's last
// whole 128-row tile also multiplies the up to kTailRows (24) rows past it, so that those rows do not
// take a tile of their own, which would load the whole B tile for a few rows (docs/perf.md v40).
//
// The rows come with the tile's stages (a 24-row TMA box after the 128 rows of A; gathered rows by
// the producer warpgroup, hopper/gather.cuh's GatherTailRowsSm90) and are multiplied
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

// The same for a fused kernel (KernelSpec::tail: any fusion but fuse=atomic), as fused_epilogue.cuh
// does for the tile's rows: tail row r's values (+ bias), activated (a GLU pairs gate and up), times
// routing_weights[row0 + r], go to C row scatter_rows[row0 + r] (out of [0, num_out_rows): not written)
// or, unscattered, row0 + r. col0: the tile's first GEMM column (n_block * kBlockN). Which GEMM
// column a register holds (consumer c, slice s, row i = 16 w + l/4 + 8 h of the slice):
//   no GLU / glu=interleaved: col0 + 128 c + 64 s + i (interleaved: gate even, up odd, so the pair of
//     lane l is lane l ^ 4; the two lanes trade one value per register pair, lane l keeping row e = 0
//     of the pair's two tail rows if l/4 is even, else row e = 1);
//   glu=split: slice 0 gate column o = col0 / 2 + 64 c + i, slice 1 up column n/2 + o (the consumer's
//     weight rows, grouped_gemm_sm90.cuh): gate and up of output column o in one thread.
template <int kTypeC, class Fuse>
__device__ __forceinline__ void store_tail_rows_fused(const GroupedGemmParams& p, const FusionParams& f,
                                                      const float (&t)[kTailAccRegs], int row0, int rows, int group,
                                                      int col0, int consumer, int warp_in_group, int lane) {
  static_assert(!Fuse::atomic, "absorbed tail rows: no atomic combine");
  const int n = p.n;
  const int n_out = Fuse::glu ? n / 2 : n;
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
        to = Fuse::scatter ? __ldg(f.scatter_rows + row0 + r) : row0 + r;
        if constexpr (Fuse::weight) w = __ldg(f.routing_weights + row0 + r);
      }
      if constexpr (Fuse::scatter) out_row[2 * j + e] = (unsigned)to < (unsigned)f.num_out_rows ? to : -1;
      else out_row[2 * j + e] = to;
      weight[2 * j + e] = w;
    }
  if constexpr (!Fuse::glu) {
    const int consumer_col0 = col0 + 128 * consumer;
#pragma unroll
    for (int s = 0; s < 2; ++s)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int col = consumer_col0 + 64 * s + 16 * warp_in_group + lane / 4 + 8 * h;
        if (col >= n) continue;
        float bias = 0.f;
        if constexpr (Fuse::bias) bias = __ldg(f.bias + (long long)group * n + col);
#pragma unroll
        for (int i = 0; i < 6; ++i)
          if (out_row[i] >= 0)
            store_one<kTypeC>(p.c, out_row[i] * n + col,
                              activate<Fuse::act>(t[12 * s + 4 * (i / 2) + 2 * h + i % 2] + bias) * weight[i]);
      }
    return;
  }
  const int i0 = 16 * warp_in_group + lane / 4;  // the slice row of h = 0
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    if constexpr (Fuse::glu_split) {
      const int o = col0 / 2 + 64 * consumer + i0 + 8 * h;
      if (o >= n_out) continue;
      float bias_gate = 0.f, bias_up = 0.f;
      if constexpr (Fuse::bias) bias_gate = bias_at(f, group, n, o), bias_up = bias_at(f, group, n, n / 2 + o);
#pragma unroll
      for (int i = 0; i < 6; ++i) {
        const int reg = 4 * (i / 2) + 2 * h + i % 2;
        if (out_row[i] >= 0)
          store_one<kTypeC>(p.c, out_row[i] * n_out + o,
                            activate_glu<Fuse::act>(t[reg] + bias_gate, t[12 + reg] + bias_up) * weight[i]);
      }
    } else {
      const bool gate_lane = (lane / 4) % 2 == 0;
#pragma unroll
      for (int s = 0; s < 2; ++s) {
        const int gate_col = (col0 + 128 * consumer + 64 * s + i0 + 8 * h) & ~1;
        float bias_gate = 0.f, bias_up = 0.f;
        if constexpr (Fuse::bias) bias_gate = bias_at(f, group, n, gate_col), bias_up = bias_at(f, group, n, gate_col + 1);
#pragma unroll
        for (int j = 0; j < 3; ++j) {
          const int reg = 12 * s + 4 * j + 2 * h;
          // Every lane shuffles (the partner lane has the same column, so the same bounds).
          const float other = __shfl_xor_sync(0xffffffffu, gate_lane ? t[reg + 1] : t[reg], 4);
          const float gate = gate_lane ? t[reg] : other, up = gate_lane ? other : t[reg + 1];
          // Selects, not an index by lane (that put the arrays in local memory).
          const long long to = gate_lane ? out_row[2 * j] : out_row[2 * j + 1];
          const float w = gate_lane ? weight[2 * j] : weight[2 * j + 1];
          if (gate_col < n && to >= 0)
            store_one<kTypeC>(p.c, to * n_out + gate_col / 2, activate_glu<Fuse::act>(gate + bias_gate, up + bias_up) * w);
        }
      }
    }
  }
}

}  // namespace moejit::hopper
