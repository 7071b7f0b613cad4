// Shared-memory addressing for the inline PTX below: PTX's .shared state space takes
// 32-bit offsets, so every building block works on those rather than generic pointers.
#pragma once

namespace moejit::hopper {

__device__ __forceinline__ unsigned smem_addr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void st_shared_u32(unsigned addr, unsigned value) {
  asm volatile("st.shared.u32 [%0], %1;" ::"r"(addr), "r"(value) : "memory");
}
__device__ __forceinline__ unsigned ld_shared_u32(unsigned addr) {
  unsigned value;
  asm volatile("ld.shared.u32 %0, [%1];" : "=r"(value) : "r"(addr) : "memory");
  return value;
}

// The mixed tile order's two stream sizes (MixedTileCursor, common/scheduler.cuh), once per CTA:
// one warp writes them before the kernel's first barrier, every role reads them after.
__device__ __forceinline__ int* mixed_order_totals() {
  __shared__ int totals[2];
  return totals;
}

}  // namespace moejit::hopper
