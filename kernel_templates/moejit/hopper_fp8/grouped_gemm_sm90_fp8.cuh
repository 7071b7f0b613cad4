// FP8 (e4m3) grouped GEMM with block scales for Hopper (sm_90a), DeepSeek-V3 recipe:
//   C[row, n] = sum_kb  sa[kb, row] * sb[group, n / 128, kb] * sum_{k in block kb} A[row, k] * B[group, n, k]
// A's scales are per row per 128 K-columns (1x128), B's per 128x128 block of each expert.
//
// Scales come in GroupedGemmParams (fp32; layouts defined in include/moejit/formats.hpp):
//   scale_a[kb * total_rows + row], row as in A (contiguous: absolute row; masked: group * capacity
//     + r): K-block-major, so that a warp's rows of one K block are contiguous.
//   scale_b[(group * ceil(N / 128) + n / 128) * ceil(K / 128) + kb], or (kChannelScalesB, spec
//     b_scales=channels: the row-wise recipe) scale_b[group * N + n], one per output channel, which
//     multiplies the promoted sum once after the K loop (bias, if fused, is added after it).
// Through the Runtime every [fp8] GPU test passes on the H100, the per-channel B scales included.
//
// Same skeleton as the BF16 kernel: warpgroup 0 is the TMA producer, warpgroups 1 and 2 consume.
// One pipeline stage is a 128-wide K block: a 128-byte swizzle row of e4m3 per tile row, i.e.
// exactly one scale block; the block's scales come with the stage (fp8_scale_stage_bytes).
// Promotion: Hopper's FP8 wgmma accumulates in reduced precision (about 14 bits), so each K block
// is multiplied into a fresh register tile (scale_d = 0 on its first k32 step), then scaled and
// added into the FP32 accumulator `acc` by the consumer's CUDA cores. While one consumer warpgroup
// promotes, the other's wgmmas keep the tensor cores busy. (Tried: two register tiles per
// consumer so that block kb + 1 multiplies while block kb is promoted; no clear gain, see perf.md.)
#pragma once
#include "moejit/params.cuh"
#include "moejit/common/types.cuh"
#include "moejit/common/scheduler.cuh"
#include "moejit/common/split_exchange.cuh"
#include "moejit/hopper/smem.cuh"
#include "moejit/hopper/mbarrier.cuh"
#include "moejit/hopper/tma.cuh"
#include "moejit/hopper/wgmma.cuh"
#include "moejit/hopper/warpgroup.cuh"
#include "moejit/hopper/epilogue.cuh"
#include "moejit/hopper/fused_epilogue.cuh"
#include "moejit/hopper/tile_ring.cuh"
#include "moejit/hopper/cluster.cuh"
#include "moejit/hopper/gather.cuh"
#include "moejit/hopper_fp8/wgmma_fp8_ops.cuh"

namespace moejit::hopper {

constexpr int kFp8BlockK = 128;  // K elements per stage = per scale block = one 128-byte swizzle row

// Each stage carries its K block's scales beside A and B (v30): A's, one fp32 per tile row, and B's
// four slots, [consumer][first, second 128-column block] (the split GLU: gate, up), after them.
// The consumers read them with LDS at a uniform stage address instead of loading them from global
// memory with 64-bit addresses and per-row predicates (DeepGEMM's k-loop does the same; docs/perf.md
// v30). A's come by one TMA copy (v33: by cp.async from 32 lanes the pairs took 1.10x the cycles):
// tma_s views scale_a as rows of 4 floats (16 bytes), so that a box's innermost coordinate is
// always 0: a 1-D map whose box started at the tile's first row (any row) faulted with an illegal
// instruction on the H100 (docs/perf.md v33); the copy brings kBlockM / 4 + 1 such rows from
// the one holding the tile's first scale, which lies `shift` = (kb * total_rows + a_row) % 4 floats
// into the stage (fp8_scale_shift). Then the B slots (cp.async from lanes 0-3). Gathered rows' A
// scales (token-indexed) come by cp.async, unshifted. Each stage's scales start 128-byte aligned,
// as TMA's destination must.
template <int kBlockM>
__host__ __device__ constexpr int fp8_scale_a_box_bytes() {
  return (kBlockM / 4 + 1) * 16;
}
template <int kBlockM>
__host__ __device__ constexpr int fp8_scale_b_slots_float() {  // the first B slot, in floats from the stage's start
  return kBlockM + 4;
}
template <int kBlockM>
__host__ __device__ constexpr int fp8_scale_stage_bytes() {
  // The box covers the tile's kBlockM scales from any shift (0..3), and the B slots lie after it.
  static_assert(fp8_scale_a_box_bytes<kBlockM>() >= (3 + kBlockM) * 4, "A-scale box shorter than a shifted tile");
  static_assert(fp8_scale_b_slots_float<kBlockM>() * 4 >= fp8_scale_a_box_bytes<kBlockM>(), "B slots overlap the A-scale box");
  return (fp8_scale_b_slots_float<kBlockM>() * 4 + 16 + 127) / 128 * 128;
}
// Barriers and the tile ring after the stages. The stages start at the dynamic shared memory's
// base, declared 1024-byte aligned (what the 128B swizzle atoms need), so no alignment slack.
constexpr int kFp8BarrierBytes = 512;

// C through shared memory and TMA stores (hopper/epilogue.cuh, as the bf16 kernel's) where its
// 32 KB fit beside the tile's stages: 128x256, 128x192 and 64x256 with 4 stages (the heuristic's
// tiles) and 128x128 with 5; 128x192 and 64x256 with 5 (and 128x128 with 6, since v30's scales)
// store from registers. Why: both consumers finish a tile
// together, and with register stores the tensor cores idle while they store; v11 measured the
// register-store epilogue skipped at 1.094x in geomean over the 4096/16384-token cases, up to
// 1.29x where K is short (Qwen3 down, K = 768). Staged, 0.96-0.98x the time at 16384 tokens, and
// 128x192 runs faster at 4 stages staged than at 5 (docs/perf.md v11, v24).
template <int kBlockM, int kBlockN, int kStages>
__host__ __device__ constexpr int fp8_stage_bytes() {
  return kStages * ((kBlockM + kBlockN) * kFp8BlockK + fp8_scale_stage_bytes<kBlockM>()) + kFp8BarrierBytes;
}
template <int kBlockM, int kBlockN, int kStages>
__host__ __device__ constexpr bool fp8_c_staged() {
  return fp8_stage_bytes<kBlockM, kBlockN, kStages>() + 2 * (int)kCStageBytesPerConsumer <= 232448;
}

// [A stages][B stages][C staging where it fits (fp8_c_staged)][scale stages][barriers, tile ring].
template <int kBlockM, int kBlockN, int kStages>
__host__ __device__ constexpr int fp8_smem_bytes() {
  return fp8_stage_bytes<kBlockM, kBlockN, kStages>() +
         (fp8_c_staged<kBlockM, kBlockN, kStages>() ? 2 * (int)kCStageBytesPerConsumer : 0);
}

// Fuse / f (null without fusions; docs/design.md, "Fusions"): the accumulator is the standard
// wgmma layout (as the bf16 kernel's), so the bf16 kernel's fused epilogue (fused_epilogue.cuh) runs
// on it with direct stores: bias as the accumulators' start (the promotion adds to them), then
// activation (interleaved GLU), weight, store / scatter / fp32 atomics. Gather (by cp.async, as the
// bf16 kernel's: the producer warpgroup copies the tile's token rows, 128 e4m3 = 128 bytes per row
// and K block, into the stage where TMA would put them; thread t copies the A scales of tile row t's
// token, [kb][num_tokens], into the stage). Split GLU (v27): each consumer slice's B comes as a gate box and an
// up box of kWgN/2 rows (fused_epilogue.cuh, load_b_tile), each inside one 128-row scale block
// ((n/2) % 128 == 0, validated), so the slice's first half takes the gate block's scale and its
// second half the up block's: 128x128 and 64x256 (64-row halves in one 64x128 part) and 128x256
// (128-row halves, one per part), not 128x192 (96-row halves straddle scale blocks). Not here:
// gather by TMA (one copy per row is far too small for the copy engine, docs/design.md), and split
// GLU with per-channel B scales.
// Per-channel B scales (kChannelScalesB): acc[4j + 2h + e] of output column n0 + 8j + 2(lane%4) + e
// times scale_b[group][column], then + bias[group][column] with fuse=bias (the accumulators
// started at zero: a bias folded in first would be scaled too). Columns past N get 0.
template <int kWgN, bool kBias>
__device__ __forceinline__ void scale_columns_fp8(float (&acc)[kWgN / 2], const float* scale_b, const FusionParams* f,
                                                  int group, int n, int n0, int lane) {
  const float* const scales = scale_b + static_cast<long long>(group) * n;
#pragma unroll
  for (int j = 0; j < kWgN / 8; ++j) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int col = n0 + 8 * j + 2 * (lane % 4) + e;
      const float s = col < n ? __ldg(scales + col) : 0.f;
      float b = 0.f;
      if constexpr (kBias) b = bias_at(*f, group, n, col);
      acc[4 * j + e] = fmaf(acc[4 * j + e], s, b);
      acc[4 * j + 2 + e] = fmaf(acc[4 * j + 2 + e], s, b);
    }
  }
}

// The B slot `thread` of a stage's scales (fp8_scale_stage_bytes) from b_src, unless null, by a
// 4-byte cp.async.
template <int kBlockM>
__device__ __forceinline__ void copy_stage_b_scale_fp8(unsigned dst, int thread, const float* b_src) {
  if (b_src)
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(dst + 4u * (fp8_scale_b_slots_float<kBlockM>() + thread)), "l"(b_src)
                 : "memory");
}

// One gathering producer thread's share of a stage's scales (fp8_scale_stage_bytes), by 4-byte
// cp.async: A rows r = thread, thread + kThreads, ... < kBlockM from a_src (row r at a_src + r -
// thread), or zeros for rows r >= rows_valid (past the group's end, a token outside [0,
// num_tokens): their rows are never stored); and B slot `thread` (copy_stage_b_scale_fp8). The
// caller arrives on the full barrier once they land (cp_async_mbarrier_arrive_noinc).
template <int kBlockM, int kThreads>
__device__ __forceinline__ void copy_stage_scales_fp8(unsigned dst, const float* scale_a, const float* a_src, int rows_valid,
                                                      int thread, const float* b_src) {
#pragma unroll
  for (int i = 0; i < (kBlockM + kThreads - 1) / kThreads; ++i) {
    const int r = thread + kThreads * i;
    if (kBlockM % kThreads == 0 || r < kBlockM) {
      const bool valid = r < rows_valid;
      asm volatile(
          "{\n.reg .pred skip;\n"
          "setp.eq.u32 skip, %2, 0;\n"
          "cp.async.ca.shared.global [%0], [%1], 4, skip;\n}\n" ::"r"(dst + 4u * r),
          "l"(valid ? a_src + kThreads * i : scale_a), "r"((unsigned)valid)
          : "memory");
    }
  }
  copy_stage_b_scale_fp8<kBlockM>(dst, thread, b_src);
}

// Where the K block's first A scale lies in a stage copied by TMA (fp8_scale_stage_bytes): floats
// from its start.
__device__ __forceinline__ int fp8_scale_shift(int kb, int total_rows, int a_row) { return (kb * total_rows + a_row) & 3; }

// A count inside a role: split=tail and the staged-C kernels recompute it there from `value` (p.k
// or p.n) behind an empty asm, so that it is not hoisted above setmaxnreg (held across it, ptxas
// spilled it: the split kernels, and 4 bytes in staged f32-C and fused GLU ones); the others keep
// the value from before the role split.
template <bool kRecompute>
__device__ __forceinline__ int role_blocks_of(int value, int block, int before_split) {
  if constexpr (!kRecompute) return before_split;
  asm volatile("" : "+r"(value));
  return (value + block - 1) / block;
}

// kScheduler: static (CTA c takes tiles c, c + gridDim.x, ...) or dynamic (the producer takes each
// tile from the launch's counter and hands it to the consumers through a TileRing): groups of
// uneven size make tiles of uneven cost, and the dynamic one keeps every SM busy to the end.
// A 128-row tile whose group ends in its first half leaves consumer 1 without rows: it only
// passes the stages on (half the MMA time for such a tile).
// kSplitTail (split=tail, unfused): work units as in common/split_tail.cuh, as in the bf16 kernel; a
// piece promotes its own K blocks and its consumers exchange the promoted sums (split_reduce) before
// the per-channel scales and the store, which only the last piece runs.
template <int kBlockM, int kBlockN, int kStages, int kTypeC, int kLayout, class Fuse = NoFusion,
          bool kChannelScalesB = false, int kScheduler = kSchedulerStatic, bool kSplitTail = false, int kClusterM = 1>
__device__ __forceinline__ void grouped_gemm_fp8(const GroupedGemmParams& p,
                                                 const TmaDescriptor& tma_a, const TmaDescriptor& tma_b,
                                                 const TmaDescriptor& tma_c, const TmaDescriptor& tma_s,
                                                 const FusionParams* f = nullptr) {
  static_assert(!Fuse::gather_tma, "FP8 Hopper kernel: no gather by TMA");
  static_assert(!Fuse::glu_split || (!kChannelScalesB && kBlockN != 192),
                "FP8 split GLU: scale blocks per half (not per channel), halves of 64 or 128 rows (not 128x192)");
  // A consumer warpgroup's columns lie in one 128-wide scale block of B, or (128x192) in two: its
  // 192 columns start at a multiple of 64, so the first block's part is 128 or 64 columns wide; or
  // (128x256) in two, one per 128-column half.
  static_assert((kBlockM == 128 && kBlockN == 128) || (kBlockM == 64 && kBlockN == 256) ||
                    (kBlockM == 128 && kBlockN == 192) || (kBlockM == 128 && kBlockN == 256),
                "FP8 tiles: 128x128, 128x192 or 128x256 (consumers split rows) or 64x256 (consumers split columns)");
  static_assert(fp8_smem_bytes<kBlockM, kBlockN, kStages>() <= 232448, "stages do not fit in 227 KB");
  static_assert(kTypeC == kBF16 || kTypeC == kF16 || kTypeC == kF32 || kTypeC == kE4M3, "C must be bf16, f16, f32 or e4m3");
  static_assert(kTypeC != kE4M3 || (!Fuse::scatter && !kSplitTail), "c=e4m3: written in routed order, whole tiles");
  static_assert(!kSplitTail || !Fuse::any, "split=tail: unfused kernels only (a bias would be added once per piece)");
  static_assert(kClusterM == 1 || (kClusterM == 2 && kBlockM == 128 && !kSplitTail &&
                                   (kScheduler == kSchedulerStatic || !Fuse::gather)),
                "FP8 CTA pairs (cluster=2x1): 128-row tiles, whole tiles; the dynamic scheduler ungathered");

  constexpr bool kSplitN = kBlockM == 64;
  constexpr int kWgN = kSplitN ? kBlockN / 2 : kBlockN;  // 128
  // 128x256: a consumer's 64x256 slice is multiplied in two 128-column halves, one after the
  // other, into a 64-register `part`: 128 for `acc` + 64 for `part` fit where two 128-register
  // tiles would not. Each half is one B scale block (the slice starts at a multiple of 256).
  constexpr int kHalves = kWgN == 256 ? 2 : 1;
  constexpr int kPartN = kWgN / kHalves;
  using Mma = WgmmaFp8Op<kPartN>;
  constexpr int kAccRegs = kWgN / 2;
  constexpr int kPartRegs = Mma::kRegs;
  constexpr unsigned kRowBytes = kFp8BlockK;
  constexpr unsigned kABytes = kBlockM * kRowBytes;
  constexpr unsigned kBBytes = kBlockN * kRowBytes;
  constexpr int kConsumerWarps = 8;
  constexpr bool kDynamic = kScheduler == kSchedulerDynamic;
  constexpr bool kStaged = fp8_c_staged<kBlockM, kBlockN, kStages>();
  // Warp-uniform values through a shuffle from lane 0, so that ptxas keeps the descriptors' per-stage
  // and per-k-step sums in uniform registers (DeepGEMM's hint; docs/perf.md v29: 210 -> 192 SASS
  // instructions per k-block on 128x192, R2UR 16 -> 4). The split=tail kernels too since v46 (before
  // split_reduce's warp vote the shuffles' registers made ptxas spill 24-40 bytes there; without
  // them whole tiles ran 1.03-1.23x the plain kernel's time at 4096-16384 tokens, now 1.02-1.05x),
  // but for f32 C: there 128x192 at 4 stages on the dynamic scheduler spilled 20 bytes with them.
  constexpr bool kUniformHints = !kSplitTail || kTypeC != kF32;
  // cluster=2x1 (v30): CTA pairs take the two M tiles 2i, 2i+1 of one (group, N tile) and share B:
  // each rank loads its own A and one half of the B tile (kBlockN/2 rows: the B map's box),
  // multicast to both, so a CTA pulls 16 + 16 KB instead of 16 + 32 KB per 128x256 k-block from L2
  // (Nsight Compute: L2 throughput 85% on Mixtral down 16384 unpaired, docs/perf.md v30). A stage
  // is then freed by both CTAs' consumers (the empty barriers count both CTAs' consumer warpgroups).
  // A group with an odd M-tile count gives its last M tile to both ranks, split along N (v32,
  // GroupTileCursor's kPairs units, pair_unit_tile): each rank loads its own A and both halves of
  // its own B, and the stages are still freed by both, so that the ranks stay in lockstep. (Before,
  // rank 1 idled through that tile: ~9% of the tile slots at 1024 +- 31 rows per expert.) Both
  // ranks walk the same units: on the static scheduler cluster c takes c, c + clusters, ...; on the
  // dynamic one (v49, ungathered) rank 0's producer takes each unit number from the counter and
  // writes it into both CTAs' tile rings (TileRing's kPaired). Fused and c=e4m3 too (v38): the
  // epilogue is each CTA's own, and a gathering pair's CTAs each copy their own rows and A scales
  // (the gathering producer walks the same units; static scheduler).
  constexpr bool kPairM = kClusterM == 2;
  // Producer warps without fuse=gather: one, or three on CTA pairs (below; not on dynamic 128x192
  // pairs, which the heuristic never picks and whose 40-register producer then spilled 24 bytes).
  constexpr int kProducerWarps = kPairM && !Fuse::gather && (!kDynamic || kBlockN == 256) ? 3 : 1;
  const unsigned rank = kPairM ? cluster_ctarank() : 0u;
  const int cluster_id = kPairM ? cluster_id_x() : (int)blockIdx.x;
  const int clusters = kPairM ? cluster_count_x() : (int)gridDim.x;
  auto uniform = [](auto value) { return kUniformHints ? __shfl_sync(0xffffffffu, value, 0) : value; };

  // Layout: [A stages][B stages][C staging, if kStaged][scale stages][full bars][empty bars][tile ring]
  // [mix=R: the mixed order's two stream sizes] (in the barrier bytes: a static __shared__ array
  // would round the static part up to the 1024-byte alignment, past the 227 KB)
  // The base is 1024-byte aligned (declared; DeepGEMM relies on the same), and the layout leaves no
  // slack for rounding it up: a base off that alignment stops the kernel rather than overrun.
  extern __shared__ __align__(1024) unsigned char moejit_smem[];
  const unsigned smem_base = smem_addr(moejit_smem);
  if (smem_base % 1024u != 0) __trap();
  const unsigned a_stages = smem_base;
  const unsigned b_stages = a_stages + kStages * kABytes;
  const unsigned c_staging = b_stages + kStages * kBBytes;
  constexpr unsigned kScaleStageBytes = fp8_scale_stage_bytes<kBlockM>();
  const unsigned scale_stages = c_staging + (kStaged ? 2 * kCStageBytesPerConsumer : 0u);
  const unsigned full_bars = scale_stages + kStages * kScaleStageBytes;
  const unsigned empty_bars = full_bars + 8 * kStages;
  // Paired (dynamic, v49): rank 0 takes each unit number for both CTAs (TileRing's kPaired).
  using Ring = TileRing<4, kClusterM == 2>;
  Ring ring(empty_bars + 8 * kStages);
  static_assert(16 * kStages + Ring::kBytes + 8 <= kFp8BarrierBytes, "barriers, tile ring and mix totals past their bytes");
  int* const mix_totals = reinterpret_cast<int*>(moejit_smem + (empty_bars + 8 * kStages + Ring::kBytes - smem_base));
  // The scales as generic pointers, so that the consumers' reads are ordinary loads ordered after
  // the full barrier's wait (an asm with a memory clobber).
  const float* const scale_smem = reinterpret_cast<const float*>(moejit_smem + (scale_stages - smem_base));

  if (threadIdx.x == 0) {
    tma_prefetch_descriptor(tma_a);
    tma_prefetch_descriptor(tma_b);
    if constexpr (kStaged) tma_prefetch_descriptor(tma_c);
    if constexpr (!Fuse::gather) tma_prefetch_descriptor(tma_s);
    for (int st = 0; st < kStages; ++st) {
      // + one cp.async arrival per producer thread once its copies (its B slot; with fuse=gather
      // its rows and A scales too) have landed: the producer warpgroup's 128 threads, or the 32
      // lanes of the warp that copies the B slots (warp 0, or warp 2 of three).
      mbarrier_init(full_bars + 8 * st, Fuse::gather ? 1 + 128 : 1 + 32);
      // One thread per consumer warpgroup, of both CTAs when paired (release_stage).
      mbarrier_init(empty_bars + 8 * st, 2 * kClusterM);
    }
    // + producer warps 1-3 when they gather, 1-2 on CTA pairs (kProducerWarps)
    if constexpr (kDynamic) ring.init(kConsumerWarps + (Fuse::gather ? 3 : kProducerWarps - 1));
    mbarrier_init_fence();
  }
  // mix=R: MixedTileCursor, whose two streams warp 1 sizes here while thread 0 sets up the barriers.
  using Cursor = typename TileCursorFor<kLayout, kBlockM, kBlockN, 0, MOEJIT_TILE_BAND, kPairM>::type;  // pairs: units
  constexpr bool kMixed = MOEJIT_TILE_MIX_ROWS > 0;
  if constexpr (kMixed) {
    if (threadIdx.x / 32 == 1) {
      int heavy, total;
      Cursor::All::count_tiles(p, MOEJIT_TILE_MIX_ROWS, heavy, total);
      if (threadIdx.x == 32) mix_totals[0] = heavy, mix_totals[1] = total;
    }
  }
  if constexpr (kPairM) {
    cluster_sync();  // the peer's barriers are initialized before anything arrives on them
  } else {
    __syncthreads();
  }

  const int num_k_blocks = (p.k + kFp8BlockK - 1) / kFp8BlockK;
  const int n_scale_blocks = (p.n + 127) / 128;

  // A consumer slice's B scales (blocks, not per channel): its columns' 128-row block of the
  // group, and for 128x192 / 128x256 the next one from column `split` of the slice on (or, past N,
  // where nothing is stored, the same one again: the read stays inside B's scales). Split GLU: the
  // first half (gate rows out0 ...) takes the gate block's, the second (up rows n/2 + out0 ...)
  // the up block's; a slice past n/2 (stores nothing) reads the last gate / up block. A slice
  // wholly past N (consumer 1 of a 256-wide tile when N is ragged) reads the group's last block
  // (compute-sanitizer memcheck, H100, 2026-11-23: n0 / 128 read one block past the last group's
  // end). Returns the scale of K block 0; K block kb's is kb further.
  constexpr bool kTwoScaleBlocks = kWgN > 128 || Fuse::glu_split;
  static_assert(!kTwoScaleBlocks || Fuse::glu_split || ((kWgN == 192 || kWgN == 256) && !kSplitN),
                "two scale blocks: the 128x192 tile (n0 a multiple of 64) or 128x256 (a multiple of 256)");
  auto b_scale_source = [&](const TileCoord& t, int consumer, bool second, int n_blocks, int k_blocks) {
    const float* const group_scales =
        static_cast<const float*>(p.scale_b) + static_cast<long long>(t.group) * n_blocks * k_blocks;
    if constexpr (Fuse::glu_split) {
      const int out0 = min(split_glu_out0(t.n_block, kBlockN, kWgN, kSplitN ? consumer : 0), p.n / 2 - 1);
      return group_scales + static_cast<long long>(((second ? p.n / 2 : 0) + out0) / 128) * k_blocks;
    }
    const int n0 = t.n_block * kBlockN + (kSplitN ? consumer * kWgN : 0);
    const float* const first = group_scales + static_cast<long long>(min(n0, p.n - 1) / 128) * k_blocks;
    return kTwoScaleBlocks && second && n0 + (128 - n0 % 128) < p.n ? first + k_blocks : first;
  };
  const int warpgroup = uniform((int)(threadIdx.x / 128));
  Cursor cursor;  // pairs: units (pair_unit_tile)
  if constexpr (kMixed) cursor.set_totals(mix_totals[0], mix_totals[1]);
  const int n_tiles = (p.n + kBlockN - 1) / kBlockN;
  TileCoord tile;
  // Paired: a unit's B tile (hopper/fused_epilogue.cuh; the B map's box is a half, kBlockN / 2 rows).
  auto load_b_pair = [&](unsigned b_stage, unsigned full, int k, const TileCoord& t, int b_row, bool multicast) {
    load_b_pair_tile<kBlockN, kWgN, Fuse::glu_split>(b_stage, tma_b, full, k, t.group, t.n_block, p.n, b_row, rank, multicast);
  };

  // Registers per role. One warp walks the tiles, lane 0 issues the TMA copies and every lane its
  // share of the scale copies: 40 (24 spilled 68 bytes once the scales came with the stages, v30),
  // and the consumers get 232, which their k-loop fits now that the scales are no longer held in
  // registers across the MMAs. fuse=gather: the whole warpgroup copies rows (holding its rows'
  // chunk numbers) and scales, and beside the dynamic scheduler's ring needs 56 (48 spilled 4-44
  // bytes on 128x128); those consumers get 216 (only 128x128 and 64x256 gather with the dynamic
  // scheduler: tuning.cpp). setmaxnreg only moves the launch's 168 x 384 registers between the
  // roles: asking for more (32 + 240) left the consumers waiting in setmaxnreg.inc for ever (H100,
  // 2026-11-26).
  constexpr int kProducerRegs = Fuse::gather && kDynamic ? 56 : 40;
  constexpr int kConsumerRegs = Fuse::gather && kDynamic ? 216 : 232;
  static_assert(128 * kProducerRegs + 256 * kConsumerRegs <= 168 * 384, "setmaxnreg: more than the launch's 168 x 384 registers");
  if (warpgroup == 0) {
    warpgroup_release_registers<kProducerRegs>();
    if constexpr (Fuse::gather) {
      // The producer warpgroup walks the tiles (warp 0 fetches dynamic tile numbers, warps 1-3 read
      // them from the ring like consumer warps); thread 0 loads B by TMA and expects its bytes, every
      // thread copies its share of the tile's token rows with cp.async (hopper/gather.cuh) and
      // arrives on the full barrier when they land (noinc). Rows past the group are not copied
      // (their accumulator rows are never stored); an index outside [0, num_tokens) reads a zero row.
      GatherRowsSm90<kBlockM, 1> rows((int)threadIdx.x);
      const int k_blocks = role_blocks_of<true>(p.k, kFp8BlockK, num_k_blocks);
      const int n_blocks = role_blocks_of<true>(p.n, 128, n_scale_blocks);
      int stage = 0;
      unsigned phase = 0;
      for (int tile_iter = 0;; ++tile_iter) {
        const int tile_index = kDynamic ? ring.publish_or_take(p.tile_counter) : cluster_id + tile_iter * clusters;
        if (!cursor.seek_warp(p, tile_index, tile)) {
          if (kDynamic && threadIdx.x == 0) ring.finish(p.tile_counter, tile_index, cursor.tiles_before);
          break;
        }
        // Paired: this rank's tile of the unit (a rank without one gathers no rows: rows_left <= 0).
        bool multicast_b = false;
        if constexpr (kPairM) multicast_b = pair_unit_tile<kBlockM>(tile, (int)rank, n_tiles);
        const int a_row = tile.row_begin + tile.m_block * kBlockM;
        const int b_row = tile.group * p.n + tile.n_block * kBlockN;
        const int rows_left = tile.group_rows - tile.m_block * kBlockM;
        rows.load_tokens(f->gather_rows, a_row, rows_left, f->num_tokens, p.k);
        // Thread t copies the A scales of tile row t: its token's ([kb][num_tokens]), or zeros.
        int scale_token = -1;
        if ((int)threadIdx.x < min(rows_left, kBlockM)) scale_token = __ldg(f->gather_rows + a_row + threadIdx.x);
        if ((unsigned)scale_token >= (unsigned)f->num_tokens) scale_token = -1;
        // Threads 0-3: their B slot's offset in scale_b (32 bits: the producer has 40 registers).
        const int b_scale_offset = kChannelScalesB || threadIdx.x >= 4 ? -1
            : (int)(b_scale_source(tile, threadIdx.x / 2, threadIdx.x % 2, n_blocks, k_blocks) - static_cast<const float*>(p.scale_b));
        for (int kb = 0; kb < k_blocks; ++kb) {
          mbarrier_wait(empty_bars + 8 * stage, phase ^ 1);
          const unsigned full = full_bars + 8 * stage;
          if (threadIdx.x == 0) {
            mbarrier_arrive_expect_tx(full, kBBytes);
            if constexpr (kPairM)
              load_b_pair(b_stages + stage * kBBytes, full, kb * kFp8BlockK, tile, b_row, multicast_b);
            else if constexpr (Fuse::glu_split)
              load_b_tile<kBlockN, kWgN, true>(b_stages + stage * kBBytes, tma_b, full, kb * kFp8BlockK, tile.group,
                                               tile.n_block, p.n);
            else
              tma_load_2d(b_stages + stage * kBBytes, tma_b, full, kb * kFp8BlockK, b_row);
          }
          rows.copy_k_block(a_stages + stage * kABytes, p.a, p.k, kb * kFp8BlockK);
          copy_stage_scales_fp8<kBlockM, 128>(scale_stages + stage * kScaleStageBytes, p.scale_a,
                                              p.scale_a + static_cast<long long>(kb) * f->num_tokens + scale_token,
                                              scale_token < 0 ? 0 : kBlockM, (int)threadIdx.x,
                                              b_scale_offset < 0 ? nullptr : static_cast<const float*>(p.scale_b) + b_scale_offset + kb);
          cp_async_mbarrier_arrive_noinc(full);
          if (++stage == kStages) stage = 0, phase ^= 1;
        }
      }
      // No lane exits with copies (and their barrier arrivals) still in flight (as the bf16 kernel).
      cp_async_wait_all_sm90();
    } else if (threadIdx.x < 32 * kProducerWarps) {
      // Warp 0 walks the groups 32 per step (seek_warp, as in the 4-bit kernel: a one-thread walk
      // could not keep the stages full at decode); its lane 0 issues the TMA copies (A, B and A's
      // scales), lanes 0-3 copy a B slot each. CTA pairs spread that over three warps that walk
      // the same tiles (on the dynamic scheduler warps 1-2 read the numbers from the ring), each
      // waiting on the empty barriers itself: alone, a pair's warp took 1058-1138 cycles per K
      // block, past the MMAs' 768 (docs/perf.md v57-v58). Warp 0 keeps A, A's scales and the
      // expect_tx of every byte, warp 1 issues B, warp 2 copies the B slots. B may land before
      // warp 0's expect_tx: the tx-count goes negative while warp 0's arrival is still pending, so
      // the phase cannot complete early. Single CTAs keep one warp: three saved cycles there but
      // not time (the clock fell at the power cap, v58).
      const int k_blocks = role_blocks_of<kSplitTail || kStaged>(p.k, kFp8BlockK, num_k_blocks);
      const int n_blocks = role_blocks_of<kSplitTail || kStaged>(p.n, 128, n_scale_blocks);
      const int lane = (int)threadIdx.x % 32;
      const int warp = (int)threadIdx.x / 32;
      const bool issues_a = kProducerWarps == 1 || warp == 0;
      const bool issues_b = kProducerWarps == 1 || warp == 1;
      const bool copies_b_slots = kProducerWarps == 1 || warp == 2;
      int stage = 0;
      unsigned phase = 0;
      for (int tile_iter = 0;; ++tile_iter) {
        // Warp 0 takes the number; with three producer warps, warps 1-2 read it from the ring.
        const int unit_index = !kDynamic ? cluster_id + tile_iter * clusters
                               : kProducerWarps > 1 ? ring.publish_or_take(p.tile_counter)
                                                    : ring.publish_warp(p.tile_counter);
        SplitUnit unit{unit_index, 0, k_blocks, -1};
        if constexpr (kSplitTail) unit = split_unit(p, unit_index, k_blocks);
        if (!cursor.seek_warp(p, unit.tile, tile)) {
          const int units = kSplitTail ? split_unit_count(p, cursor.tiles_before, k_blocks) : cursor.tiles_before;
          if (kDynamic && threadIdx.x == 0) ring.finish(p.tile_counter, unit_index, units);
          break;
        }
        bool multicast_b = false;  // this unit's B shared by the pair (pair_unit_tile)
        if constexpr (kPairM) multicast_b = pair_unit_tile<kBlockM>(tile, (int)rank, n_tiles);
        const int a_row = tile.row_begin + tile.m_block * kBlockM;
        const int b_row = tile.group * p.n + tile.n_block * kBlockN;
        const float* const b_scales = kChannelScalesB || lane >= 4 || !copies_b_slots
            ? nullptr : b_scale_source(tile, lane / 2, lane % 2, n_blocks, k_blocks);
        for (int kb = unit.kb_begin; kb < unit.kb_end; ++kb) {
          mbarrier_wait(empty_bars + 8 * stage, phase ^ 1);  // the whole warp waits
          const unsigned full = full_bars + 8 * stage;
          if (copies_b_slots) {
            copy_stage_b_scale_fp8<kBlockM>(scale_stages + stage * kScaleStageBytes, lane, b_scales ? b_scales + kb : nullptr);
            cp_async_mbarrier_arrive_noinc(full);
          }
          if (lane == 0 && issues_a) {
            mbarrier_arrive_expect_tx(full, kABytes + kBBytes + fp8_scale_a_box_bytes<kBlockM>());
            // The K block's A scales (scale_a[kb * total_rows + a_row ..], host-checked to fit an
            // int), from the 16-byte row holding the first: rows past the group bring the next
            // group's (finite; their accumulator rows are never stored), past the array zeros.
            tma_load_2d(scale_stages + stage * kScaleStageBytes, tma_s, full, 0, (kb * p.total_rows + a_row) >> 2);
            tma_load_2d(a_stages + stage * kABytes, tma_a, full, kb * kFp8BlockK, a_row);
          }
          if (lane == 0 && issues_b) {
            if constexpr (kPairM)
              load_b_pair(b_stages + stage * kBBytes, full, kb * kFp8BlockK, tile, b_row, multicast_b);
            else if constexpr (Fuse::glu_split)
              load_b_tile<kBlockN, kWgN, true>(b_stages + stage * kBBytes, tma_b, full, kb * kFp8BlockK, tile.group,
                                               tile.n_block, p.n);
            else
              tma_load_2d(b_stages + stage * kBBytes, tma_b, full, kb * kFp8BlockK, b_row);
          }
          __syncwarp();
          if (++stage == kStages) stage = 0, phase ^= 1;
        }
      }
      cp_async_wait_all_sm90();  // no lane exits with scale copies (and their arrivals) in flight
    }
  } else {
    warpgroup_claim_registers<kConsumerRegs>();
    const int k_blocks = role_blocks_of<kSplitTail || kStaged>(p.k, kFp8BlockK, num_k_blocks);
    const int n_blocks = role_blocks_of<kSplitTail || kStaged>(p.n, 128, n_scale_blocks);
    const int consumer = warpgroup - 1;
    const int lane = threadIdx.x % 32;
    const int warp_in_group = (threadIdx.x / 32) % 4;
    const unsigned a_offset = kSplitN ? 0u : consumer * 64 * kRowBytes;
    const unsigned b_offset = kSplitN ? consumer * kWgN * kRowBytes : 0u;
    const int tile_row0 = kSplitN ? 0 : consumer * 64;
    const int tile_col0 = kSplitN ? consumer * kWgN : 0;
    // A stage goes back to this CTA's producer and, paired, to the peer's (which multicasts B into
    // it), by the warpgroup's first thread after a named barrier over the warpgroup, which orders
    // every thread's LDS reads of the stage's scales (and its wgmma.wait) before that arrival
    // (bar.sync orders memory among its threads); no cost measured against lane 0 per warp. racecheck
    // does not follow a barrier into another thread's mbarrier arrival and still reports the reads
    // against the producer's next copies; every thread arriving satisfies it but took 1.03-1.17x
    // the time (docs/perf.md v30). Barrier 1 + consumer, the warpgroup's epilogue barrier.
    const unsigned peer_empty_offset = kPairM ? cluster_map(empty_bars, rank ^ 1u) - empty_bars : 0u;
    auto release_stage = [&](int st) {
      named_barrier_sync<128>(1 + consumer);
      if (threadIdx.x % 128 == 0) {
        mbarrier_arrive(empty_bars + 8 * st);
        if constexpr (kPairM) mbarrier_arrive_remote_stage(empty_bars + 8 * st + peer_empty_offset);
      }
    };

    // The descriptors' high words are constants; their low words (the start address) go through
    // uniform(), as do kb_begin / kb_end and the tile below.
    const unsigned long long a_desc0 = wgmma_desc_sw128(a_stages + a_offset);
    const unsigned long long b_desc0 = wgmma_desc_sw128(b_stages + b_offset);
    const unsigned long long a_hi = a_desc0 & ~0xFFFFFFFFull, b_hi = b_desc0 & ~0xFFFFFFFFull;
    const unsigned a_lo0 = uniform((unsigned)a_desc0), b_lo0 = uniform((unsigned)b_desc0);
    float acc[kAccRegs];
    float part[kPartRegs];
    // This thread's first A-scale slot in stage 0 (its accumulator rows lane / 4 and + 8 of the warp's
    // 16), as a shared address kept in a register: the empty asm keeps ptxas from recomputing it from
    // the thread index in every k-block (7 instructions, SASS of 128x192 before this).
    unsigned sa_addr0 = smem_addr(scale_smem) + 4u * (unsigned)(tile_row0 + warp_in_group * 16 + lane / 4);
    asm volatile("" : "+r"(sa_addr0));
    int stage = 0;
    unsigned phase = 0;
    unsigned c_state = 0;  // staged epilogue: the chunk buffers' state (store_accumulators_staged)
    for (int tile_iter = 0;; ++tile_iter) {
      const int unit_index = kDynamic ? ring.take(lane) : cluster_id + tile_iter * clusters;
      SplitUnit unit{unit_index, 0, k_blocks, -1};
      if constexpr (kSplitTail) unit = split_unit(p, unit_index, k_blocks);
      const int kb_begin = uniform(unit.kb_begin), kb_end = uniform(unit.kb_end);
      if (!cursor.seek_warp(p, unit.tile, tile)) break;
      tile.group = uniform(tile.group);
      tile.m_block = uniform(tile.m_block);
      tile.n_block = uniform(tile.n_block);
      tile.row_begin = uniform(tile.row_begin);
      tile.group_rows = uniform(tile.group_rows);
      if constexpr (kPairM) pair_unit_tile<kBlockM>(tile, (int)rank, n_tiles);  // as the producer: group_rows 0 = no tile
      if (!kSplitN && tile.m_block * kBlockM + tile_row0 >= tile.group_rows) {
        // No rows for this consumer: only hand the stages back. A separate loop: a wgmma under a
        // divergent branch makes ptxas serialize all of them (C7520).
        for (int kb = kb_begin; kb < kb_end; ++kb) {
          mbarrier_wait(full_bars + 8 * stage, phase);
          release_stage(stage);
          if (++stage == kStages) stage = 0, phase ^= 1;
        }
        continue;
      }
      const int m_warp = tile.m_block * kBlockM + tile_row0 + warp_in_group * 16;  // group-local
      const int a_row = tile.row_begin + tile.m_block * kBlockM;  // the tile's first row of A (its scales' shift)
      const int n0 = tile.n_block * kBlockN + tile_col0;
      // 128x192: columns [split, 192) of the slice take the second scale block's scale (see
      // b_scale_source); the split GLU's second half the up block's.
      const int split = Fuse::glu_split ? kWgN / 2 : kTwoScaleBlocks ? 128 - n0 % 128 : kWgN;
      if constexpr (Fuse::bias && !kChannelScalesB) {
        init_acc_with_bias<kBlockN, kWgN, Fuse::glu_split>(acc, *f, tile.group, p.n, tile.n_block * kBlockN, tile_col0, lane);
      } else {
#pragma unroll
        for (int i = 0; i < kAccRegs; ++i) acc[i] = 0.f;
      }

      // One K block from ring slot stage_u: a run-time value (through uniform()), or a constant where
      // the caller unrolls a whole trip through the ring; the caller advances stage and phase.
      auto k_block = [&](int kb, unsigned stage_u) {
        mbarrier_wait(full_bars + 8 * stage_u, phase);
        // fuse=gather: A came through the generic proxy (cp.async); order it before wgmma's reads.
        if constexpr (Fuse::gather) fence_proxy_async_shared();
        // Descriptors advanced from the first stage's by 32-bit adds on their low words (the
        // start-address field never carries into the high word), the stage's offset through
        // uniform(): no 64-bit adds (rebuilding them from the address for each k32 step cost ~40
        // instructions per k-block before v8).
        const unsigned a_lo = a_lo0 + stage_u * (kABytes >> 4);
        const unsigned b_lo = b_lo0 + stage_u * (kBBytes >> 4);
        // The K block's scales from the stage: this thread's two accumulator rows (h = 0, 1: lane / 4
        // and lane / 4 + 8 of the warp's 16), `shift` floats on where TMA brought them
        // (fp8_scale_shift; gathered rows' come unshifted), and the slice's B slots. Read before the
        // MMAs, used after them.
        const float* const scales = scale_smem + stage_u * (kScaleStageBytes / 4);
        const unsigned shift = Fuse::gather ? 0u : (unsigned)fp8_scale_shift(kb, p.total_rows, a_row);
        float sa0, sa1;
        asm volatile("ld.shared.f32 %0, [%2];\n\tld.shared.f32 %1, [%2+32];"
                     : "=f"(sa0), "=f"(sa1)
                     : "r"(sa_addr0 + stage_u * kScaleStageBytes + 4u * shift)
                     : "memory");
        const float* const b_slots = scales + fp8_scale_b_slots_float<kBlockM>() + (kSplitN ? 2 * consumer : 0);
        const float sb = kChannelScalesB ? 1.f : b_slots[0];
        const float sb_hi = kTwoScaleBlocks && !kChannelScalesB ? b_slots[1] : sb;
#pragma unroll
        for (int half = 0; half < kHalves; ++half) {
          const unsigned b_half_lo = b_lo + (unsigned)half * ((kPartN * kRowBytes) >> 4);
          wgmma_fence_operands(part);
          wgmma_fence();
#pragma unroll
          for (int k = 0; k < kFp8BlockK / 32; ++k)
            Mma::mma(part, a_hi | (a_lo + 2u * k), b_hi | (b_half_lo + 2u * k), k != 0);
          wgmma_commit();
          wgmma_wait<0>();
          wgmma_fence_operands(part);
          if (half == kHalves - 1) release_stage(stage_u);
          // Register 4j + 2h + e of the m64nN layout belongs to row lane/4 + 8h, column 8j + ...
          // 128x192: registers from column `split` on take the next block's scale (hi). The slice
          // starts at a multiple of 64 (n0 = n_block * 192), so split is 64 or 128: columns [0, 64)
          // are always lo, [128, 192) always hi, and only [64, 128) depends on split: one select
          // per k-block instead of one per register group (SASS: 17 FSEL + 28 FMUL fewer).
          // 128x256: the first half is lo, the second hi. With one block per slice every column is
          // lo and the second scale folds away.
          const float lo0 = sa0 * sb, lo1 = sa1 * sb;
          float mid0 = lo0, mid1 = lo1, hi0 = lo0, hi1 = lo1;
          if constexpr (kTwoScaleBlocks) {
            hi0 = sa0 * sb_hi, hi1 = sa1 * sb_hi;
            mid0 = split > 64 ? lo0 : hi0, mid1 = split > 64 ? lo1 : hi1;
          }
#pragma unroll
          for (int j = 0; j < kPartRegs / 4; ++j) {
            const int col = half * kPartN + 8 * j;  // the slice's column of register group j
            const float scale0 = col < 64 ? lo0 : col < 128 ? mid0 : hi0;
            const float scale1 = col < 64 ? lo1 : col < 128 ? mid1 : hi1;
            float* const out = acc + half * kPartRegs + 4 * j;
            out[0] = fmaf(part[4 * j + 0], scale0, out[0]);
            out[1] = fmaf(part[4 * j + 1], scale0, out[1]);
            out[2] = fmaf(part[4 * j + 2], scale1, out[2]);
            out[3] = fmaf(part[4 * j + 3], scale1, out[3]);
          }
        }
      };
      // Whole trips through the ring from slot 0 take the slot as a compile-time constant: the
      // descriptor, scale and barrier addresses fold into immediates (SASS per K block per consumer
      // warp 197 -> 185 on 128x256, 159 -> 141 on the 128x192 pair; docs/perf.md v51). The K blocks
      // before slot 0 comes round and after the last whole trip take the run-time slot. Not where
      // the unrolled trip spills at 168 registers: split=tail (72 bytes on 128x192) and C quantized
      // to E4M3 on dynamic CTA pairs (96 bytes on 128x256 with a split SwiGLU).
      constexpr bool kUnrolledTrips = !kSplitTail && !(kTypeC == kE4M3 && kPairM && kDynamic);
      for (int kb = kb_begin; kb < kb_end;) {
        if (kUnrolledTrips && stage == 0 && kb_end - kb >= kStages) {
#pragma unroll
          for (int st = 0; st < kStages; ++st) k_block(kb + st, (unsigned)st);
          kb += kStages;
          phase ^= 1;
        } else {
          k_block(kb, uniform((unsigned)stage));
          ++kb;
          if (++stage == kStages) stage = 0, phase ^= 1;
        }
      }
      // A piece of a split tile: only the last piece to finish scales and stores (barriers 3 and 4).
      if constexpr (kSplitTail) {
        if (unit.piece >= 0 && !split_reduce(p, unit, consumer, acc, (int)threadIdx.x % 128, 3 + consumer)) continue;
      }
      if constexpr (kChannelScalesB)
        scale_columns_fp8<kWgN, Fuse::bias>(acc, static_cast<const float*>(p.scale_b), f, tile.group, p.n, n0, lane);
      const int m_first = tile.m_block * kBlockM + tile_row0;  // the slice's first group-local row
      const unsigned my_staging = c_staging + consumer * kCStageBytesPerConsumer;
      if constexpr (Fuse::epilogue || kTypeC == kE4M3) {
        // Unstaged: direct stores (tma_c and the barrier id go unused). c=e4m3: quantized there.
        // c=e4m3 staged for TMA stores on the static scheduler only (fused_epilogue).
        fused_epilogue<kTypeC, kWgN, kStaged, Fuse, kSplitN, !kDynamic>(p, *f, tma_c, acc, my_staging, tile.group, tile.row_begin,
                                                    tile.group_rows, m_first, min(tile.group_rows - m_first, 64),
                                                    tile.n_block * kBlockN, tile_col0, warp_in_group, lane,
                                                    1 + consumer, c_state);
      } else if constexpr (kStaged) {
        store_accumulators_staged<kTypeC, kWgN>(p, tma_c, acc, my_staging, tile.row_begin + m_first,
                                                min(tile.group_rows - m_first, 64), n0, warp_in_group, lane,
                                                1 + consumer, c_state);
      } else {
        store_accumulators<kTypeC, kWgN>(p, acc, tile.row_begin, tile.group_rows, m_warp, n0, lane);
      }
    }
    // Shared memory must outlive the TMA stores' reads of it.
    if (kStaged && warp_in_group == 0 && lane == 0) tma_store_wait_all();
  }
  // Paired: no CTA exits while its peer may still multicast into it or arrive on its barriers.
  if constexpr (kPairM) cluster_sync();
}

}  // namespace moejit::hopper
