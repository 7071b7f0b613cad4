// Shared-memory addressing for the inline PTX below: PTX's .shared state space takes
// 32-bit offsets, so every building block works on those rather than generic pointers.
#pragma once

namespace moejit::hopper {

__device__ __forceinline__ unsigned smem_addr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

}  // namespace moejit::hopper
