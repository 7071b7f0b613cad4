// Thread-block clusters (sm_90): a pair of CTAs that share one operand through TMA multicast and
// hand each other pipeline stages through mbarriers in the peer's shared memory.
#pragma once
#include "moejit/params.cuh"

namespace moejit::hopper {

__device__ __forceinline__ unsigned cluster_ctarank() {
  unsigned r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}

__device__ __forceinline__ int cluster_id_x() {
  unsigned r;
  asm volatile("mov.u32 %0, %%clusterid.x;" : "=r"(r));
  return static_cast<int>(r);
}

__device__ __forceinline__ int cluster_count_x() {
  unsigned r;
  asm volatile("mov.u32 %0, %%nclusterid.x;" : "=r"(r));
  return static_cast<int>(r);
}

// Every non-exited thread of the cluster; orders shared-memory accesses (mbarrier init too) across it.
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;" ::: "memory");
}

// The same shared-memory offset in CTA `rank` of the cluster (shared::cluster window).
__device__ __forceinline__ unsigned cluster_map(unsigned local, unsigned rank) {
  unsigned remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local), "r"(rank));
  return remote;
}

// Orders this thread's earlier accesses (the remote tile-ring store) at cluster scope; costs a
// GPU-wide memory barrier in SASS, so only for rank 0 publishing a tile number (the store must be
// visible before the arrive); the readers free slots with mbarrier_arrive_remote_after_read.
__device__ __forceinline__ void mbarrier_arrive_cluster(unsigned remote_bar) {
  asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];" ::"r"(remote_bar) : "memory");
}

// Hands a tile-ring slot back to rank 0's producer once `value`, read from the slot, is in a
// register: the arrive is predicated on it (never false: tile numbers are not INT_MIN), so it
// waits for the load, and rank 0 cannot rewrite the slot before the read is done. Release at CTA
// scope, as mbarrier_arrive_remote_stage below: the WAR ordering of CUTLASS's cluster pipelines.
// Why not mbarrier_arrive_cluster: its MEMBAR.ALL.GPU + ERRBAR, once per consumer warp and tile at
// the tile's start while the tensor cores wait, held 2.5% of the bf16 kernel's warp samples on
// DeepSeek-V3 down 16384 tokens (1x2 pairs, dynamic; docs/perf.md v35).
__device__ __forceinline__ void mbarrier_arrive_remote_after_read(unsigned remote_bar, int value) {
  asm volatile(
      "{\n.reg .pred p;\n"
      "setp.ne.s32 p, %1, %2;\n"
      "@p mbarrier.arrive.shared::cluster.b64 _, [%0];\n}\n" ::"r"(remote_bar),
      "r"(value), "n"(-2147483647 - 1)
      : "memory");
}

// Hands a pipeline stage back to the peer's producer (default .release.cta, no memory barrier):
// what it orders is the completion of this warpgroup's wgmma reads of the stage (wgmma.wait),
// before the peer's TMA multicast overwrites it, the way CUTLASS's cluster pipelines do.
__device__ __forceinline__ void mbarrier_arrive_remote_stage(unsigned remote_bar) {
  asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];" ::"r"(remote_bar) : "memory");
}

// Waits with cluster-scope acquire: for phases completed by arrivals from the peer CTA.
__device__ __forceinline__ void mbarrier_wait_cluster(unsigned bar, unsigned parity) {
  unsigned done = 0;
  while (!done) {
    asm volatile(
        "{\n.reg .pred p;\n"
        "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  }
}

__device__ __forceinline__ void st_shared_cluster(unsigned remote, int value) {
  asm volatile("st.shared::cluster.u32 [%0], %1;" ::"r"(remote), "r"(value) : "memory");
}

// TMA load of one box into the same shared-memory offset of every CTA in `cta_mask`; each
// destination's mbarrier at offset `bar` receives the bytes it got.
__device__ __forceinline__ void tma_load_2d_multicast(unsigned dst, const TmaDescriptor& map, unsigned bar, int inner,
                                                      int outer, unsigned short cta_mask) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
      " [%0], [%1, {%3, %4}], [%2], %5;" ::"r"(dst),
      "l"(reinterpret_cast<unsigned long long>(&map)), "r"(bar), "r"(inner), "r"(outer), "h"(cta_mask)
      : "memory");
}

}  // namespace moejit::hopper
