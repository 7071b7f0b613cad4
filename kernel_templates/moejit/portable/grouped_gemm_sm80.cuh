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
#include "moejit/common/fusion.cuh"
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

// Fused kernels with a bias or routing weights also keep the tile's kBlockN bias values and
// kBlockM weights (fp32) in shared memory after the staging tile during the epilogue (read from
// there by the fragment loop: loading them into registers spilled at 128 registers per thread).
template <int kBlockM, int kBlockN, int kBlockK, int kStages, int kWarpsM, int kWarpsN, int kTypeAB, int kTypeC,
          int kLayout, int kScheduler, class Fuse>
__host__ __device__ constexpr int smem_bytes_fused() {
  constexpr int ring = kStages * (kBlockM + kBlockN) * stage_pitch<kBlockK>() * 2;
  constexpr int staging = kBlockM * output_pitch<kBlockN>() * dtype_bytes(kTypeC) +
                          (Fuse::bias || Fuse::weight ? (kBlockM + kBlockN) * 4 : 0);
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

  // B of a split-GLU tile (fuse act=swiglu*, glu=split): tile row 2i is the gate row out0 + i,
  // tile row 2i + 1 the up row half_n + out0 + i, so that gate/up pairs land in adjacent columns
  // exactly as with interleaved weights and the epilogue is the same for both layouts. A pass
  // spans an even number of rows, so a thread's rows all have the parity of its first.
  __device__ __forceinline__ void init_split(const unsigned short* base, const unsigned short* group_base, int out0,
                                             int half_n, int rows_valid, long long row_stride) {
    static_assert(kRowsPerPass % 2 == 0, "split GLU needs an even number of rows per pass");
    init(base, group_base, rows_valid, row_stride);
    const int row = (int)threadIdx.x / kChunksPerRow;
    src = (row_mask & 1u) ? group_base + (long long)split_glu_tile_row(row, out0, half_n) * row_stride + k_offset : base;
    pass_stride = (kRowsPerPass / 2) * row_stride;
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

// The A operand of fuse=gather: tile row i is A row rows[i] (token order). One pointer per pass
// (the rows are scattered); an index outside [0, num_tokens) reads a zero row.
template <int kRows, int kBlockK, int kThreads>
struct GatherLoader {
  static constexpr int kChunksPerRow = kBlockK / 8;
  static constexpr int kRowsPerPass = kThreads / kChunksPerRow;
  static constexpr int kPasses = (kRows + kRowsPerPass - 1) / kRowsPerPass;
  static_assert(kThreads % kChunksPerRow == 0, "a pass of the CTA must cover whole rows");

  // Only the token of each pass's row (-1: absent) is kept; A's base and row stride are kernel
  // parameters (constant bank) and the k offset and shared address come from threadIdx, so the
  // loader holds kPasses registers (registers are what two CTAs per SM lack).
  int token[kPasses];

  __device__ __forceinline__ void init(const int* rows, int rows_valid, int num_tokens) {
    const int row = (int)threadIdx.x / kChunksPerRow;
#pragma unroll
    for (int i = 0; i < kPasses; ++i) {
      const int r = row + i * kRowsPerPass;
      int t = -1;
      if ((kRows % kRowsPerPass == 0 || r < kRows) && r < rows_valid) t = __ldg(rows + r);
      token[i] = (unsigned)t < (unsigned)num_tokens ? t : -1;
    }
  }

  __device__ __forceinline__ void load(unsigned stage_address, int k_begin, int k, const unsigned short* base) const {
    const int k_offset = ((int)threadIdx.x % kChunksPerRow) * 8;
    const unsigned dst = (unsigned)(((int)threadIdx.x / kChunksPerRow) * stage_pitch<kBlockK>() + k_offset) * 2u;
    const bool k_valid = k_begin + k_offset < k;
#pragma unroll
    for (int i = 0; i < kPasses; ++i) {
      if (kRows % kRowsPerPass != 0 && (int)threadIdx.x / kChunksPerRow + i * kRowsPerPass >= kRows) continue;
      const bool valid = k_valid && token[i] >= 0;
      const unsigned short* from = valid ? base + (long long)token[i] * k + k_begin + k_offset : base;
      cp_async_16_zfill(stage_address + dst + (unsigned)(i * kRowsPerPass * stage_pitch<kBlockK>() * 2), from, valid);
    }
  }
};

}  // namespace detail

template <bool kCond, class T, class F> struct Select { using type = F; };
template <class T, class F> struct Select<true, T, F> { using type = T; };

// Fused epilogue: fragments -> bias -> activation -> routing weight -> C's type in the staging
// tile (reusing the ring) -> rows of C (16-byte stores; scattered rows with fuse=scatter; fp32
// atomic adds with fuse=atomic). With a GLU activation the tile's columns are gate/up pairs (for
// glu=split the B loader interleaves them) and the staging tile holds kBlockN / 2 output columns.
template <int kBlockM, int kBlockN, int kWarpsM, int kWarpsN, int kTypeC, class Fuse, int kMmaM, int kMmaN>
__device__ __forceinline__ void fused_epilogue(const GroupedGemmParams& p, const FusionParams& f,
                                               const float (&acc)[kMmaM][kMmaN][4],
                                               typename StorageOf<kTypeC>::type* staging, const TileCoord& coord,
                                               int tile_row, int tile_col, int rows_valid, int warp_m, int warp_n,
                                               int lane) {
  using OutT = typename StorageOf<kTypeC>::type;
  constexpr int kThreads = 32 * kWarpsM * kWarpsN;
  constexpr int kWarpTileM = kBlockM / kWarpsM;
  constexpr int kWarpTileN = kBlockN / kWarpsN;
  constexpr int kOutPitch = output_pitch<kBlockN>();
  constexpr int kOutN = Fuse::glu ? kBlockN / 2 : kBlockN;  // output columns of the tile
  constexpr int kOutChunkElems = 16 / (int)sizeof(OutT);
  constexpr int kOutChunksPerRow = kOutN / kOutChunkElems;
  static_assert(kOutN % kOutChunkElems == 0, "output tile must fill whole 16-byte chunks");
  const int n = p.n;
  const int n_out = Fuse::glu ? n / 2 : n;
  const int row0 = coord.row_begin + tile_row;  // routed row of the tile's first row

  // Bias (per tile column, in GEMM columns: split GLU maps tile column 2i to gate column
  // out0 + i and 2i + 1 to up column n/2 + out0 + i) and weights (per tile row) to shared memory
  // after the staging tile; the ring is free (the caller waited for every cp.async and synced).
  float* const s_bias = reinterpret_cast<float*>(staging + kBlockM * kOutPitch);
  float* const s_weight = s_bias + kBlockN;
  if constexpr (Fuse::bias) {
    for (int i = (int)threadIdx.x; i < kBlockN; i += kThreads) {
      int col;
      bool in;
      if constexpr (Fuse::glu_split) {
        in = tile_col / 2 + i / 2 < n / 2;
        col = split_glu_tile_row(i, tile_col / 2, n / 2);
      } else {
        col = tile_col + i;
        in = col < n;
      }
      s_bias[i] = in ? __ldg(f.bias + (long long)coord.group * n + col) : 0.f;
    }
  }
  if constexpr (Fuse::weight) {
    for (int r = (int)threadIdx.x; r < kBlockM; r += kThreads)
      s_weight[r] = r < rows_valid ? __ldg(f.routing_weights + row0 + r) : 0.f;
  }
  if constexpr (Fuse::bias || Fuse::weight) __syncthreads();
#pragma unroll
  for (int ni = 0; ni < kMmaN; ++ni) {
    const int col = warp_n * kWarpTileN + ni * 8 + (lane & 3) * 2;  // even
    float b0 = 0.f, b1 = 0.f;
    if constexpr (Fuse::bias) b0 = s_bias[col], b1 = s_bias[col + 1];
#pragma unroll
    for (int mi = 0; mi < kMmaM; ++mi) {
      const int row = warp_m * kWarpTileM + mi * 16 + (lane >> 2);
      float w_top = 1.f, w_bottom = 1.f;
      if constexpr (Fuse::weight) w_top = s_weight[row], w_bottom = s_weight[row + 8];
      float v0 = acc[mi][ni][0] + b0, v1 = acc[mi][ni][1] + b1, v2 = acc[mi][ni][2] + b0, v3 = acc[mi][ni][3] + b1;
      if constexpr (Fuse::glu) {
        const float top = activate_glu<Fuse::act>(v0, v1) * w_top;
        const float bottom = activate_glu<Fuse::act>(v2, v3) * w_bottom;
        OutT* at = staging + row * kOutPitch + col / 2;
        if constexpr (kTypeC == kF32) {
          at[0] = top;
          at[8 * kOutPitch] = bottom;
        } else {
          at[0] = to_half_bits<kTypeC>(top);
          at[8 * kOutPitch] = to_half_bits<kTypeC>(bottom);
        }
      } else {
        v0 = activate<Fuse::act>(v0) * w_top, v1 = activate<Fuse::act>(v1) * w_top;
        v2 = activate<Fuse::act>(v2) * w_bottom, v3 = activate<Fuse::act>(v3) * w_bottom;
        OutT* top = staging + row * kOutPitch + col;
        OutT* bottom = top + 8 * kOutPitch;
        if constexpr (kTypeC == kF32) {
          *reinterpret_cast<float2*>(top) = make_float2(v0, v1);
          *reinterpret_cast<float2*>(bottom) = make_float2(v2, v3);
        } else {
          *reinterpret_cast<unsigned*>(top) = pack_pair<kTypeC>(v0, v1);
          *reinterpret_cast<unsigned*>(bottom) = pack_pair<kTypeC>(v2, v3);
        }
      }
    }
  }
  __syncthreads();

  const int out_col0 = Fuse::glu ? tile_col / 2 : tile_col;
  const int cols_valid = n_out - out_col0;
  OutT* const c_base = static_cast<OutT*>(p.c);
  const bool c_rows_aligned = (n_out % kOutChunkElems) == 0;
#pragma unroll
  for (int i = (int)threadIdx.x; i < kBlockM * kOutChunksPerRow; i += kThreads) {
    const int row = i / kOutChunksPerRow;
    const int col = (i % kOutChunksPerRow) * kOutChunkElems;
    if (row >= rows_valid || col >= cols_valid) continue;
    long long out_row = row0 + row;
    if constexpr (Fuse::scatter) {
      const int to_row = __ldg(f.scatter_rows + row0 + row);
      if ((unsigned)to_row >= (unsigned)f.num_out_rows) continue;  // out of range: not written
      out_row = to_row;
    }
    const OutT* from = staging + row * kOutPitch + col;
    OutT* to = c_base + out_row * n_out + out_col0 + col;
    if constexpr (Fuse::atomic) {
      static_assert(kTypeC == kF32, "atomic accumulation needs fp32 C");
#pragma unroll
      for (int e = 0; e < kOutChunkElems; ++e)
        if (col + e < cols_valid) atomicAdd(to + e, from[e]);
    } else if (c_rows_aligned && col + kOutChunkElems <= cols_valid) {
      *reinterpret_cast<uint4*>(to) = *reinterpret_cast<const uint4*>(from);
    } else {
#pragma unroll
      for (int e = 0; e < kOutChunkElems; ++e)
        if (col + e < cols_valid) to[e] = from[e];
    }
  }
}

// Fuse: a FusionConfig (common/fusion.cuh); f: its operands (read only where Fuse says so).
// kTypeB: kTypeAB, or kMXFP4 / kNVFP4 with kTypeAB = kBF16 (weight-only 4-bit: B is widened to
// BF16 into the same shared-memory stages by detail::W4WidenLoader, w4_widen.cuh).
template <int kBlockM, int kBlockN, int kBlockK, int kStages, int kWarpsM, int kWarpsN, int kTypeAB, int kTypeC,
          int kLayout, int kScheduler, class Fuse, int kTypeB = kTypeAB>
__device__ void grouped_gemm(const GroupedGemmParams& p, const FusionParams& f) {
  constexpr bool kW4 = kTypeB == kMXFP4 || kTypeB == kNVFP4;
  // FP8 (a = b = e4m3, DeepSeek-V3 block scales): both operands widened exactly to BF16, one
  // partial sum per 128-wide K block promoted into `total` with sa[kb][row] * sb[g][n/128][kb],
  // as the Hopper FP8 kernel does (params.cuh: scale_a, scale_b).
  constexpr bool kFp8 = kTypeAB == kE4M3;
  constexpr int kMmaType = kFp8 ? kBF16 : kTypeAB;
  static_assert(kTypeB == kTypeAB || (kW4 && kTypeAB == kBF16), "B: A's type, or 4-bit weights with bf16 A");
  static_assert(!kFp8 || (128 % kBlockK == 0 && kBlockN <= 128), "FP8: k-blocks tile a 128-wide scale block, one B scale per tile");
  // The spec rejects fusions with quantized operands (docs/design.md, "Fusions": gaps).
  static_assert(!Fuse::any || (!kFp8 && !kW4), "fusions: 16-bit operands only");
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

    using ALoader = typename Select<
        kFp8, detail::E4m3WidenLoader<kBlockM, kBlockK, kThreads, kPitch>,
        typename Select<Fuse::gather, detail::GatherLoader<kBlockM, kBlockK, kThreads>,
                        detail::OperandLoader<kBlockM, kBlockK, kThreads>>::type>::type;
    using BLoader = typename Select<
        kFp8, detail::E4m3WidenLoader<kBlockN, kBlockK, kThreads, kPitch>,
        typename Select<kW4, detail::W4WidenLoader<kBlockN, kBlockK, kThreads, kTypeB, kPitch>,
                        detail::OperandLoader<kBlockN, kBlockK, kThreads>>::type>::type;
    ALoader load_a;
    BLoader load_b;
    if constexpr (kFp8) {
      load_a.init(static_cast<const unsigned char*>(p.a) + (coord.row_begin + tile_row) * k, rows_valid, k);
    } else if constexpr (Fuse::gather) {
      load_a.init(f.gather_rows + coord.row_begin + tile_row, rows_valid, f.num_tokens);
    } else {
      load_a.init(a_base, a_base + (coord.row_begin + tile_row) * k, rows_valid, k);
    }
    if constexpr (kFp8) {
      load_b.init(static_cast<const unsigned char*>(p.b) + ((long long)coord.group * n + tile_col) * k, cols_valid, k);
    } else if constexpr (kW4) {
      load_b.init(p.b, coord.group, tile_col, cols_valid, p.n, p.k);
    } else if constexpr (Fuse::glu_split) {
      load_b.init_split(b_base, b_base + (long long)coord.group * n * k, tile_col / 2, p.n / 2, cols_valid, k);
    } else {
      load_b.init(b_base, b_base + ((long long)coord.group * n + tile_col) * k, cols_valid, k);
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
        if constexpr (Fuse::gather) {
          load_a.load(smem_base + s * kStageBytes, s * kBlockK, p.k, a_base);
        } else {
          load_a.load(smem_base + s * kStageBytes, s * kBlockK, p.k);
        }
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
        if constexpr (Fuse::gather) {
          load_a.load(smem_base + write_stage * kStageBytes, next * kBlockK, p.k, a_base);
        } else {
          load_a.load(smem_base + write_stage * kStageBytes, next * kBlockK, p.k);
        }
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
    if constexpr (Fuse::epilogue) {
      fused_epilogue<kBlockM, kBlockN, kWarpsM, kWarpsN, kTypeC, Fuse>(p, f, acc, staging, coord, tile_row, tile_col,
                                                                        rows_valid, warp_m, warp_n, lane);
      __syncthreads();
      continue;
    }
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

// The unfused kernel (its generated code is unchanged by the fusions).
// kTypeB as above (portable_w4_grouped_gemm.cu.in passes the 4-bit format).
template <int kBlockM, int kBlockN, int kBlockK, int kStages, int kWarpsM, int kWarpsN, int kTypeAB, int kTypeC,
          int kLayout, int kScheduler, int kTypeB = kTypeAB>
__device__ __forceinline__ void grouped_gemm(const GroupedGemmParams& p) {
  grouped_gemm<kBlockM, kBlockN, kBlockK, kStages, kWarpsM, kWarpsN, kTypeAB, kTypeC, kLayout, kScheduler, NoFusion,
               kTypeB>(p, FusionParams{});
}

}  // namespace moejit::portable
