// Warpgroup matrix multiply (wgmma) plumbing: shared-memory operand descriptors (wgmma_desc.cuh) and the
// fence / commit / wait discipline around the async instructions in wgmma_ops.cuh.
#pragma once
#include "moejit/hopper/wgmma_ops.cuh"
#include "moejit/hopper/wgmma_desc.cuh"

namespace moejit::hopper {

// Orders this warpgroup's earlier register/shared-memory accesses before the next wgmma.
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }

__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }

// Waits until at most kPending committed groups of this warpgroup are still running.
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(kPending) : "memory");
}

// Keeps the compiler from moving accumulator reads/writes across wgmma issue/wait points
// (the asm above does not name the accumulators, so without this it could).
template <int kRegs>
__device__ __forceinline__ void wgmma_fence_operands(float (&d)[kRegs]) {
#pragma unroll
  for (int i = 0; i < kRegs; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

}  // namespace moejit::hopper
