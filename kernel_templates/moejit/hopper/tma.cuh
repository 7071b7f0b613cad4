// TMA (bulk tensor copy engine): loads of one 2-D box into shared memory completing on an
// mbarrier, and stores of one 2-D box from shared memory to global memory tracked by
// bulk async-groups. The tensor map lives in kernel-parameter space (__grid_constant__), so its
// generic address is what the instructions take.
#pragma once
#include "moejit/params.cuh"
#include "moejit/hopper/smem.cuh"

namespace moejit::hopper {

__device__ __forceinline__ void tma_prefetch_descriptor(const TmaDescriptor& map) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<unsigned long long>(&map)) : "memory");
}

// Box at element coordinates (inner, outer), i.e. (k, row). Rows/columns past the tensor are
// zero-filled and still count towards the mbarrier's transaction bytes.
__device__ __forceinline__ void tma_load_2d(unsigned dst, const TmaDescriptor& map, unsigned bar, int inner,
                                            int outer) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];" ::"r"(
          dst),
      "l"(reinterpret_cast<unsigned long long>(&map)), "r"(bar), "r"(inner), "r"(outer)
      : "memory");
}

// Box at (column, row) from shared memory to global memory. Elements past the tensor's edges
// are not written (the map's bounds clip the box), so only the rows are the caller's concern.
// The issuing thread later waits for it with tma_store_wait_read / tma_store_wait_all.
__device__ __forceinline__ void tma_store_2d(const TmaDescriptor& map, unsigned src, int inner, int outer) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];" ::"l"(
                   reinterpret_cast<unsigned long long>(&map)),
               "r"(src), "r"(inner), "r"(outer)
               : "memory");
}

__device__ __forceinline__ void tma_store_commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }

// Waits until at most kPending of this thread's committed stores still read shared memory.
template <int kPending>
__device__ __forceinline__ void tma_store_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(kPending) : "memory");
}

// Waits until every committed store of this thread is complete (written to global memory).
__device__ __forceinline__ void tma_store_wait_all() { asm volatile("cp.async.bulk.wait_group 0;" ::: "memory"); }

// Orders this thread's ordinary shared-memory writes before later reads by the async proxy
// (a TMA store issued after the barrier that follows).
__device__ __forceinline__ void fence_proxy_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

// fuse=gather: 16 bytes global -> shared by cp.async (zeros where !valid), and an arrival on an
// mbarrier once all of this thread's earlier cp.async have landed (.noinc: the barrier's expected
// count includes these arrivals).
__device__ __forceinline__ void cp_async_16_zfill_sm90(unsigned dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0) : "memory");
}
__device__ __forceinline__ void cp_async_mbarrier_arrive_noinc(unsigned bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(bar) : "memory");
}
// Waits until all of this thread's cp.async have landed.
__device__ __forceinline__ void cp_async_wait_all_sm90() { asm volatile("cp.async.wait_all;" ::: "memory"); }

}  // namespace moejit::hopper
