// Weight-only 4-bit grouped GEMM for Hopper (sm_90a): BF16 activations, MXFP4 weights
// (E2M1 elements, one E8M0 scale per 32 along K), FP32 accumulation.
//   C[row, n] = sum_k A[row, k] * e2m1(B[group, n, k]) * 2^(scale[group, n, k / 32] - 127)
// Weights stay 4-bit in global memory and in the pipeline stages (that is the saving: ~3.8x fewer
// bytes than BF16); consumers widen each stage's slice of B to BF16 in shared memory right before
// the wgmma that reads it.
//
// PROTOTYPE (not yet wired into KernelSpec/Runtime): verified by a standalone harness on the H100.
//
// Layouts (the host quantizer's interchange layout, include/moejit/formats.hpp):
//   B:      [groups][N][K/2] bytes, K index 2i in the low nibble of byte i, 2i + 1 in the high one.
//   scales: [groups][N][K/32] E8M0 bytes (value 2^(s - 127); 0xFF is NaN).
//
// Tile 64 x kBlockN x 64: both consumer warpgroups share the 64 rows of A, consumer i owns columns
// [i kBlockN/2, (i+1) kBlockN/2). Per K block of 64, the producer's TMA brings A (64 rows x 128 B,
// 128-byte swizzle) and packed B (kBlockN rows x 32 B); each consumer thread widens one row of its
// columns into a 128-byte-swizzled BF16 buffer (double-buffered per consumer), the warpgroup syncs
// on a named barrier, and wgmma reads A and the widened B from shared memory.
#pragma once
#include "moejit/params.cuh"
#include "moejit/common/types.cuh"
#include "moejit/common/scheduler.cuh"
#include "moejit/hopper/smem.cuh"
#include "moejit/hopper/mbarrier.cuh"
#include "moejit/hopper/tma.cuh"
#include "moejit/hopper/wgmma.cuh"
#include "moejit/hopper/warpgroup.cuh"
#include "moejit/hopper/epilogue.cuh"
#include "moejit/hopper_w4/e2m1.cuh"

namespace moejit {

// Second kernel parameter of the 4-bit kernels.
struct W4Scales {
  const unsigned char* b;  // [groups][N][K/32] E8M0
  int k_blocks32;          // K / 32
  int reserved0;
};

}  // namespace moejit

namespace moejit::hopper {

constexpr int kW4BlockK = 64;  // K per stage: one 128-byte swizzle row of BF16 A

template <int kBlockN, int kStages>
__host__ __device__ constexpr int w4_smem_bytes() {
  // stages of A (64 x 128 B) and packed B (kBlockN x 32 B), two BF16 B buffers per consumer
  // (kBlockN/2 x 128 B each), 1024 B alignment slack + barriers.
  return kStages * (64 * 128 + kBlockN * 32) + 2 * kBlockN * 128 + 2048;
}

__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

template <int kBlockN, int kStages, int kTypeC, int kLayout>
__device__ __forceinline__ void grouped_gemm_w4(const GroupedGemmParams& p, const W4Scales& s,
                                                const TmaDescriptor& tma_a, const TmaDescriptor& tma_b) {
  static_assert(kBlockN == 256, "prototype: 64x256 tiles (each consumer widens 128 rows, one per thread)");
  static_assert(w4_smem_bytes<kBlockN, kStages>() <= 232448, "stages do not fit in 227 KB");
  constexpr int kBlockM = 64;
  constexpr int kWgN = kBlockN / 2;
  using Mma = WgmmaOp<kWgN, false>;
  constexpr int kAccRegs = Mma::kRegs;
  constexpr unsigned kABytes = kBlockM * 128;
  constexpr unsigned kPackedRowBytes = kW4BlockK / 2;  // 32
  constexpr unsigned kBBytes = kBlockN * kPackedRowBytes;
  constexpr unsigned kWideBytes = kWgN * 128;  // one consumer's widened B slice
  constexpr int kConsumerWarps = 8;

  extern __shared__ unsigned char moejit_smem[];
  const unsigned smem_base = smem_addr(moejit_smem);
  const unsigned a_stages = (smem_base + 1023u) & ~1023u;  // 8 KB per stage keeps 1024 B alignment
  const unsigned wide_bufs = a_stages + kStages * kABytes;  // [consumer][2] x kWideBytes, 1024-aligned
  const unsigned b_stages = wide_bufs + 4 * kWideBytes;
  const unsigned full_bars = b_stages + kStages * kBBytes;
  const unsigned empty_bars = full_bars + 8 * kStages;

  if (threadIdx.x == 0) {
    tma_prefetch_descriptor(tma_a);
    tma_prefetch_descriptor(tma_b);
    for (int st = 0; st < kStages; ++st) {
      mbarrier_init(full_bars + 8 * st, 1);
      mbarrier_init(empty_bars + 8 * st, kConsumerWarps);
    }
    mbarrier_init_fence();
  }
  __syncthreads();

  const int num_k_blocks = (p.k + kW4BlockK - 1) / kW4BlockK;
  const int warpgroup = threadIdx.x / 128;
  GroupTileCursor<kLayout, kBlockM, kBlockN> cursor;
  TileCoord tile;

  if (warpgroup == 0) {
    warpgroup_release_registers<40>();
    if (threadIdx.x == 0) {
      int stage = 0;
      unsigned phase = 0;
      for (int tile_index = blockIdx.x; cursor.seek(p, tile_index, tile); tile_index += gridDim.x) {
        const int a_row = tile.row_begin + tile.m_block * kBlockM;
        const int b_row = tile.group * p.n + tile.n_block * kBlockN;
        for (int kb = 0; kb < num_k_blocks; ++kb) {
          mbarrier_wait(empty_bars + 8 * stage, phase ^ 1);
          const unsigned full = full_bars + 8 * stage;
          mbarrier_arrive_expect_tx(full, kABytes + kBBytes);
          tma_load_2d(a_stages + stage * kABytes, tma_a, full, kb * kW4BlockK, a_row);
          tma_load_2d(b_stages + stage * kBBytes, tma_b, full, kb * kPackedRowBytes, b_row);
          if (++stage == kStages) stage = 0, phase ^= 1;
        }
      }
    }
  } else {
    warpgroup_claim_registers<232>();
    const int consumer = warpgroup - 1;
    const int thread_in_group = threadIdx.x % 128;
    const int lane = threadIdx.x % 32;
    const int warp_in_group = thread_in_group / 32;
    const unsigned my_wide = wide_bufs + consumer * 2 * kWideBytes;
    const int wide_row = thread_in_group;  // the B row (tile column) this thread widens

    float acc[kAccRegs];
    int stage = 0;
    unsigned phase = 0;
    int buf = 0;
    for (int tile_index = blockIdx.x; cursor.seek(p, tile_index, tile); tile_index += gridDim.x) {
      const int n0 = tile.n_block * kBlockN + consumer * kWgN;
      const int n_row = n0 + wide_row;  // weight row this thread widens
      const unsigned char* scale_row =
          n_row < p.n ? s.b + (static_cast<long long>(tile.group) * p.n + n_row) * s.k_blocks32 : nullptr;
#pragma unroll
      for (int i = 0; i < kAccRegs; ++i) acc[i] = 0.f;
      int prev_stage = -1;
      // Scales of this row's two 32-blocks of a K block; loaded one K block ahead so that the
      // global load's latency hides behind a K block of work.
      auto load_scales = [&](int kb, unsigned& lo, unsigned& hi) {
        lo = hi = 127;
        if (scale_row && kb < num_k_blocks) {
          lo = __ldg(scale_row + 2 * kb);
          if (2 * kb + 1 < s.k_blocks32) hi = __ldg(scale_row + 2 * kb + 1);
        }
      };
      unsigned next_s0, next_s1;
      load_scales(0, next_s0, next_s1);
      for (int kb = 0; kb < num_k_blocks; ++kb) {
        const unsigned s0 = next_s0, s1 = next_s1;
        load_scales(kb + 1, next_s0, next_s1);
        mbarrier_wait(full_bars + 8 * stage, phase);
        // Widen 64 K of this thread's row: 32 packed bytes -> 8 chunks of 8 BF16 (16 B each),
        // stored at the 128-byte-swizzled chunk position (chunk c of row r at c ^ (r % 8)).
        const unsigned packed = b_stages + stage * kBBytes + (consumer * kWgN + wide_row) * kPackedRowBytes;
        uint4 q0, q1;
        asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];"
                     : "=r"(q0.x), "=r"(q0.y), "=r"(q0.z), "=r"(q0.w) : "r"(packed));
        asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];"
                     : "=r"(q1.x), "=r"(q1.y), "=r"(q1.z), "=r"(q1.w) : "r"(packed + 16));
        const unsigned words[8] = {q0.x, q0.y, q0.z, q0.w, q1.x, q1.y, q1.z, q1.w};
        const unsigned scale_lo = e8m0_to_bf16x2(s0), scale_hi = e8m0_to_bf16x2(s1);
        constexpr unsigned kTwoPow126x2 = 0x7E807E80u;  // BF16 2^126 in both halves
        const unsigned dst_row = my_wide + buf * kWideBytes + wide_row * 128;
#pragma unroll
        for (int c = 0; c < 8; ++c) {  // chunk c = K elements 8c..8c+7 = packed word c
          const unsigned scale = c < 4 ? scale_lo : scale_hi;
          const unsigned w = words[c];
          // Two exact multiplies: by 2^126 (E2M1 value), then by the block's power of two.
          const unsigned o0 = bf16x2_mul(bf16x2_mul(e2m1x2_bits_as_bf16x2<0>(w), kTwoPow126x2), scale);
          const unsigned o1 = bf16x2_mul(bf16x2_mul(e2m1x2_bits_as_bf16x2<1>(w), kTwoPow126x2), scale);
          const unsigned o2 = bf16x2_mul(bf16x2_mul(e2m1x2_bits_as_bf16x2<2>(w), kTwoPow126x2), scale);
          const unsigned o3 = bf16x2_mul(bf16x2_mul(e2m1x2_bits_as_bf16x2<3>(w), kTwoPow126x2), scale);
          const unsigned dst = dst_row + ((c ^ (wide_row & 7)) << 4);
          asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};" ::"r"(dst), "r"(o0), "r"(o1), "r"(o2), "r"(o3)
                       : "memory");
        }
        fence_proxy_async_shared();
        named_barrier_sync(1 + consumer, 128);

        const unsigned a_tile = a_stages + stage * kABytes;
        const unsigned b_tile = my_wide + buf * kWideBytes;
        wgmma_fence_operands(acc);
        wgmma_fence();
#pragma unroll
        for (int k = 0; k < kW4BlockK / 16; ++k)
          Mma::mma(acc, wgmma_desc_sw128(a_tile + k * 32), wgmma_desc_sw128(b_tile + k * 32), (kb | k) != 0);
        wgmma_commit();
        wgmma_fence_operands(acc);
        // One wgmma group stays in flight; the previous one is done, so its stage goes back
        // and its widened buffer (buf ^ 1) may be overwritten next.
        wgmma_wait<1>();
        wgmma_fence_operands(acc);
        if (prev_stage >= 0 && lane == 0) mbarrier_arrive(empty_bars + 8 * prev_stage);
        prev_stage = stage;
        buf ^= 1;
        if (++stage == kStages) stage = 0, phase ^= 1;
      }
      wgmma_wait<0>();
      wgmma_fence_operands(acc);
      if (prev_stage >= 0 && lane == 0) mbarrier_arrive(empty_bars + 8 * prev_stage);
      const int m_warp = tile.m_block * kBlockM + warp_in_group * 16;
      store_accumulators<kTypeC, kWgN>(p, acc, tile.row_begin, tile.group_rows, m_warp, n0, lane);
    }
  }
}

}  // namespace moejit::hopper
