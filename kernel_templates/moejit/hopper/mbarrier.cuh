// mbarrier: the shared-memory barrier that TMA completes (transaction bytes) and that
// producer and consumer warps use to hand pipeline stages to each other.
// Phases alternate 0,1,0,...; a waiter names the parity of the phase it waits to see
// completed. A fresh barrier is in phase 0, so waiting on parity 1 returns at once
// ("the phase before the first has completed"): producers start waiting on parity 1.
#pragma once
#include "moejit/hopper/smem.cuh"

namespace moejit::hopper {

__device__ __forceinline__ void mbarrier_init(unsigned bar, unsigned arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(arrivals) : "memory");
}

// Makes initialized barriers visible to the async proxy (TMA) and to the other threads
// (after the block-wide barrier that follows).
__device__ __forceinline__ void mbarrier_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

__device__ __forceinline__ void mbarrier_arrive(unsigned bar) {
  asm volatile("mbarrier.arrive.release.cta.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}

// One arrival plus the number of bytes TMA will deliver before this phase may complete.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(unsigned bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.release.cta.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes)
               : "memory");
}

__device__ __forceinline__ bool mbarrier_try_wait(unsigned bar, unsigned parity) {
  unsigned done;
  asm volatile(
      "{\n.reg .pred p;\n"
      "mbarrier.try_wait.parity.acquire.cta.shared::cta.b64 p, [%1], %2;\n"
      "selp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(done)
      : "r"(bar), "r"(parity)
      : "memory");
  return done != 0;
}

// try_wait already suspends the thread for a hardware-chosen interval, so a plain loop
// does not hammer the barrier.
__device__ __forceinline__ void mbarrier_wait(unsigned bar, unsigned parity) {
  while (!mbarrier_try_wait(bar, parity)) {
  }
}

}  // namespace moejit::hopper
