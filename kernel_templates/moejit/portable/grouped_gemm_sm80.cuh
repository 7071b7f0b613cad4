// Portable grouped GEMM for sm_80 and newer: cp.async multi-stage ring, ldmatrix, mma.sync.m16n8k16.
//
//   C[row, n] = sum_k A[row, k] * B[group(row), n, k]   (fp32 accumulation)
//
// One CTA computes one kBlockM x kBlockN tile of one group at a time and walks the tiles of
// all groups persistently (GroupTileCursor). Rows past the group's end, columns past N and
// the K tail are zero-filled by cp.async (never read) and never stored.
// Requirements: K % 8 == 0; A, B, C 16-byte aligned.
#pragma once
#include "moejit/params.cuh"
#include "moejit/common/types.cuh"
#include "moejit/common/scheduler.cuh"
#include "moejit/portable/cp_async.cuh"
#include "moejit/portable/mma_sync.cuh"
#include "moejit/portable/w4_widen.cuh"

namespace moejit::portable {

// Row pitch of an A or B stage in shared memory, in 16-bit elements. The 8 extra elements
// (16 bytes) shift consecutive rows by 4 banks, so the 8 row addresses of one ldmatrix phase
// hit 8 disjoint 16-byte bank quads: conflict-free for kBlockK 32 (80-byte pitch) and 64 (144).
template <int kBlockK> __host__ __device__ constexpr int stage_pitch() { return kBlockK + 8; }

// Row pitch of the output staging tile, in elements of C: 8 extra elements keep the fragment
// stores (8 rows x 4 lanes per instruction) conflict-free for 16-bit and fp32 outputs.
template <int kBlockN> __host__ __device__ constexpr int output_pitch() { return kBlockN + 8; }

__host__ __device__ constexpr int dtype_bytes(int type) { return type == kF32 ? 4 : 2; }

// Dynamic shared memory, in bytes (the host mirrors this formula):
//   max( kStages * (kBlockM + kBlockN) * (kBlockK + 8) * 2,      // A and B ring, 16-bit elements
//        kBlockM * (kBlockN + 8) * bytes(kTypeC) )               // output staging, reuses the ring
// plus 4 bytes of static shared memory (the dynamic scheduler's tile broadcast), not included.
template <int kBlockM, int kBlockN, int kBlockK, int kStages, int kWarpsM, int kWarpsN, int kTypeAB, int kTypeC,
          int kLayout, int kScheduler>
__host__ __device__ constexpr int smem_bytes() {
  constexpr int ring = kStages * (kBlockM + kBlockN) * stage_pitch<kBlockK>() * 2;
  constexpr int staging = kBlockM * output_pitch<kBlockN>() * dtype_bytes(kTypeC);
  return ring > staging ? ring : staging;
}

namespace detail {

// The per-thread part of loading one k-block of a kRows x kBlockK operand tile. Chunk c of the
// tile (16 bytes) is row c / (kBlockK/8), k chunk c % (kBlockK/8), so consecutive threads read
// consecutive 16 bytes of a row; thread t copies chunks t, t + kThreads, ..., which all share
// one k offset and lie kRowsPerPass rows apart. Keeping one pointer and a bit mask of present
// rows (rather than a pointer per chunk) saves the registers that let two CTAs share an SM.
template <int kRows, int kBlockK, int kThreads>
struct OperandLoader {
  static constexpr int kChunksPerRow = kBlockK / 8;
  static constexpr int kRowsPerPass = kThreads / kChunksPerRow;
  static constexpr int kPasses = (kRows + kRowsPerPass - 1) / kRowsPerPass;
  static_assert(kThreads % kChunksPerRow == 0, "a pass of the CTA must cover whole rows");
  static_assert(kPasses <= 32, "row mask is 32 bits");

  const unsigned short* src;  // first row's chunk at k = 0; `base` if that row is absent
  long long pass_stride;      // elements between the rows of consecutive passes
  unsigned dst;               // byte offset of the first chunk inside a stage
  unsigned row_mask;          // bit i: the row of pass i exists
  int k_offset;

  // rows_valid: how many leading rows of the tile exist; row_stride: elements between rows.
  __device__ __forceinline__ void init(const unsigned short* base, const unsigned short* tile_base,
                                       int rows_valid, long long row_stride) {
    const int row = (int)threadIdx.x / kChunksPerRow;
    k_offset = ((int)threadIdx.x % kChunksPerRow) * 8;
    row_mask = 0;
#pragma unroll
    for (int i = 0; i < kPasses; ++i) {
      const int r = row + i * kRowsPerPass;
      if ((kRows % kRowsPerPass == 0 || r < kRows) && r < rows_valid) row_mask |= 1u << i;
    }
    src = (row_mask & 1u) ? tile_base + row * row_stride + k_offset : base;
    pass_stride = kRowsPerPass * row_stride;
    dst = (unsigned)(row * stage_pitch<kBlockK>() + k_offset) * 2u;
  }

  __device__ __forceinline__ void load(unsigned stage_address, int k_begin, int k) const {
    const bool k_valid = k_begin + k_offset < k;
#pragma unroll
    for (int i = 0; i < kPasses; ++i) {
      if (kRows % kRowsPerPass != 0 && (int)threadIdx.x / kChunksPerRow + i * kRowsPerPass >= kRows) continue;
      const bool valid = k_valid && ((row_mask >> i) & 1u);
      // Only a present row's address is formed: past a contiguous group may be past the allocation.
      const unsigned short* from = valid ? src + i * pass_stride + k_begin : src;
      cp_async_16_zfill(stage_address + dst + (unsigned)(i * kRowsPerPass * stage_pitch<kBlockK>() * 2), from, valid);
    }
  }
};

template <bool kFirst, typename First, typename Second> struct Select { using type = First; };
template <typename First, typename Second> struct Select<false, First, Second> { using type = Second; };

}  // namespace detail

// kTypeB: kTypeAB, or kMXFP4 / kNVFP4 with kTypeAB = kBF16 (weight-only 4-bit: B is widened to
// BF16 into the same shared-memory stages by detail::W4WidenLoader, grouped_gemm_sm80_w4.cuh).
template <int kBlockM, int kBlockN, int kBlockK, int kStages, int kWarpsM, int kWarpsN, int kTypeAB, int kTypeC,
          int kLayout, int kScheduler, int kTypeB>
__device__ __forceinline__ void grouped_gemm_impl(const GroupedGemmParams& p);

template <int kBlockM, int kBlockN, int kBlockK, int kStages, int kWarpsM, int kWarpsN, int kTypeAB, int kTypeC,
          int kLayout, int kScheduler>
__device__ void grouped_gemm(const GroupedGemmParams& p) {
  grouped_gemm_impl<kBlockM, kBlockN, kBlockK, kStages, kWarpsM, kWarpsN, kTypeAB, kTypeC, kLayout, kScheduler, kTypeAB>(p);
}

template <int kBlockM, int kBlockN, int kBlockK, int kStages, int kWarpsM, int kWarpsN, int kTypeAB, int kTypeC,
          int kLayout, int kScheduler, int kTypeB>
__device__ __forceinline__ void grouped_gemm_impl(const GroupedGemmParams& p) {
  constexpr bool kW4 = kTypeB == kMXFP4 || kTypeB == kNVFP4;
  // FP8 (a = b = e4m3, DeepSeek-V3 block scales): both operands widened exactly to BF16, one
  // partial sum per 128-wide K block promoted into `total` with sa[kb][row] * sb[g][n/128][kb],
  // as the Hopper FP8 kernel does (params.cuh: scale_a, scale_b).
  constexpr bool kFp8 = kTypeAB == kE4M3;
  constexpr int kMmaType = kFp8 ? kBF16 : kTypeAB;
  static_assert(kTypeB == kTypeAB || (kW4 && kTypeAB == kBF16), "B: A's type, or 4-bit weights with bf16 A");
  static_assert(!kFp8 || (128 % kBlockK == 0 && kBlockN <= 128), "FP8: k-blocks tile a 128-wide scale block, one B scale per tile");
  constexpr int kThreads = 32 * kWarpsM * kWarpsN;
  constexpr int kWarpTileM = kBlockM / kWarpsM;
  constexpr int kWarpTileN = kBlockN / kWarpsN;
  constexpr int kMmaM = kWarpTileM / 16;  // m16 fragments per warp
  constexpr int kMmaN = kWarpTileN / 8;   // n8 fragments per warp
  constexpr int kPitch = stage_pitch<kBlockK>();
  constexpr unsigned kStageABytes = kBlockM * kPitch * 2;
  constexpr unsigned kStageBytes = (kBlockM + kBlockN) * kPitch * 2;
  static_assert(kTypeAB == kBF16 || kTypeAB == kF16 || kTypeAB == kE4M3, "A and B must be bf16, f16 or e4m3");
  static_assert(kTypeC == kBF16 || kTypeC == kF16 || kTypeC == kF32, "C must be bf16, f16 or f32");
  static_assert(kStages >= 2, "the ring needs at least two stages");
  static_assert(kBlockK % 16 == 0, "kBlockK must be a multiple of the MMA's k (16)");
  static_assert(kBlockM % (16 * kWarpsM) == 0, "each warp needs whole m16 fragments");
  static_assert(kBlockN % (16 * kWarpsN) == 0, "each warp needs whole pairs of n8 fragments (ldmatrix.x4)");

  using OutT = typename StorageOf<kTypeC>::type;
  constexpr int kOutPitch = output_pitch<kBlockN>();
  constexpr int kOutChunkElems = 16 / (int)sizeof(OutT);
  constexpr int kOutChunksPerRow = kBlockN / kOutChunkElems;
  static_assert(kBlockN % kOutChunkElems == 0, "kBlockN must fill whole 16-byte output chunks");

  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ int broadcast_tile;  // dynamic scheduler: thread 0's fetch, read by the whole CTA
  const unsigned smem_base = shared_address(smem);

  const int lane = (int)threadIdx.x & 31;
  const int warp = (int)threadIdx.x >> 5;
  const int warp_m = warp % kWarpsM;
  const int warp_n = warp / kWarpsM;

  // ldmatrix row addresses (see mma_sync.cuh): A matrices j = (rows 8*(j%2).., k 8*(j/2)..),
  // B matrices j = (n 8*(j/2).., k 8*(j%2)..), so B's x4 covers two n8 fragments.
  const unsigned a_lane_offset =
      (unsigned)((warp_m * kWarpTileM + (lane & 15)) * kPitch + (lane >> 4) * 8) * 2u;
  const unsigned b_lane_offset =
      kStageABytes + (unsigned)((warp_n * kWarpTileN + (lane & 7) + ((lane >> 4) << 3)) * kPitch +
                                ((lane >> 3) & 1) * 8) * 2u;

  const long long k = p.k;
  const long long n = p.n;
  const int k_blocks = (p.k + kBlockK - 1) / kBlockK;
  const unsigned short* a_base = static_cast<const unsigned short*>(p.a);
  const unsigned short* b_base = static_cast<const unsigned short*>(p.b);
  OutT* c_base = static_cast<OutT*>(p.c);
  // 16-byte output stores need every row start 16-byte aligned.
  const bool c_rows_aligned = (p.n % kOutChunkElems) == 0;

  GroupTileCursor<kLayout, kBlockM, kBlockN> cursor;
  for (int iteration = 0;; ++iteration) {
    int tile;
    if (kScheduler == kSchedulerStatic) {
      tile = (int)blockIdx.x + iteration * (int)gridDim.x;
    } else {
      if (threadIdx.x == 0) broadcast_tile = fetch_next_tile(p.tile_counter);
      __syncthreads();
      tile = broadcast_tile;
    }
    TileCoord coord;
    if (!cursor.seek(p, tile, coord)) {
      if (kScheduler == kSchedulerDynamic && threadIdx.x == 0)
        release_tile_counter(p.tile_counter, tile, cursor.tiles_before);
      break;
    }

    const int tile_row = coord.m_block * kBlockM;  // inside the group
    const int tile_col = coord.n_block * kBlockN;
    const int rows_valid = coord.group_rows - tile_row;
    const int cols_valid = p.n - tile_col;

    typename detail::Select<kFp8, detail::E4m3WidenLoader<kBlockM, kBlockK, kThreads, kPitch>,
                            detail::OperandLoader<kBlockM, kBlockK, kThreads>>::type load_a;
    typename detail::Select<
        kFp8, detail::E4m3WidenLoader<kBlockN, kBlockK, kThreads, kPitch>,
        typename detail::Select<kW4, detail::W4WidenLoader<kBlockN, kBlockK, kThreads, kTypeB, kPitch>,
                                detail::OperandLoader<kBlockN, kBlockK, kThreads>>::type>::type load_b;
    if constexpr (kFp8) {
      load_a.init(static_cast<const unsigned char*>(p.a) + (coord.row_begin + tile_row) * k, rows_valid, k);
      load_b.init(static_cast<const unsigned char*>(p.b) + ((long long)coord.group * n + tile_col) * k, cols_valid, k);
    } else {
      load_a.init(a_base, a_base + (coord.row_begin + tile_row) * k, rows_valid, k);
      if constexpr (kW4) load_b.init(p.b, coord.group, tile_col, cols_valid, p.n, p.k);
      else load_b.init(b_base, b_base + ((long long)coord.group * n + tile_col) * k, cols_valid, k);
    }
    // FP8: the promoted sum, and this thread's rows' A-scale pointers (null past the group).
    float total[kFp8 ? kMmaM : 1][kFp8 ? kMmaN : 1][4];
    const float* scale_rows[kFp8 ? kMmaM : 1][2];
    const float* scale_b_tile = nullptr;
    if constexpr (kFp8) {
#pragma unroll
      for (int mi = 0; mi < kMmaM; ++mi) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int r = tile_row + warp_m * kWarpTileM + mi * 16 + (lane >> 2) + 8 * h;  // inside the group
          scale_rows[mi][h] = r < coord.group_rows ? p.scale_a + coord.row_begin + r : nullptr;
        }
#pragma unroll
        for (int ni = 0; ni < kMmaN; ++ni)
#pragma unroll
          for (int e = 0; e < 4; ++e) total[mi][ni][e] = 0.f;
      }
      scale_b_tile = static_cast<const float*>(p.scale_b) +
                     ((long long)coord.group * ((p.n + 127) / 128) + tile_col / 128) * ((p.k + 127) / 128);
    }

    float acc[kMmaM][kMmaN][4];
#pragma unroll
    for (int mi = 0; mi < kMmaM; ++mi)
#pragma unroll
      for (int ni = 0; ni < kMmaN; ++ni)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[mi][ni][e] = 0.f;

    // Prologue: fill kStages-1 stages. Every thread commits one group per k-block, even an
    // empty one, so that wait_group<kStages-2> always means "k-block kb has landed".
#pragma unroll
    for (int s = 0; s < kStages - 1; ++s) {
      if (s < k_blocks) {
        load_a.load(smem_base + s * kStageBytes, s * kBlockK, p.k);
        load_b.load(smem_base + s * kStageBytes + kStageABytes, s * kBlockK, p.k);
      }
      cp_async_commit();
    }

    int read_stage = 0;
    int write_stage = kStages - 1;
    for (int kb = 0; kb < k_blocks; ++kb) {
      cp_async_wait<kStages - 2>();
      // One barrier per k-block: makes k-block kb visible to all warps and guarantees that
      // every warp is done with the stage read in iteration kb-1, which is refilled next.
      __syncthreads();
      const int next = kb + kStages - 1;
      if (next < k_blocks) {
        load_a.load(smem_base + write_stage * kStageBytes, next * kBlockK, p.k);
        load_b.load(smem_base + write_stage * kStageBytes + kStageABytes, next * kBlockK, p.k);
      }
      cp_async_commit();

      const unsigned stage = smem_base + read_stage * kStageBytes;
#pragma unroll
      for (int kk = 0; kk < kBlockK / 16; ++kk) {
        unsigned a_frag[kMmaM][4];
        unsigned b_frag[kMmaN][2];
#pragma unroll
        for (int mi = 0; mi < kMmaM; ++mi)
          ldmatrix_x4(a_frag[mi], stage + a_lane_offset + (unsigned)(mi * 16 * kPitch + kk * 16) * 2u);
#pragma unroll
        for (int nj = 0; nj < kMmaN / 2; ++nj) {
          unsigned quad[4];
          ldmatrix_x4(quad, stage + b_lane_offset + (unsigned)(nj * 16 * kPitch + kk * 16) * 2u);
          b_frag[2 * nj][0] = quad[0];
          b_frag[2 * nj][1] = quad[1];
          b_frag[2 * nj + 1][0] = quad[2];
          b_frag[2 * nj + 1][1] = quad[3];
        }
#pragma unroll
        for (int mi = 0; mi < kMmaM; ++mi)
#pragma unroll
          for (int ni = 0; ni < kMmaN; ++ni) mma_m16n8k16<kMmaType>(acc[mi][ni], a_frag[mi], b_frag[ni]);
      }
      if constexpr (kFp8) {
        // End of a 128-wide scale block (or of K): promote the partial sums and restart them.
        if ((kb + 1) % (128 / kBlockK) == 0 || kb + 1 == k_blocks) {
          const int kb128 = kb * kBlockK / 128;
          const float sb = __ldg(scale_b_tile + kb128);
          const long long a_stride = p.total_rows;
#pragma unroll
          for (int mi = 0; mi < kMmaM; ++mi) {
            const float s0 = scale_rows[mi][0] ? __ldg(scale_rows[mi][0] + kb128 * a_stride) * sb : 0.f;
            const float s1 = scale_rows[mi][1] ? __ldg(scale_rows[mi][1] + kb128 * a_stride) * sb : 0.f;
#pragma unroll
            for (int ni = 0; ni < kMmaN; ++ni) {
              total[mi][ni][0] = fmaf(acc[mi][ni][0], s0, total[mi][ni][0]);
              total[mi][ni][1] = fmaf(acc[mi][ni][1], s0, total[mi][ni][1]);
              total[mi][ni][2] = fmaf(acc[mi][ni][2], s1, total[mi][ni][2]);
              total[mi][ni][3] = fmaf(acc[mi][ni][3], s1, total[mi][ni][3]);
#pragma unroll
              for (int e = 0; e < 4; ++e) acc[mi][ni][e] = 0.f;
            }
          }
        }
      }
      read_stage = read_stage == kStages - 1 ? 0 : read_stage + 1;
      write_stage = write_stage == kStages - 1 ? 0 : write_stage + 1;
    }

    // Epilogue: fragments -> staging tile in shared memory (reusing the ring) -> 16-byte
    // row-contiguous global stores, masked to the group's rows and to N.
    cp_async_wait<0>();
    __syncthreads();
    if constexpr (kFp8) {
#pragma unroll
      for (int mi = 0; mi < kMmaM; ++mi)
#pragma unroll
        for (int ni = 0; ni < kMmaN; ++ni)
#pragma unroll
          for (int e = 0; e < 4; ++e) acc[mi][ni][e] = total[mi][ni][e];
    }
    if constexpr (kTypeB == kNVFP4) {
      // NVFP4's per-expert fp32 scale, once on the accumulator (code x block scale was exact).
      const float tensor_scale = __ldg(p.scale_b_tensor + coord.group);
#pragma unroll
      for (int mi = 0; mi < kMmaM; ++mi)
#pragma unroll
        for (int ni = 0; ni < kMmaN; ++ni)
#pragma unroll
          for (int e = 0; e < 4; ++e) acc[mi][ni][e] *= tensor_scale;
    }
    OutT* staging = reinterpret_cast<OutT*>(smem);
#pragma unroll
    for (int mi = 0; mi < kMmaM; ++mi) {
#pragma unroll
      for (int ni = 0; ni < kMmaN; ++ni) {
        const int row = warp_m * kWarpTileM + mi * 16 + (lane >> 2);
        const int col = warp_n * kWarpTileN + ni * 8 + (lane & 3) * 2;
        OutT* top = staging + row * kOutPitch + col;
        OutT* bottom = top + 8 * kOutPitch;
        if (kTypeC == kF32) {
          *reinterpret_cast<float2*>(top) = make_float2(acc[mi][ni][0], acc[mi][ni][1]);
          *reinterpret_cast<float2*>(bottom) = make_float2(acc[mi][ni][2], acc[mi][ni][3]);
        } else {
          *reinterpret_cast<unsigned*>(top) = pack_pair<kTypeC>(acc[mi][ni][0], acc[mi][ni][1]);
          *reinterpret_cast<unsigned*>(bottom) = pack_pair<kTypeC>(acc[mi][ni][2], acc[mi][ni][3]);
        }
      }
    }
    __syncthreads();

    OutT* c_tile = c_base + (coord.row_begin + tile_row) * n + tile_col;
#pragma unroll
    for (int i = (int)threadIdx.x; i < kBlockM * kOutChunksPerRow; i += kThreads) {
      const int row = i / kOutChunksPerRow;
      const int col = (i % kOutChunksPerRow) * kOutChunkElems;
      if (row >= rows_valid || col >= cols_valid) continue;
      const OutT* from = staging + row * kOutPitch + col;
      OutT* to = c_tile + row * n + col;
      if (c_rows_aligned && col + kOutChunkElems <= cols_valid) {
        *reinterpret_cast<uint4*>(to) = *reinterpret_cast<const uint4*>(from);
      } else {
#pragma unroll
        for (int e = 0; e < kOutChunkElems; ++e)
          if (col + e < cols_valid) to[e] = from[e];
      }
    }
    // The next tile's prologue overwrites the staging tile (and, for the dynamic scheduler,
    // thread 0 overwrites broadcast_tile): everyone must be done reading both.
    __syncthreads();
  }
}

}  // namespace moejit::portable
