// Dynamic tile scheduling inside one CTA (FP8 and 4-bit kernels): the producer's thread 0 takes
// each tile number from the launch's global counter (common/scheduler.cuh) and hands it to the
// warps that walk the same tiles through a small ring of shared-memory slots guarded by mbarriers.
// The bf16 kernel (grouped_gemm_sm90.cuh) has its own copy of this ring with the CTA-pair paths.
// kPaired (the FP8 kernel's 2x1 CTA pairs, v49): rank 0's producer takes each number and writes
// it into both CTAs' slots; rank 1's producer and every reading warp of both CTAs read their own
// CTA's slot and hand it back to rank 0 (whose empty barrier counts them all), as the bf16 kernel's
// paired ring does (hopper/cluster.cuh's remote arrivals).
//
// Fetched on demand: fetching one number ahead (to hide the atomic's round trip) reserves a tile
// for a CTA that is still busy, and with fewer tiles than CTAs (decode) half the CTAs did all the
// work: the 4-bit kernel's Mixtral down at 16 tokens took 2x as long (H100, docs/perf.md v10).
//
// A reader is one lane per warp (take: lane 0 reads the slot, releases it, and shares the number
// with its warp by a shuffle; the slot's empty barrier counts the reading warps) or every lane of
// it (take_every_lane: the barrier counts 32 per such warp).
#pragma once
#include "moejit/common/scheduler.cuh"
#include "moejit/hopper/mbarrier.cuh"
#include "moejit/hopper/cluster.cuh"

namespace moejit::hopper {

template <int kSlots = 4, bool kPaired = false>
struct TileRing {
  // Bytes the ring takes in shared memory (8-byte aligned): full and empty barriers, then slots.
  static constexpr unsigned kBytes = kSlots * (8 + 8 + 4);

  unsigned full_bars, empty_bars, slots_addr;
  int slot = 0;
  unsigned phase = 0;

  __device__ __forceinline__ explicit TileRing(unsigned base)
      : full_bars(base), empty_bars(base + 8 * kSlots), slots_addr(base + 16 * kSlots) {}

  // Thread 0, before the CTA's first barrier sync (paired: before the cluster's): `readers` warps
  // (of each CTA) take each number.
  __device__ __forceinline__ void init(unsigned readers) const {
    for (int r = 0; r < kSlots; ++r) {
      mbarrier_init(full_bars + 8 * r, 1);
      mbarrier_init(empty_bars + 8 * r, kPaired ? 2 * readers + 1 : readers);  // paired: + rank 1's producer
    }
  }

  // The producer's thread 0: the next tile number (past the last tile once the launch's tiles are
  // handed out; then call finish), published to the readers. Paired: rank 0 takes it from the
  // counter for both CTAs; rank 1 reads it from its slot.
  __device__ __forceinline__ int publish(int* counter) {
    if constexpr (kPaired) {
      if (cluster_ctarank() != 0) {
        const int tile = read_own_slot();
        advance();
        return tile;
      }
      const int tile = fetch_next_tile(counter);
      mbarrier_wait_cluster(empty_bars + 8 * slot, phase ^ 1);  // freed by both CTAs' readers
      st_shared_cluster(cluster_map(slots_addr + 4 * slot, 1), tile);
      mbarrier_arrive_cluster(cluster_map(full_bars + 8 * slot, 1));  // release.cluster: the store first
      asm volatile("st.shared.b32 [%0], %1;" ::"r"(slots_addr + 4 * slot), "r"(tile) : "memory");
      mbarrier_arrive(full_bars + 8 * slot);
      advance();
      return tile;
    }
    const int tile = fetch_next_tile(counter);
    mbarrier_wait(empty_bars + 8 * slot, phase ^ 1);
    asm volatile("st.shared.b32 [%0], %1;" ::"r"(slots_addr + 4 * slot), "r"(tile) : "memory");
    mbarrier_arrive(full_bars + 8 * slot);  // release: the store is visible to whoever sees the phase flip
    advance();
    return tile;
  }

  // The producer's warp 0, all lanes (they walk the groups together, seek_warp): lane 0 publishes
  // and shares the number. Only lane 0's slot and phase advance; the other lanes never read them.
  __device__ __forceinline__ int publish_warp(int* counter) {
    int tile = 0;
    if ((threadIdx.x & 31u) == 0) tile = publish(counter);
    return __shfl_sync(0xffffffffu, tile, 0);
  }

  // The producer's thread 0 once publish returned `tile`, the first number past the last of
  // `total` tiles: exactly gridDim.x fetches land past the end, and the launch's last one
  // (total + gridDim.x - 1) resets the counter for the next launch (no memset between launches).
  // Paired: only rank 0 fetched, once per cluster, so the last fetch is total + clusters - 1.
  __device__ __forceinline__ static void finish(int* counter, int tile, int total) {
    if constexpr (kPaired) {
      if (cluster_ctarank() == 0 && tile == total + (int)gridDim.x / 2 - 1) atomicExch(counter, 0);
    } else {
      release_tile_counter(counter, tile, total);
    }
  }

  // A producer warpgroup that walks the tiles in all its warps (fuse=gather: every warp copies
  // rows): warp 0 takes the number from the counter and publishes it, warps 1-3 read it from the
  // ring like consumer warps (init counts them).
  __device__ __forceinline__ int publish_or_take(int* counter) {
    return threadIdx.x < 32 ? publish_warp(counter) : take((int)threadIdx.x % 32);
  }

  // A reading warp (all lanes): the next tile number.
  __device__ __forceinline__ int take(int lane) {
    int tile = 0;
    if (lane == 0) {
      if constexpr (kPaired) {
        tile = read_own_slot();
      } else {
        mbarrier_wait(full_bars + 8 * slot, phase);
        asm volatile("ld.shared.b32 %0, [%1];" : "=r"(tile) : "r"(slots_addr + 4 * slot) : "memory");
        mbarrier_arrive(empty_bars + 8 * slot);
      }
    }
    advance();
    return __shfl_sync(0xffffffffu, tile, 0);
  }

  // A reading warp, every lane: each waits, reads the slot and arrives (init counts 32 arrivals
  // for such a warp). No lane-0 branch and no shuffle, so ptxas keeps the number, and what the
  // k-loop derives from it, in uniform registers. With take the 4-bit consumers' k-loop had 208
  // instructions between its first and last HGMMA, against 173 static and with this; the 4-bit
  // dynamic kernel took 1.05x static's time at decode with take, 1.01-1.02x with this (H100,
  // docs/perf.md v36).
  __device__ __forceinline__ int take_every_lane() {
    static_assert(!kPaired, "take_every_lane: single CTAs (the 4-bit kernel)");
    mbarrier_wait(full_bars + 8 * slot, phase);
    int tile;
    asm volatile("ld.shared.b32 %0, [%1];" : "=r"(tile) : "r"(slots_addr + 4 * slot) : "memory");
    mbarrier_arrive(empty_bars + 8 * slot);
    advance();
    return tile;
  }

 private:
  // Paired: this CTA's slot, handed back to rank 0 (a remote arrival predicated on the value read,
  // so that it waits for the load: mbarrier_arrive_remote_after_read). The caller advances.
  __device__ __forceinline__ int read_own_slot() const {
    mbarrier_wait_cluster(full_bars + 8 * slot, phase);
    int tile;
    asm volatile("ld.shared.b32 %0, [%1];" : "=r"(tile) : "r"(slots_addr + 4 * slot) : "memory");
    mbarrier_arrive_remote_after_read(cluster_map(empty_bars + 8 * slot, 0), tile);
    return tile;
  }

  __device__ __forceinline__ void advance() {
    if (++slot == kSlots) slot = 0, phase ^= 1;
  }
};

}  // namespace moejit::hopper
