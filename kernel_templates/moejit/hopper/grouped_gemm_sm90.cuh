// Grouped GEMM for Hopper (sm_90a): C[row, n] = sum_k A[row, k] * B[group, n, k], FP32 accumulation.
//
// Persistent, warp-specialized: warpgroup 0 is the producer (one thread issues every TMA load
// into a kStages-deep ring of shared-memory stages), warpgroups 1 and 2 are consumers that run
// wgmma on each stage and write their part of the tile to C.
//   kBlockM == 128: consumer i owns rows [64 i, 64 i + 64) of the tile, all kBlockN columns.
//   kBlockM == 64:  both consumers share the 64 rows, consumer i owns columns
//                   [i kBlockN/2, (i+1) kBlockN/2), so small groups waste half as many rows
//                   (measured: no faster than 128-row tiles on the memory-bound shapes tried).
// Tiles come from GroupTileCursor (common/scheduler.cuh). The static scheduler lets producer and
// consumers compute the same tile sequence independently; the dynamic one has the producer fetch
// each tile number from the global counter and hand it to the consumers through a small
// shared-memory ring guarded by mbarriers.
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
#include "moejit/hopper/cluster.cuh"
#include "moejit/hopper/fused_epilogue.cuh"
#include "moejit/hopper/gather.cuh"
#include "moejit/hopper/tail_rows.cuh"

namespace moejit::hopper {

constexpr int kThreads = 384;  // 1 producer warpgroup + 2 consumer warpgroups
constexpr int kBlockK = 64;    // one 128-byte swizzle row of 16-bit elements
constexpr int kTileRing = 4;   // dynamic scheduler: tile numbers in flight between producer and consumers
constexpr int kProducerRegs = 40;
constexpr int kConsumerRegs = 232;  // 128 x 40 + 256 x 232 = 64512 <= 65536 registers per SM

constexpr int kMaxSmemBytes = 232448;  // 227 KB per block on sm_90

// Dynamic shared memory in bytes; the host sets the launch's dynamic size to exactly this:
//   kStages * (kBlockM + kBlockN) * 128   pipeline stages (a 64-wide K slice of A and B tiles, 2-byte elements)
//   + 2048                                 1024 to align the stages to 1024 bytes (128B swizzle
//                                          atoms, wgmma descriptors) + barriers and the tile ring
//   + 32768 where it still fits            C staging for the TMA-store epilogue (epilogue.cuh):
//                                          two 8 KB chunk buffers per consumer warpgroup
// Must be <= 232448 (227 KB), e.g. 128x256: 4 stages (staged C), 128x128: 6 stages (staged C),
// 64x256: 5 stages (direct stores).
// Absorbed tail rows (kTailRows, KernelSpec::tail): each stage holds kTailRows more rows of A, and
// the C staging one 8 KB chunk per consumer (128x256 at 4 stages: 231424 bytes, as without).
template <int kBlockM, int kBlockN, int kStages, int kTailRows = 0>
__host__ __device__ constexpr bool c_staged() {
  return kTailRows != 0 ||
         kStages * (kBlockM + kBlockN) * kBlockK * 2 + 2048 + 2 * (int)kCStageBytesPerConsumer <= kMaxSmemBytes;
}

// C staging of one consumer warpgroup: two chunk buffers, or one beside absorbed tail rows.
template <int kTailRows>
__host__ __device__ constexpr unsigned c_staging_per_consumer() {
  return kTailRows != 0 ? kCStageChunkBytes : kCStageBytesPerConsumer;
}

template <int kBlockM, int kBlockN, int kStages, int kTypeAB, int kTypeC, int kLayout, int kScheduler, int kTailRows = 0>
__host__ __device__ constexpr int smem_bytes() {
  return kStages * (kBlockM + kBlockN + kTailRows) * kBlockK * 2 + 2048 +
         (c_staged<kBlockM, kBlockN, kStages, kTailRows>() ? 2 * (int)c_staging_per_consumer<kTailRows>() : 0);
}

// kClusterN == 2: CTA pairs (a 1x2 cluster) take the two N tiles 2j, 2j+1 of one (group, M tile):
// each loads one 64-row half of the shared A tile and multicasts it to both, so a CTA pulls
// 40 KB instead of 48 KB per k-block from L2. Stage slots are then freed by both CTAs' consumers
// (the empty barriers count 16 warps, half of them arriving from the peer), and the dynamic
// scheduler's tile numbers come from rank 0, which writes them into both CTAs' rings.
//
// kClusterM == 2 (opt-in, a tuner candidate; its GPU tests pass): CTA pairs (a 2x1 cluster) take the two M
// tiles 2i, 2i+1 of one (group, N tile) and share the larger operand, B: each loads one half of the
// B tile (kBlockN/2 rows: the B map's box; split GLU: rank 0 the gate box, rank 1 the up box) and
// multicasts it to both, so a CTA pulls 16 + 16 = 32 KB per 128x256x64 k-block. A group's odd last
// M tile goes to both ranks split along N (v32: GroupTileCursor's pair units, pair_unit_tile),
// each loading its own A and both halves of its own B; until v32 rank 1 idled through it. Rank 1
// is without a tile only past the last N tile of such a unit (it loads valid memory, passes the
// stages on and stores nothing). Barriers and the tile ring work as for 1x2.
//
// Fuse (common/fusion.cuh) and f (null without fusions): the fusions (docs/design.md, "Fusions"). fuse=gather: the whole
// producer warpgroup copies A row by row with cp.async into the swizzled stage (tma_a is unused;
// on 2x1 pairs each CTA gathers its own rows and B is shared as above; 1x2 would multicast A: none);
// fuse=bias: the accumulators start at the bias; glu=split: B comes in two boxes per consumer slice (gate rows,
// up rows; tma_b has kWgN/2-row boxes); the epilogue runs in fused_epilogue.cuh.
//
// kSplitTail (split=tail, unfused single CTAs): the work units are those of common/split_tail.cuh;
// a unit that is a piece of a tile loads and multiplies only its K blocks, and its consumers
// exchange partial sums through the workspace (split_reduce) before the last piece stores C.
//
// kTailRows (tail=24, 128x256 on 1x1, 1x2 or 2x1, any fusion but atomics, e.g. an MoE layer's gathered
// GEMM1 or its GEMM2): a group's last whole 128-row tile also takes the up to kTailRows rows past it
// (GroupTileCursor's kTailRows), loaded by tma_tail (kTailRows-row boxes; gathered: as the tile's
// rows, GatherTailRowsSm90) into the stage after the tile's 128 rows and multiplied with the roles
// swapped on the consumer's B slice (hopper/tail_rows.cuh) in a k-loop of its own.

template <int kBlockM, int kBlockN, int kStages, int kTypeAB, int kTypeC, int kLayout, int kScheduler,
          int kClusterN, class Fuse, int kClusterM = 1, bool kSplitTail = false, int kTailRows = 0>
__device__ __forceinline__ void grouped_gemm(const GroupedGemmParams& p, const TmaDescriptor& tma_a,
                                             const TmaDescriptor& tma_b, const TmaDescriptor& tma_c,
                                             const FusionParams* f, const TmaDescriptor* tma_tail = nullptr) {
  static_assert(kBlockM == 64 || kBlockM == 128, "kBlockM must be 64 or 128");
  static_assert(kBlockN == 64 || kBlockN == 128 || kBlockN == 192 || kBlockN == 256,
                "kBlockN must be 64, 128, 192 or 256 (TMA box <= 256 rows; wgmma_ops.cuh widths)");
  static_assert(kStages >= 2, "need at least 2 stages");
  static_assert(smem_bytes<kBlockM, kBlockN, kStages, kTypeAB, kTypeC, kLayout, kScheduler>() <= kMaxSmemBytes,
                "stages do not fit in 227 KB of shared memory");
  static_assert(kTypeAB == kBF16 || kTypeAB == kF16, "A/B must be bf16 or f16");
  static_assert(kTypeC == kBF16 || kTypeC == kF16 || kTypeC == kF32, "C must be bf16, f16 or f32");
  static_assert((kClusterM == 1 && kClusterN == 1) || (kClusterM * kClusterN == 2 && kBlockM == 128),
                "clusters: 1x1, or 1x2 / 2x1 with 128-row tiles");
  static_assert(!(Fuse::gather && kClusterN != 1), "gathered A rows are not multicast: fuse=gather pairs share B (2x1) or none");
  static_assert(!kSplitTail || (!Fuse::any && kClusterM * kClusterN == 1),
                "split=tail: unfused single-CTA kernels only (a bias would be added once per piece)");
  static_assert(kTailRows == 0 || (kTailRows == 24 && kBlockM == 128 && kBlockN == 256 && !kSplitTail && !Fuse::atomic &&
                                   kTypeC != kE4M3),
                "absorbed tail rows: 24, 128x256 (single CTAs or pairs), no split, no atomic combine, 16-bit or fp32 C");

  constexpr bool kSplitN = kBlockM == 64;
  constexpr int kWgN = kSplitN ? kBlockN / 2 : kBlockN;  // columns one consumer warpgroup computes
  using Mma = WgmmaOp<kWgN, kTypeAB == kF16>;
  constexpr int kAccRegs = Mma::kRegs;
  using Acc = WgmmaAccRegs<kAccRegs>;  // the consumers' accumulators, as named PTX registers
  // The accumulators live in named PTX registers (a faster compile, perf.md). Unfused kernels
  // zero them once and let each tile's first wgmma overwrite them (run-time scale-d). Fused ones
  // set them at every tile's start (zero, or the bias) and always accumulate: with a run-time
  // scale-d ptxas must keep the named registers live through the epilogue beside their C++
  // copy, and the heavier fused epilogues spilled (240 bytes at 128x256, fuse=weight,act=silu).
  // split=tail likewise: its exchange holds all of acc (752 bytes spilled with a run-time scale-d).
  constexpr bool kSetAccPerTile = Fuse::any || kSplitTail;
  constexpr unsigned kRowBytes = kBlockK * 2;  // 128
  constexpr unsigned kABytes = kBlockM * kRowBytes;
  constexpr unsigned kAHalfBytes = 64 * kRowBytes;  // A is loaded in 64-row boxes
  constexpr unsigned kBBytes = kBlockN * kRowBytes;
  constexpr unsigned kTailBytes = kTailRows * kRowBytes;  // absorbed tail rows, after the tile's A in its stage
  constexpr unsigned kAStageBytes = kABytes + kTailBytes;
  constexpr unsigned kCStagePerConsumer = c_staging_per_consumer<kTailRows>();
  constexpr int kCBuffers = kTailRows != 0 ? 1 : 2;
  constexpr unsigned kStageTxBytes = kABytes + kBBytes;
  constexpr int kConsumerWarps = 8;
  constexpr bool kDynamic = kScheduler == kSchedulerDynamic;
  constexpr bool kStaged = c_staged<kBlockM, kBlockN, kStages, kTailRows>();
  constexpr bool kPairN = kClusterN == 2;  // 1x2: the pair shares A
  constexpr bool kPairM = kClusterM == 2;  // 2x1: the pair shares B
  constexpr bool kPaired = kPairN || kPairM;
  const unsigned rank = kPaired ? cluster_ctarank() : 0u;
  const unsigned peer = rank ^ 1u;
  const int cluster_id = kPaired ? cluster_id_x() : (int)blockIdx.x;
  const int clusters = kPaired ? cluster_count_x() : (int)gridDim.x;

  Acc::declare();  // in the kernel's entry block, so that the declaration precedes every use in the PTX
  if constexpr (kTailRows != 0) TailAccRegs::declare();

  // Layout: [A stages][B stages][C staging, if kStaged][full bars][empty bars][tile full bars]
  //         [tile empty bars][tile ring]
  extern __shared__ unsigned char moejit_smem[];
  const unsigned smem_base = smem_addr(moejit_smem);
  const unsigned a_stages = (smem_base + 1023u) & ~1023u;
  const unsigned b_stages = a_stages + kStages * kAStageBytes;
  const unsigned c_staging = b_stages + kStages * kBBytes;
  const unsigned full_bars = c_staging + (kStaged ? 2 * kCStagePerConsumer : 0u);
  const unsigned empty_bars = full_bars + 8 * kStages;
  const unsigned tile_full_bars = empty_bars + 8 * kStages;
  const unsigned tile_empty_bars = tile_full_bars + 8 * kTileRing;
  const unsigned tile_ring_addr = tile_empty_bars + 8 * kTileRing;
  volatile int* tile_ring = reinterpret_cast<volatile int*>(moejit_smem + (tile_ring_addr - smem_base));

  if (threadIdx.x == 0) {
    tma_prefetch_descriptor(tma_a);
    tma_prefetch_descriptor(tma_b);
    if constexpr (kStaged) tma_prefetch_descriptor(tma_c);
    for (int s = 0; s < kStages; ++s) {
      // fuse=gather by cp.async: + one arrival per producer thread (when its copies have landed).
      mbarrier_init(full_bars + 8 * s, Fuse::gather && !Fuse::gather_tma ? 1 + 128 : 1);
      mbarrier_init(empty_bars + 8 * s, kConsumerWarps * (kPaired ? 2 : 1));
    }
    for (int r = 0; r < kTileRing; ++r) {
      mbarrier_init(tile_full_bars + 8 * r, 1);
      // Paired: rank 0's slots are read by both CTAs' consumer warps and rank 1's producer.
      // fuse=gather: also by producer warps 1-3 (of both CTAs, paired), which gather rows of A.
      constexpr int kGatherReaders = Fuse::gather ? 3 : 0;
      mbarrier_init(tile_empty_bars + 8 * r,
                    kPaired ? 2 * (kConsumerWarps + kGatherReaders) + 1 : kConsumerWarps + kGatherReaders);
    }
    mbarrier_init_fence();
  }
  // 1x2: the cursor walks (group, M tile, pair of N tiles); this CTA's N tile is 2 j + rank.
  // 2x1: it walks pair units (GroupTileCursor's kPairs): M tiles 2 i + rank of a (group, N tile), or
  // a group's odd last M tile at N tiles 2 j + rank (pair_unit_tile).
  // mix=R: MixedTileCursor, whose two streams warp 1 sizes here while thread 0 sets up the barriers.
  using Cursor = typename TileCursorFor<kLayout, kBlockM, kBlockN * kClusterN, kTailRows, MOEJIT_TILE_BAND, kPairM>::type;
  constexpr bool kMixed = MOEJIT_TILE_MIX_ROWS > 0;
  if constexpr (kMixed) {
    if (threadIdx.x / 32 == 1) {
      int heavy, total;
      Cursor::All::count_tiles(p, MOEJIT_TILE_MIX_ROWS, heavy, total);
      if (threadIdx.x == 32) mixed_order_totals()[0] = heavy, mixed_order_totals()[1] = total;
    }
  }
  if constexpr (kPaired) {
    cluster_sync();  // the peer's barriers are initialized before anything arrives on them
  } else {
    __syncthreads();
  }

  const int num_k_blocks = (p.k + kBlockK - 1) / kBlockK;
  const int warpgroup = threadIdx.x / 128;
  Cursor cursor;
  if constexpr (kMixed) cursor.set_totals(mixed_order_totals()[0], mixed_order_totals()[1]);
  const int n_tiles = (p.n + kBlockN - 1) / kBlockN;
  TileCoord tile;

  if (warpgroup == 0) {
    // ---------------- producer ----------------
    warpgroup_release_registers<kProducerRegs>();
    // fuse=gather: the whole warpgroup issues the row loads; thread 0 does everything else.
    const bool producer_leader = !Fuse::gather || threadIdx.x == 0;  // true at compile time without gather
    if (Fuse::gather || threadIdx.x == 0) {
      int stage = 0;
      unsigned phase = 0;
      int ring_slot = 0;
      unsigned ring_phase = 0;
      for (int tile_iter = 0;; ++tile_iter) {
        int tile_index;
        if constexpr (kDynamic) {
          const unsigned slot_full = tile_full_bars + 8 * ring_slot, slot_empty = tile_empty_bars + 8 * ring_slot;
          if constexpr (Fuse::gather) tile_index = 0;
          if (!producer_leader) {
            // fuse=gather: lane 0 of warps 1-3 reads the ring like a consumer warp (paired: releasing
            // rank 0's slot); every lane takes its warp's lane 0's tile number below.
            if (threadIdx.x % 32 == 0) {
              if constexpr (kPaired) {
                mbarrier_wait_cluster(slot_full, ring_phase);
                tile_index = tile_ring[ring_slot];
                mbarrier_arrive_remote_after_read(cluster_map(slot_empty, 0), tile_index);
              } else {
                mbarrier_wait(slot_full, ring_phase);
                tile_index = tile_ring[ring_slot];
                mbarrier_arrive(slot_empty);
              }
            }
          } else if (rank == 0) {
            tile_index = fetch_next_tile(p.tile_counter);
            if constexpr (kPaired) {
              mbarrier_wait_cluster(slot_empty, ring_phase ^ 1);
              st_shared_cluster(cluster_map(tile_ring_addr + 4 * ring_slot, peer), tile_index);
              mbarrier_arrive_cluster(cluster_map(slot_full, peer));
            } else {
              mbarrier_wait(slot_empty, ring_phase ^ 1);
            }
            tile_ring[ring_slot] = tile_index;
            mbarrier_arrive(slot_full);
          } else {
            mbarrier_wait_cluster(slot_full, ring_phase);
            tile_index = tile_ring[ring_slot];
            mbarrier_arrive_remote_after_read(cluster_map(slot_empty, 0), tile_index);
          }
          if constexpr (Fuse::gather) tile_index = __shfl_sync(0xffffffffu, tile_index, 0);
          if (++ring_slot == kTileRing) ring_slot = 0, ring_phase ^= 1;
        } else {
          tile_index = cluster_id + tile_iter * clusters;
        }
        // Without split=tail a unit is a whole tile (kb_begin = 0, kb_end = num_k_blocks at compile time).
        const int unit_index = tile_index;
        int kb_begin = 0, kb_end = num_k_blocks;
        if constexpr (kSplitTail) {
          const SplitUnit unit = split_unit(p, unit_index, num_k_blocks);
          tile_index = unit.tile, kb_begin = unit.kb_begin, kb_end = unit.kb_end;
        }
        if (!cursor.seek(p, tile_index, tile)) {
          // Every fetcher's last fetch lands past the end; the last of them resets the counter.
          const int units = kSplitTail ? split_unit_count(p, cursor.tiles_before, num_k_blocks) : cursor.tiles_before;
          if (kDynamic && rank == 0 && producer_leader && unit_index == units + clusters - 1) atomicExch(p.tile_counter, 0);
          break;
        }
        bool multicast_b = true;  // 2x1: this unit's B shared by the pair (pair_unit_tile)
        if constexpr (kPairM) multicast_b = pair_unit_tile<kBlockM, kTailRows>(tile, (int)rank, n_tiles);
        const int n_block = kPairN ? tile.n_block * 2 + (int)rank : tile.n_block;
        const bool has_b = !kPairN || n_block * kBlockN < p.n;  // 1x2: odd N-tile count leaves rank 1 idle
        // 2x1: a rank without a tile (pair_unit_tile: group_rows 0) loads B only.
        const bool has_a = !kPairM || tile.m_block * kBlockM < tile.group_rows;
        const int a_row = tile.row_begin + tile.m_block * kBlockM;
        const int b_row = tile.group * p.n + n_block * kBlockN;
        // A 128-row tile whose group ends in its first half needs only that half of A.
        const bool a_upper = kBlockM == 128 && tile.m_block * kBlockM + 64 < tile.group_rows;
        // Absorbed tail rows: the group's last whole tile also takes the up to kTailRows rows after it.
        const int rows_after = tile.group_rows - (tile.m_block + 1) * kBlockM;
        const bool has_tail = kTailRows != 0 && rows_after > 0 && rows_after <= kTailRows;
        const unsigned tx_bytes = kPairM ? (has_a ? (a_upper ? kABytes : kAHalfBytes) : 0u) + kBBytes +
                                               (has_tail ? kTailBytes : 0u)
                                         : (a_upper ? kABytes : kAHalfBytes) + (has_b ? kBBytes : 0u) +
                                               (has_tail ? kTailBytes : 0u);
        // 2x1: this unit's B tile into the stage (both CTAs' consumers freed the slot).
        auto load_b_pair = [&](unsigned b_stage, unsigned full, int k) {
          load_b_pair_tile<kBlockN, kWgN, Fuse::glu_split>(b_stage, tma_b, full, k, tile.group, n_block, p.n, b_row, rank,
                                                            multicast_b);
        };
        if constexpr (Fuse::gather) {
          // fuse=gather: the producer warpgroup copies A row by row (hopper/gather.cuh), B by TMA as
          // usual. By cp.async, the full barrier counts thread 0's arrive.expect_tx (B's bytes) and
          // one cp.async.mbarrier.arrive.noinc per producer thread, which fires when that thread's
          // copies have landed; gather_by=tma, one TMA copy per row, whose bytes thread 0 expects
          // as well. Rows past the group are not copied (their accumulator rows are never stored);
          // an index outside [0, num_tokens) reads a zero row.
          GatherRowsSm90<kBlockM> rows((int)threadIdx.x);
          GatherRowsTmaSm90<kBlockM> tma_rows;
          const int rows_valid = tile.group_rows - tile.m_block * kBlockM;
          if constexpr (Fuse::gather_tma)
            tma_rows.load_tokens(f->gather_rows, a_row, rows_valid, f->num_tokens, (int)threadIdx.x);
          else
            rows.load_tokens(f->gather_rows, a_row, rows_valid, f->num_tokens, p.k);
          // Absorbed tail rows: gathered into the tail slot after the tile's A, as the tile's rows are.
          constexpr int kTailSlotRows = kTailRows != 0 ? kTailRows : 24;  // the types exist without tail rows
          GatherTailRowsSm90<kTailSlotRows> tail_rows;
          GatherRowsTmaSm90<kTailSlotRows> tma_tail_rows;
          if constexpr (kTailRows != 0) {
            if (has_tail) {
              if constexpr (Fuse::gather_tma)
                tma_tail_rows.load_tokens(f->gather_rows, a_row + kBlockM, rows_after, f->num_tokens, (int)threadIdx.x);
              else
                tail_rows.load_tokens(f->gather_rows, a_row + kBlockM, rows_after, f->num_tokens, p.k, (int)threadIdx.x);
            }
          }
          const unsigned short* const a_base = static_cast<const unsigned short*>(p.a);
          for (int kb = 0; kb < num_k_blocks; ++kb) {
            const unsigned full = full_bars + 8 * stage;
            mbarrier_wait(empty_bars + 8 * stage, phase ^ 1);
            if (producer_leader) {
              unsigned a_tx = 0;
              if constexpr (Fuse::gather_tma) {
                a_tx = tma_rows.tx_bytes(rows_valid);
                if (kTailRows != 0 && has_tail) a_tx += tma_tail_rows.tx_bytes(rows_after);
              }
              mbarrier_arrive_expect_tx(full, kBBytes + a_tx);
              if constexpr (kPairM)
                load_b_pair(b_stages + stage * kBBytes, full, kb * kBlockK);
              else
                load_b_tile<kBlockN, kWgN, Fuse::glu_split>(b_stages + stage * kBBytes, tma_b, full, kb * kBlockK,
                                                            tile.group, n_block, p.n);
            }
            if constexpr (Fuse::gather_tma) {
              tma_rows.copy_k_block(a_stages + stage * kAStageBytes, tma_a, full, kb * kBlockK, (int)threadIdx.x);
              if (kTailRows != 0 && has_tail)
                tma_tail_rows.copy_k_block(a_stages + stage * kAStageBytes + kABytes, tma_a, full, kb * kBlockK,
                                           (int)threadIdx.x);
            } else {
              rows.copy_k_block(a_stages + stage * kAStageBytes, a_base, p.k, kb * kBlockK);
              if (kTailRows != 0 && has_tail)
                tail_rows.copy_k_block(a_stages + stage * kAStageBytes + kABytes, a_base, p.k, kb * kBlockK, (int)threadIdx.x);
              cp_async_mbarrier_arrive_noinc(full);  // after all of this thread's copies, the tail rows' too
            }
            if (++stage == kStages) stage = 0, phase ^= 1;
          }
          continue;
        }
        for (int kb = kb_begin; kb < kb_end; ++kb) {
          const unsigned full = full_bars + 8 * stage;
          const unsigned a_stage = a_stages + stage * kAStageBytes;
          if constexpr (kPairM) {
            // Rank r loads its own A, and B by load_b_pair.
            mbarrier_wait(empty_bars + 8 * stage, phase ^ 1);
            mbarrier_arrive_expect_tx(full, tx_bytes);
            if (has_a) {
              tma_load_2d(a_stage, tma_a, full, kb * kBlockK, a_row);
              if (a_upper) tma_load_2d(a_stage + kAHalfBytes, tma_a, full, kb * kBlockK, a_row + 64);
            }
            // Tail rows: the rank whose tile is the group's last whole one loads them into its own stage.
            if (kTailRows != 0 && has_tail) tma_load_2d(a_stage + kABytes, *tma_tail, full, kb * kBlockK, a_row + kBlockM);
            load_b_pair(b_stages + stage * kBBytes, full, kb * kBlockK);
            if (++stage == kStages) stage = 0, phase ^= 1;
            continue;
          } else if constexpr (kPairN) {
            // Rank r loads A half r into both CTAs: both CTAs' consumers must have freed the slot.
            mbarrier_wait(empty_bars + 8 * stage, phase ^ 1);
            mbarrier_arrive_expect_tx(full, tx_bytes);
            if (rank == 0) {
              tma_load_2d_multicast(a_stage, tma_a, full, kb * kBlockK, a_row, 3);
            } else if (a_upper) {
              tma_load_2d_multicast(a_stage + kAHalfBytes, tma_a, full, kb * kBlockK, a_row + 64, 3);
            }
            // Tail rows: each CTA of the pair loads its own (its own bytes in tx_bytes).
            if (kTailRows != 0 && has_tail) tma_load_2d(a_stage + kABytes, *tma_tail, full, kb * kBlockK, a_row + kBlockM);
          } else {
            mbarrier_wait(empty_bars + 8 * stage, phase ^ 1);
            mbarrier_arrive_expect_tx(full, tx_bytes);
            tma_load_2d(a_stage, tma_a, full, kb * kBlockK, a_row);
            if (a_upper) tma_load_2d(a_stage + kAHalfBytes, tma_a, full, kb * kBlockK, a_row + 64);
            if (kTailRows != 0 && has_tail) tma_load_2d(a_stage + kABytes, *tma_tail, full, kb * kBlockK, a_row + kBlockM);
          }
          if constexpr (Fuse::glu_split) {
            if (has_b) load_b_tile<kBlockN, kWgN, true>(b_stages + stage * kBBytes, tma_b, full, kb * kBlockK, tile.group, n_block, p.n);
          } else {
            if (has_b) tma_load_2d(b_stages + stage * kBBytes, tma_b, full, kb * kBlockK, b_row);
          }
          if (++stage == kStages) stage = 0, phase ^= 1;
        }
      }
      // fuse=gather: no lane exits with copies (and their barrier arrivals) still in flight; the
      // PTX ISA does not say what happens to them, and CUTLASS's cp.async producers also wait
      // (producer_tail) before they exit. Free: nothing is left for the producer to do.
      if constexpr (Fuse::gather && !Fuse::gather_tma) cp_async_wait_all_sm90();
    }
  } else {
    // ---------------- consumers ----------------
    warpgroup_claim_registers<kConsumerRegs>();
    const int consumer = warpgroup - 1;
    const int lane = threadIdx.x % 32;
    const int warp_in_group = (threadIdx.x / 32) % 4;
    const unsigned a_offset = kSplitN ? 0u : consumer * 64 * kRowBytes;
    const unsigned b_offset = kSplitN ? consumer * kWgN * kRowBytes : 0u;
    const int tile_row0 = kSplitN ? 0 : consumer * 64;  // first tile row of this warpgroup
    const int tile_col0 = kSplitN ? consumer * kWgN : 0;

    // K == 0: no wgmma ever runs (num_k_blocks is the same for every tile) and C is the empty
    // sum, so the accumulators start at zero; otherwise the first wgmma of each tile overwrites them.
    // Descriptors advanced from the first stage's (as in the FP8 and 4-bit kernels): rebuilding
    // them from each k16 step's address took ~50 of the k-loop's ~90 SASS instructions per K block
    // (128x256, docs/perf.md v15).
    const unsigned long long a_desc0 = wgmma_desc_sw128(a_stages + a_offset);
    const unsigned long long b_desc0 = wgmma_desc_sw128(b_stages + b_offset);
    // Absorbed tail rows: this consumer's 128 weight rows of the B tile (two 64-row slices), and the
    // tail rows after the tile's A. glu=split: slice 0 is gate rows 64 c.., slice 1 the up rows of the
    // same output columns (128 + 64 c..), so that a GLU pairs registers of one thread (tail_rows.cuh).
    constexpr unsigned kTailSlice1Bytes = (Fuse::glu_split ? kBlockN / 2 : 64) * kRowBytes;
    const unsigned long long w_desc0 =
        wgmma_desc_sw128(b_stages + consumer * (Fuse::glu_split ? 64 : kBlockN / 2) * kRowBytes);
    const unsigned long long t_desc0 = wgmma_desc_sw128(a_stages + kABytes);
    float acc[kAccRegs];  // the C++ copy the epilogue (and the bias set-up) works on
    Acc::zero();
    if constexpr (kTailRows != 0) TailAccRegs::zero();
    int stage = 0;
    unsigned phase = 0;
    int ring_slot = 0;
    unsigned ring_phase = 0;
    unsigned c_state = 0;  // staged epilogue: chunk buffers (store_accumulators_staged)
    // A stage goes back to this CTA's producer and, paired, to the peer's (which multicasts into it).
    const unsigned peer_offset = kPaired ? cluster_map(empty_bars, peer) - empty_bars : 0u;
    auto release_stage = [&](unsigned bar) {
      mbarrier_arrive(bar);
      if constexpr (kPaired) mbarrier_arrive_remote_stage(bar + peer_offset);
    };
    for (int tile_iter = 0;; ++tile_iter) {
      int tile_index;
      if constexpr (kDynamic) {
        // Lane 0 reads the slot and releases it itself (mbarrier.arrive releases only the
        // arriving thread's own accesses), then shares the tile number with its warp.
        tile_index = 0;
        if (lane == 0) {
          if constexpr (kPaired) {
            mbarrier_wait_cluster(tile_full_bars + 8 * ring_slot, ring_phase);
            tile_index = tile_ring[ring_slot];
            mbarrier_arrive_remote_after_read(cluster_map(tile_empty_bars + 8 * ring_slot, 0), tile_index);
          } else {
            mbarrier_wait(tile_full_bars + 8 * ring_slot, ring_phase);
            tile_index = tile_ring[ring_slot];
            mbarrier_arrive(tile_empty_bars + 8 * ring_slot);
          }
        }
        tile_index = __shfl_sync(0xffffffffu, tile_index, 0);
        if (++ring_slot == kTileRing) ring_slot = 0, ring_phase ^= 1;
      } else {
        tile_index = cluster_id + tile_iter * clusters;
      }
      SplitUnit unit{tile_index, 0, num_k_blocks, -1};
      if constexpr (kSplitTail) unit = split_unit(p, tile_index, num_k_blocks);
      const int kb_begin = unit.kb_begin, kb_end = unit.kb_end;
      if (!cursor.seek(p, unit.tile, tile)) break;
      if constexpr (kPairM) pair_unit_tile<kBlockM, kTailRows>(tile, (int)rank, n_tiles);  // as the producer: group_rows 0 = no tile
      const int n_block = kPairN ? tile.n_block * 2 + (int)rank : tile.n_block;

      // Rows of this warpgroup inside the group (group-local): none when the group ends in the
      // tile's first half; the second consumer then only passes the stages on (half the MMA time
      // for such a tile: 512 +- 22-row groups pad ~6% instead of ~12% of 128-row tiles).
      const int m_first = tile.m_block * kBlockM + tile_row0;
      const int rows_here = tile.group_rows - m_first;
      const bool computes = rows_here > 0 && (!kPairN || n_block * kBlockN < p.n);

      if (!computes) {
        // Only hand the stages back (the empty barriers count every consumer warp). A separate
        // loop: a wgmma under a divergent branch makes ptxas serialize all of them (C7520).
        for (int kb = kb_begin; kb < kb_end; ++kb) {
          mbarrier_wait(full_bars + 8 * stage, phase);
          if (lane == 0) release_stage(empty_bars + 8 * stage);
          if (++stage == kStages) stage = 0, phase ^= 1;
        }
        continue;
      }
      // fuse=bias: the accumulators start at the bias and every wgmma accumulates (loading the
      // bias in the epilogue held 64 more registers next to the accumulators and spilled).
      if constexpr (Fuse::bias) {
        init_acc_with_bias<kBlockN, kWgN, Fuse::glu_split>(acc, *f, tile.group, p.n, n_block * kBlockN, tile_col0, lane);
        Acc::write(acc);
      } else if constexpr (kSetAccPerTile) {
        Acc::zero();
      }
      if constexpr (kTailRows != 0) {
        // The group's last whole tile with the group's last rows_after rows (1..kTailRows): the
        // tile's wgmmas and, roles swapped, this consumer's 128 weight rows against the tail rows
        // (tail_rows.cuh). A k-loop of its own, as the stage-passing one above: tiles without tail
        // rows run the loop below as kernels without them do. (Its bookkeeping repeats the loop
        // below on purpose: one helper for both changed the other kernels' SASS.)
        const int rows_after = tile.group_rows - (tile.m_block + 1) * kBlockM;
        if (rows_after > 0 && rows_after <= kTailRows) {
          int prev_stage = 0;
          for (int kb = kb_begin; kb < kb_end; ++kb) {
            mbarrier_wait(full_bars + 8 * stage, phase);
            if constexpr (Fuse::gather && !Fuse::gather_tma) fence_proxy_async_shared();
            const unsigned long long a_desc = wgmma_desc_advance<kAStageBytes>(a_desc0, stage);
            const unsigned long long b_desc = wgmma_desc_advance<kBBytes>(b_desc0, stage);
            const unsigned long long w_desc = wgmma_desc_advance<kBBytes>(w_desc0, stage);
            const unsigned long long t_desc = wgmma_desc_advance<kAStageBytes>(t_desc0, stage);
            wgmma_fence();
#pragma unroll
            for (int k = 0; k < kBlockK / 16; ++k) {
              const int scale_d = ((kb - kb_begin) | k) != 0;
              Mma::mma_named(wgmma_desc_advance<32>(a_desc, k), wgmma_desc_advance<32>(b_desc, k),
                             kSetAccPerTile || scale_d);
              tail_mma<0, kTypeAB == kF16>(wgmma_desc_advance<32>(w_desc, k), wgmma_desc_advance<32>(t_desc, k), scale_d);
              tail_mma<1, kTypeAB == kF16>(wgmma_desc_advance<32>(wgmma_desc_advance<kTailSlice1Bytes>(w_desc, 1), k),
                                           wgmma_desc_advance<32>(t_desc, k), scale_d);
            }
            wgmma_commit();
            wgmma_wait<1>();
            if (kb > kb_begin && lane == 0) release_stage(empty_bars + 8 * prev_stage);
            prev_stage = stage;
            if (++stage == kStages) stage = 0, phase ^= 1;
          }
          wgmma_wait<0>();
          Acc::read(acc);
          float tail[kTailAccRegs];
          TailAccRegs::read(tail);
          if (kb_end > kb_begin && lane == 0) release_stage(empty_bars + 8 * prev_stage);
          const int tail_row0 = tile.row_begin + (tile.m_block + 1) * kBlockM;
          const int tail_col0 = n_block * kBlockN + consumer * (kBlockN / 2);
          if constexpr (Fuse::epilogue) {
            // The tile's rows as any tile's (scattered rows by direct stores; else through the one
            // C staging chunk).
            store_tail_rows_fused<kTypeC, Fuse>(p, *f, tail, tail_row0, rows_after, tile.group, n_block * kBlockN,
                                                consumer, warp_in_group, lane);
            fused_epilogue<kTypeC, kWgN, kStaged, Fuse, false, true, kCBuffers>(
                p, *f, tma_c, acc, c_staging + consumer * kCStagePerConsumer, tile.group, tile.row_begin, tile.group_rows,
                m_first, 64, n_block * kBlockN, tile_col0, warp_in_group, lane, 1 + consumer, c_state);
          } else {
            store_tail_rows<kTypeC>(p, tail, tail_row0, rows_after, tail_col0, warp_in_group, lane);
            store_accumulators_staged<kTypeC, kWgN, kCBuffers>(p, tma_c, acc, c_staging + consumer * kCStagePerConsumer,
                                                               tile.row_begin + m_first, 64, n_block * kBlockN + tile_col0,
                                                               warp_in_group, lane, 1 + consumer, c_state);
          }
          continue;
        }
      }
      int prev_stage = 0;
      for (int kb = kb_begin; kb < kb_end; ++kb) {
        mbarrier_wait(full_bars + 8 * stage, phase);
        // fuse=gather: A came through the generic proxy (cp.async); order it before wgmma's reads.
        if constexpr (Fuse::gather && !Fuse::gather_tma) fence_proxy_async_shared();
        const unsigned long long a_desc = wgmma_desc_advance<kAStageBytes>(a_desc0, stage);
        const unsigned long long b_desc = wgmma_desc_advance<kBBytes>(b_desc0, stage);
        wgmma_fence();
#pragma unroll
        for (int k = 0; k < kBlockK / 16; ++k) {
          Mma::mma_named(wgmma_desc_advance<32>(a_desc, k), wgmma_desc_advance<32>(b_desc, k),
                         kSetAccPerTile || ((kb - kb_begin) | k) != 0);
        }
        wgmma_commit();
        // Keep this k-block's wgmma in flight; once the previous one is done its stage goes back.
        wgmma_wait<1>();
        if (kb > kb_begin && lane == 0) release_stage(empty_bars + 8 * prev_stage);
        prev_stage = stage;
        if (++stage == kStages) stage = 0, phase ^= 1;
      }
      wgmma_wait<0>();
      // All asm volatile, so the copy stays after the wait; from here on acc is plain C++ values.
      Acc::read(acc);
      if (kb_end > kb_begin && lane == 0) release_stage(empty_bars + 8 * prev_stage);
      // A piece of a split tile: only the last piece to finish stores C (barriers 3 and 4: the
      // staged epilogue has 1 and 2).
      if constexpr (kSplitTail) {
        if (unit.piece >= 0 && !split_reduce(p, unit, consumer, acc, (int)threadIdx.x % 128, 3 + consumer)) continue;
      }

      const int n0 = n_block * kBlockN + tile_col0;
      if constexpr (Fuse::epilogue) {
        fused_epilogue<kTypeC, kWgN, kStaged, Fuse, false, true, kCBuffers>(p, *f, tma_c, acc, c_staging + consumer * kCStagePerConsumer,
                                                    tile.group, tile.row_begin, tile.group_rows, m_first,
                                                    min(rows_here, 64), n_block * kBlockN, tile_col0, warp_in_group,
                                                    lane, 1 + consumer, c_state);
      } else if constexpr (kStaged) {
        store_accumulators_staged<kTypeC, kWgN, kCBuffers>(p, tma_c, acc, c_staging + consumer * kCStagePerConsumer,
                                                           tile.row_begin + m_first, min(rows_here, 64), n0, warp_in_group,
                                                           lane, 1 + consumer, c_state);
      } else {
        const int m0 = m_first + warp_in_group * 16;  // group-local row of this warp
        store_accumulators<kTypeC, kWgN>(p, acc, tile.row_begin, tile.group_rows, m0, n0, lane);
      }
    }
    // Shared memory must outlive the stores' reads; the writes complete before the kernel does.
    if (kStaged && warp_in_group == 0 && lane == 0) tma_store_wait_all();
  }
  // Paired: neither CTA exits while the peer may still arrive on its barriers.
  if constexpr (kPaired) cluster_sync();
}

// The unfused kernel (its generated code is unchanged by the fusions). tma_tail: the tail rows'
// map (kTailRows-row boxes of A) of a kernel with absorbed tail rows, else null.
template <int kBlockM, int kBlockN, int kStages, int kTypeAB, int kTypeC, int kLayout, int kScheduler,
          int kClusterN = 1, int kClusterM = 1, bool kSplitTail = false, int kTailRows = 0>
__device__ __forceinline__ void grouped_gemm(const GroupedGemmParams& p, const TmaDescriptor& tma_a,
                                             const TmaDescriptor& tma_b, const TmaDescriptor& tma_c,
                                             const TmaDescriptor* tma_tail = nullptr) {
  grouped_gemm<kBlockM, kBlockN, kStages, kTypeAB, kTypeC, kLayout, kScheduler, kClusterN, NoFusion, kClusterM, kSplitTail,
               kTailRows>(p, tma_a, tma_b, tma_c, nullptr, tma_tail);  // a pointer: a FusionParams{} temporary renumbered the PTX
}

}  // namespace moejit::hopper
