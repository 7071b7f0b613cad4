// TMA (bulk tensor copy engine) loads of one 2-D box into shared memory, completing on an
// mbarrier. The tensor map lives in kernel-parameter space (__grid_constant__), so its
// generic address is what the instruction takes.
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

}  // namespace moejit::hopper
