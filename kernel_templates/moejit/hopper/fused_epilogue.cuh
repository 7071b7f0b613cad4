// Fusions of the Hopper grouped GEMM (docs/design.md, "Fusions"): the split-GLU B loads and the
// fused epilogue on a consumer warpgroup's accumulators:
//   acc (+ bias[g][col], already in acc: init_acc_with_bias) -> activation -> (* routing_weights[r]) -> C's type -> store
// The store is the unfused kernel's (TMA-store staging through stmatrix where the spec stages C,
// else direct stores) unless rows are scattered: those rows go out with direct stores to
// C[scatter_rows[r]] (16 bytes per lane for 16-bit C after a quad transpose), or fp32 atomic adds.
//
// Accumulator layout (epilogue.cuh): register 4j + 2h + e is row 16 w + lane/4 + 8h, column
// 8j + 2(lane%4) + e of the warpgroup's kWgN-column slice.
#pragma once
#include "moejit/params.cuh"
#include "moejit/common/types.cuh"
#include "moejit/common/fusion.cuh"
#include "moejit/common/e4m3.cuh"
#include "moejit/hopper/tma.cuh"
#include "moejit/hopper/cluster.cuh"
#include "moejit/hopper/epilogue.cuh"
#include "moejit/hopper/smem.cuh"
#include "moejit/hopper/warpgroup.cuh"

namespace moejit::hopper {

// B of one k-block. glu=split: each consumer slice of kWgN columns is loaded as two boxes of
// kWgN/2 rows, the gate rows out0 + i and the up rows n/2 + out0 + i (out0: the slice's first
// output column), so that a thread's gate and up accumulators are registers j and j + kWgN/16.
// Boxes land on 1024-byte multiples (kWgN/2 >= 16 rows of 128 bytes), so the 128B swizzle of
// the stacked boxes is that of one box. Rows read past a group's half only feed output columns
// >= n/2, which are never stored.
template <int kBlockN, int kWgN, bool kSplit>
__device__ __forceinline__ void load_b_tile(unsigned dst, const TmaDescriptor& map, unsigned bar, int k, int group,
                                            int n_block, int n) {
  if constexpr (!kSplit) {
    tma_load_2d(dst, map, bar, k, group * n + n_block * kBlockN);
  } else {
    constexpr int kHalf = kWgN / 2;
#pragma unroll
    for (int s = 0; s < kBlockN / kWgN; ++s) {
      tma_load_2d(dst + s * kWgN * 128, map, bar, k, group * n + split_glu_box_row(n, n_block, kBlockN, kWgN, s, 0));
      tma_load_2d(dst + s * kWgN * 128 + kHalf * 128, map, bar, k,
                  group * n + split_glu_box_row(n, n_block, kBlockN, kWgN, s, 1));
    }
  }
}

// B of one k-block on CTA pairs sharing B (cluster=2x1, 128-row tiles: one consumer slice, kWgN ==
// kBlockN), in boxes of kBlockN/2 rows of 128 bytes (glu=split: the gate box, then the up box).
// multicast: rank `rank` loads box `rank` into both CTAs' stages (the peer's box may land before
// this CTA's arrive.expect_tx, whose phase cannot complete before that arrival); otherwise (a
// group's odd last M tile, split along N) this CTA loads both boxes into its own stage.
template <int kBlockN, int kWgN, bool kSplit>
__device__ __forceinline__ void load_b_pair_tile(unsigned dst, const TmaDescriptor& map, unsigned bar, int k, int group,
                                                 int n_block, int n, int b_row, unsigned rank, bool multicast) {
  // b_row: the tile's first B row (group * n + n_block * kBlockN), as the caller has it.
  auto box_row = [&](int half) {
    return kSplit ? group * n + split_glu_box_row(n, n_block, kBlockN, kWgN, 0, half) : b_row + half * (kBlockN / 2);
  };
  constexpr unsigned kBoxBytes = kBlockN / 2 * 128;
  if (multicast) {
    tma_load_2d_multicast(dst + rank * kBoxBytes, map, bar, k, box_row((int)rank), 3);
  } else {
    tma_load_2d(dst, map, bar, k, box_row(0));
    tma_load_2d(dst + kBoxBytes, map, bar, k, box_row(1));
  }
}

// fuse=bias: the accumulators of a tile start at the bias of their GEMM columns (glu=split: the
// slice's first half are gate columns out0 + i, its second half up columns n/2 + out0 + i).
// col0: the tile's first GEMM column (n_block * kBlockN); tile_col0: the slice's first column.
template <int kBlockN, int kWgN, bool kSplit>
__device__ __forceinline__ void init_acc_with_bias(float (&acc)[kWgN / 2], const FusionParams& f, int group, int n,
                                                   int col0, int tile_col0, int lane) {
  const float* const bias = f.bias + (long long)group * n;
  const int q = lane % 4;
#pragma unroll
  for (int j = 0; j < kWgN / 8; ++j) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int cl = 8 * j + 2 * q + e;  // column in the slice
      int col;
      bool in;
      if constexpr (kSplit) {
        const int out0 = col0 / 2 + tile_col0 / 2;  // split_glu_out0 of this slice
        in = out0 + cl % (kWgN / 2) < n / 2;
        col = split_glu_slice_column(n, out0, kWgN, cl);
      } else {
        col = col0 + tile_col0 + cl;
        in = col < n;
      }
      const float b = in ? __ldg(bias + col) : 0.f;
      acc[4 * j + e] = b;
      acc[4 * j + 2 + e] = b;
    }
  }
}

// Rows of one warpgroup slice to C (direct stores), row r of the slice going to C row
// out_rows[h] (computed by the caller: scattered or not; < 0: not written). kW columns in the
// standard accumulator layout; n0: first output column; n_out: columns of C.
template <int kTypeC, int kW, bool kAtomic>
__device__ __forceinline__ void store_rows_direct(void* c_ptr, const float (&v)[kW / 2], const long long (&out_rows)[2],
                                                  int n0, int n_out, int lane) {
  using T = typename StorageOf<kTypeC>::type;
  T* const c = static_cast<T*>(c_ptr);
  const int quad_col = (lane % 4) * 2;
  const int cols_left = n_out - n0 - quad_col;
  // n_out % 8 == 0 and C 16-byte aligned (validated on the host): pairs never straddle N.
  const bool full_width = n0 + kW <= n_out;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    T* const row = c + out_rows[h] * n_out + n0;
    const bool row_valid = out_rows[h] >= 0;
    if constexpr (kAtomic) {
      static_assert(kTypeC == kF32, "atomic accumulation needs fp32 C");
      if (!row_valid) continue;
#pragma unroll
      for (int j = 0; j < kW / 8; ++j) {
        if (8 * j < cols_left) {
          atomicAdd(row + quad_col + 8 * j, v[4 * j + 2 * h]);
          atomicAdd(row + quad_col + 8 * j + 1, v[4 * j + 2 * h + 1]);
        }
      }
    } else if constexpr (kTypeC != kF32 && kW % 32 == 0) {
      // Quad transpose (epilogue.cuh): each lane then owns 8 consecutive columns, 16-byte stores.
      // Every lane runs the shuffles; only the stores are masked.
      T* const lane_ptr = row + (lane % 4) * 8;
#pragma unroll
      for (int jb = 0; jb < kW / 32; ++jb) {
        unsigned w[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int j = 4 * jb + i;
          w[i] = pack_pair<kTypeC>(v[4 * j + 2 * h], v[4 * j + 2 * h + 1]);
        }
        quad_transpose(w, lane);
        if (row_valid && (full_width || 32 * jb + (lane % 4) * 8 < n_out - n0))
          *reinterpret_cast<uint4*>(lane_ptr + 32 * jb) = make_uint4(w[0], w[1], w[2], w[3]);
      }
    } else {
      if (!row_valid) continue;
#pragma unroll
      for (int j = 0; j < kW / 8; ++j)
        if (8 * j < cols_left) store_pair<kTypeC>(row + quad_col, 8 * j, v[4 * j + 2 * h], v[4 * j + 2 * h + 1]);
    }
  }
}

// The fused result of a slice (kW output columns from n0 on) to C: scattered rows (direct
// stores or atomics), else the unfused kernel's stores with C's width set to n_out.
// kBuffers: the C staging's chunk buffers per consumer (one in kernels with absorbed tail rows).
template <int kTypeC, int kW, bool kStaged, class Fuse, int kBuffers = 2>
__device__ __forceinline__ void store_fused(const GroupedGemmParams& p, const FusionParams& f,
                                            const TmaDescriptor& tma_c, const float (&out)[kW / 2], unsigned staging,
                                            int row_begin, int group_rows, int m_first, int rows, int n0, int n_out,
                                            int warp_in_group, int lane, int barrier_id, unsigned& c_state) {
  const int m_warp = m_first + warp_in_group * 16 + lane / 4;  // group-local row of h = 0
  if constexpr (Fuse::scatter) {
    long long out_rows[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int m = m_warp + 8 * h;
      int to = -1;
      if (m < group_rows) to = __ldg(f.scatter_rows + row_begin + m);
      out_rows[h] = (unsigned)to < (unsigned)f.num_out_rows ? to : -1;  // out of range: not written
    }
    store_rows_direct<kTypeC, kW, Fuse::atomic>(p.c, out, out_rows, n0, n_out, lane);
  } else {
    GroupedGemmParams narrow = p;
    narrow.n = n_out;
    constexpr int kChunkCols = 128 / sizeof(typename StorageOf<kTypeC>::type);
    if constexpr (kStaged && kW % kChunkCols == 0) {
      store_accumulators_staged<kTypeC, kW, kBuffers>(narrow, tma_c, out, staging, row_begin + m_first, rows, n0,
                                                      warp_in_group, lane, barrier_id, c_state);
    } else {
      store_accumulators<kTypeC, kW>(narrow, out, row_begin, group_rows, m_first + warp_in_group * 16, n0, lane);
    }
  }
}

// c=e4m3 (the FP8 kernel): the slice's kW output columns from n0 (a multiple of 128) quantized in
// 1x128 blocks as quantize_activations_fp8 does, then stored as E4M3 codes with one fp32 scale per
// row and block (f.c_scales[block][row]): a row's 128 columns of one block lie in the 4 lanes of a
// quad (32 each), so its amax is the lane's maximum and two xor-shuffles. Scale = amax / 448 over
// the finite values (1 for an all-zero block); codes: value · (1 / scale) rounded to E4M3 with
// saturation (common/e4m3.cuh; the quantizer divides, one fp32 rounding apart). Columns at or past n_out (ragged N; split-GLU columns past n/2) are
// left out of the amax and not stored. Stores: per 64 columns a lane packs 4 words of code pairs,
// a quad transpose and 4 byte permutes give it 16 consecutive codes: one 16-byte store per lane.
// kPaired (64x256 tiles with a GLU: the two consumers hold the two 64-column halves of one block
// for the same 64 rows): each consumer's row amax goes through shared memory (`exchange`, 512
// bytes: the C staging the E4M3 path does not use) between two syncs of named barrier 3 over both
// consumers; consumer 0 (n0 % 128 == 0) writes the scale.
// kStagedStore (the spec stages C, not paired): a block's 64 rows x 128 codes are one chunk of the C
// staging (epilogue.cuh), written with the 128-byte swizzle and taken to C by a TMA store (or, for a
// slice that crosses its group's end, by the threads), so that the consumers do not wait on global
// stores; its TMA map has 64 x 128-byte boxes of C's codes (runtime.cpp).
template <int kW, bool kPaired, bool kStagedStore>
__device__ __forceinline__ void store_e4m3_blocks(const GroupedGemmParams& p, const FusionParams& f,
                                                  const float (&v)[kW / 2], int row_begin, int group_rows, int m_warp,
                                                  int n0, int n_out, int lane, int warp_in_group, unsigned exchange,
                                                  int consumer, const TmaDescriptor& tma_c, unsigned staging, int rows,
                                                  int barrier_id, unsigned& c_state) {
  constexpr int kBlockCols = kPaired ? 64 : 128;  // this slice's columns of one scale block
  static_assert(kW % kBlockCols == 0, "c=e4m3: a consumer slice of whole 128-column blocks (or paired halves)");
  static_assert(!(kPaired && kStagedStore), "paired halves exchange through the staging: direct stores");
  const int q = lane % 4;
  unsigned char* const c = static_cast<unsigned char*>(p.c);
  const bool leader = warp_in_group == 0 && lane == 0;
  const bool whole = rows == 64;  // uniform over the warpgroup
#pragma unroll
  for (int b = 0; b < kW / kBlockCols; ++b) {
    const int block_col = n0 + kBlockCols * b;  // this slice's first column of the block
    if (kStagedStore && block_col >= n_out) break;  // uniform over the warpgroup
    unsigned buf = 0;
    if constexpr (kStagedStore) buf = acquire_c_chunk(staging, c_state, whole, leader, barrier_id);
    unsigned amax_bits[2] = {0u, 0u};  // rows h = 0, 1; non-negative floats order as their bits
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
      for (int j = kBlockCols / 8 * b; j < kBlockCols / 8 * (b + 1); ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float a = fabsf(v[4 * j + 2 * h + e]);
          if (n0 + 8 * j + 2 * q + e < n_out && a <= 3.402823466e38f) amax_bits[h] = max(amax_bits[h], __float_as_uint(a));
        }
      amax_bits[h] = max(amax_bits[h], __shfl_xor_sync(0xffffffffu, amax_bits[h], 1));
      amax_bits[h] = max(amax_bits[h], __shfl_xor_sync(0xffffffffu, amax_bits[h], 2));
    }
    if constexpr (kPaired) {
      const int r = warp_in_group * 16 + lane / 4;  // the slice's row of h = 0
      if (q == 0)
#pragma unroll
        for (int h = 0; h < 2; ++h) st_shared_u32(exchange + 4 * (consumer * 64 + r + 8 * h), amax_bits[h]);
      named_barrier_sync<256>(3);
#pragma unroll
      for (int h = 0; h < 2; ++h) amax_bits[h] = max(amax_bits[h], ld_shared_u32(exchange + 4 * ((1 - consumer) * 64 + r + 8 * h)));
      named_barrier_sync<256>(3);  // both have read before the next tile's writes
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int m = m_warp + lane / 4 + 8 * h;  // group-local row (m_warp: the warp's first)
      const bool row_valid = m < group_rows;
      const long long row = (long long)row_begin + m;
      const float amax = __uint_as_float(amax_bits[h]);
      const float scale = amax > 0.f ? __fdiv_rn(amax, 448.f) : 1.f;
      if (row_valid && q == 0 && block_col % 128 == 0 && block_col < n_out)
        f.c_scales[(long long)(block_col / 128) * p.total_rows + row] = scale;
      // The values times the reciprocal: one instruction, not divide_by_scale's three (measured
      // 2-6% of a GEMM1 at 16384 tokens): within one fp32 rounding of the quotient, which can
      // move a code by one step on an E4M3 rounding boundary.
      const float y = __frcp_rn(scale);
#pragma unroll
      for (int g = 0; g < kBlockCols / 64; ++g) {  // 64-column groups of the block
        float x[16], quot[16];  // this row's 16 values of the group: pairs of columns 8j + 2q + {0, 1}
#pragma unroll
        for (int t = 0; t < 8; ++t) {
          const int j = kBlockCols / 8 * b + 8 * g + t;
          x[2 * t] = v[4 * j + 2 * h], x[2 * t + 1] = v[4 * j + 2 * h + 1];
        }
#pragma unroll
        for (int i = 0; i < 16; ++i) quot[i] = x[i] * y;
        unsigned w[4];
#pragma unroll
        for (int i = 0; i < 4; ++i)  // columns 16i + 2q + {0, 1} and 16i + 8 + 2q + {0, 1}
          w[i] = e4m3x2(quot[4 * i], quot[4 * i + 1]) | e4m3x2(quot[4 * i + 2], quot[4 * i + 3]) << 16;
        quad_transpose(w, lane);  // w[i]: lane i's word q
        const uint4 out = make_uint4(__byte_perm(w[0], w[1], 0x5410), __byte_perm(w[2], w[3], 0x5410),
                                     __byte_perm(w[0], w[1], 0x7632), __byte_perm(w[2], w[3], 0x7632));
        const int col = block_col + 64 * g + 16 * q;
        if constexpr (kStagedStore) {
          const int r = warp_in_group * 16 + lane / 4 + 8 * h;  // the slice's row
          const unsigned unit = 4 * g + q;                      // 16-byte unit of the 128-byte row
          asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};" ::"r"(buf + r * 128 + ((unit ^ (r % 8)) * 16)),
                       "r"(out.x), "r"(out.y), "r"(out.z), "r"(out.w)
                       : "memory");
        } else {
          if (row_valid && col < n_out) *reinterpret_cast<uint4*>(c + row * n_out + col) = out;
        }
      }
    }
    if constexpr (kStagedStore)
      flush_c_chunk<1>(p.c, tma_c, buf, row_begin + m_warp - warp_in_group * 16, rows, block_col, n_out, whole, leader,
                       warp_in_group, lane, barrier_id);
  }
}

// acc: the warpgroup's kWgN-column slice of the tile; group_rows / m_first / rows: the group's
// rows, the slice's first group-local row and its rows inside the group (1..64); col0: the
// tile's first GEMM column (n_block * kBlockN); tile_col0: the slice's first column in the tile.
// kSplitN: the two consumers split a 64-row tile's columns (the FP8 64x256 tile): with c=e4m3 and a
// GLU they quantize one 128-column block together (store_e4m3_blocks, kPaired).
// kStageE4m3: c=e4m3 goes through the C staging where the spec has it (measured on the FP8 kernel:
// 0.975-0.99x the GEMM1's time on the static scheduler, 1.03x on the dynamic one, docs/perf.md v28).
// kCBuffers: the C staging's chunk buffers per consumer (store_fused).
template <int kTypeC, int kWgN, bool kStaged, class Fuse, bool kSplitN = false, bool kStageE4m3 = true, int kCBuffers = 2>
__device__ __forceinline__ void fused_epilogue(const GroupedGemmParams& p, const FusionParams& f,
                                               const TmaDescriptor& tma_c, float (&acc)[kWgN / 2], unsigned staging,
                                               int group, int row_begin, int group_rows, int m_first, int rows,
                                               int col0, int tile_col0, int warp_in_group, int lane, int barrier_id,
                                               unsigned& c_state) {
  constexpr int kOutW = Fuse::glu ? kWgN / 2 : kWgN;  // output columns of the slice
  const int n = p.n;
  const int n_out = Fuse::glu ? n / 2 : n;
  const int m_warp = m_first + warp_in_group * 16 + lane / 4;  // group-local row of h = 0

  float w[2] = {1.f, 1.f};
  if constexpr (Fuse::weight) {
#pragma unroll
    for (int h = 0; h < 2; ++h) w[h] = m_warp + 8 * h < group_rows ? __ldg(f.routing_weights + row_begin + m_warp + 8 * h) : 0.f;
  }

  // Activation and weight; the result (acc, or gl for a GLU) is in the standard layout, kOutW columns wide.
  float gl[Fuse::glu ? kOutW / 2 : 1];
  if constexpr (Fuse::glu_split) {
#pragma unroll
    for (int j = 0; j < kWgN / 16; ++j)
#pragma unroll
      for (int i = 0; i < 4; ++i)
        gl[4 * j + i] = activate_glu<Fuse::act>(acc[4 * j + i], acc[4 * (j + kWgN / 16) + i]) * w[i / 2];
  } else if constexpr (Fuse::glu) {
    // Interleaved: lane q holds, per 8-column group j and row h, the pair (gate, up) of output
    // column 4j + q. Output column c = 8j' + 2q + e of the standard layout is held by lane
    // (2q + e) % 4 as its pair of group 2j' + (q >= 2): two shuffles per output element.
#pragma unroll
    for (int jp = 0; jp < kWgN / 16; ++jp) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float lo = activate_glu<Fuse::act>(acc[4 * (2 * jp) + 2 * h], acc[4 * (2 * jp) + 2 * h + 1]);
        const float hi = activate_glu<Fuse::act>(acc[4 * (2 * jp + 1) + 2 * h], acc[4 * (2 * jp + 1) + 2 * h + 1]);
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int src = glu_pair_source_lane(lane, e);
          const float from_lo = __shfl_sync(0xffffffffu, lo, src);
          const float from_hi = __shfl_sync(0xffffffffu, hi, src);
          gl[4 * jp + 2 * h + e] = (glu_pair_from_hi(lane) ? from_hi : from_lo) * w[h];
        }
      }
    }
  } else {
#pragma unroll
    for (int i = 0; i < kWgN / 2; ++i) acc[i] = activate<Fuse::act>(acc[i]) * w[(i / 2) % 2];
  }

  const int n0 = (Fuse::glu ? col0 / 2 + tile_col0 / 2 : col0 + tile_col0);  // slice's first output column
  if constexpr (kTypeC == kE4M3) {
    static_assert(!Fuse::scatter, "c=e4m3: rows in routed order");
    // Paired halves: the row amax crosses consumers through the (unused) C staging, which the
    // spec requires (stages_c); barrier_id is 1 + consumer, staging that consumer's part of it.
    constexpr bool kPaired = kSplitN && kOutW % 128 != 0;
    static_assert(!kPaired || kStaged, "c=e4m3 on paired halves: the exchange lives in the C staging");
    const int consumer = barrier_id - 1;
    const unsigned exchange = staging - consumer * kCStageBytesPerConsumer;
    constexpr bool kStagedStore = kStaged && !kPaired && kStageE4m3;
    if constexpr (Fuse::glu)
      store_e4m3_blocks<kOutW, kPaired, kStagedStore>(p, f, gl, row_begin, group_rows, m_warp - lane / 4, n0, n_out, lane,
                                                      warp_in_group, exchange, consumer, tma_c, staging, rows, barrier_id,
                                                      c_state);
    else
      store_e4m3_blocks<kOutW, kPaired, kStagedStore>(p, f, acc, row_begin, group_rows, m_warp - lane / 4, n0, n_out, lane,
                                                      warp_in_group, exchange, consumer, tma_c, staging, rows, barrier_id,
                                                      c_state);
  } else if constexpr (Fuse::glu) {
    store_fused<kTypeC, kOutW, kStaged, Fuse, kCBuffers>(p, f, tma_c, gl, staging, row_begin, group_rows, m_first, rows, n0, n_out,
                                              warp_in_group, lane, barrier_id, c_state);
  } else {
    store_fused<kTypeC, kOutW, kStaged, Fuse, kCBuffers>(p, f, tma_c, acc, staging, row_begin, group_rows, m_first, rows, n0, n_out,
                                              warp_in_group, lane, barrier_id, c_state);
  }
}

}  // namespace moejit::hopper
