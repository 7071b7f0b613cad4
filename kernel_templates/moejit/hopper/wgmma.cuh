// Warpgroup matrix multiply (wgmma) plumbing: shared-memory operand descriptors and the
// fence / commit / wait discipline around the async instructions in wgmma_ops.cuh.
#pragma once
#include "moejit/hopper/wgmma_ops.cuh"

namespace moejit::hopper {

// Descriptor of a K-major tile written by TMA with 128-byte swizzle: each row is 64 16-bit
// elements (one 128-byte swizzle row) and 8-row core-matrix groups are 1024 bytes apart (SBO).
// LBO is unused for swizzled K-major operands (set to 1 as the ISA's examples do).
// The tile must start 1024-byte aligned so that the base-offset field can stay 0.
// Advancing by one k16 step inside the 128-byte row adds 32 bytes to the start address:
// the hardware applies the swizzle to the full address, so no other field changes.
__device__ __forceinline__ unsigned long long wgmma_desc_sw128(unsigned smem_byte_addr) {
  constexpr unsigned long long kLbo = 1ull << 16;
  constexpr unsigned long long kSbo = (1024ull >> 4) << 32;
  constexpr unsigned long long kSwizzle128B = 1ull << 62;
  return kSwizzle128B | kSbo | kLbo | static_cast<unsigned long long>((smem_byte_addr & 0x3FFFF) >> 4);
}

// The descriptor of the tile `count` strides of kStrideBytes further on (a later stage, a later k
// step): the start-address field is the byte address / 16 and shared memory ends below 256 KB, so
// the sum never carries out of the field. Cheaper than rebuilding the descriptor from the address
// in every k step.
template <unsigned kStrideBytes>
__device__ __forceinline__ unsigned long long wgmma_desc_advance(unsigned long long desc, unsigned count) {
  static_assert(kStrideBytes % 16 == 0, "descriptor addresses count 16-byte units");
  return desc + count * (kStrideBytes >> 4);
}

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
