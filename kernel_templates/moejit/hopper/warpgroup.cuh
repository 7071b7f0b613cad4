// Warp-specialization helpers: register reallocation between warpgroups.
// setmaxnreg only takes effect when the kernel has a register cap at entry
// (__launch_bounds__(384, 1)) and each role is one branch of a single if/else;
// otherwise ptxas ignores it and warns (C7508).
#pragma once

namespace moejit::hopper {

template <int kRegs>
__device__ __forceinline__ void warpgroup_release_registers() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(kRegs));
}

template <int kRegs>
__device__ __forceinline__ void warpgroup_claim_registers() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(kRegs));
}

}  // namespace moejit::hopper

namespace moejit::hopper {

// Barrier among the `kThreads` threads that use named barrier `id` (1..15; 0 is __syncthreads).
template <int kThreads>
__device__ __forceinline__ void named_barrier_sync(int id) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "n"(kThreads) : "memory");
}

}  // namespace moejit::hopper
