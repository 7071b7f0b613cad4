// wgmma shared-memory operand descriptors, as plain functions that compile for the device (NVRTC)
// and the host: tests/test_fusion_index.cpp checks that advancing a descriptor by a stage or a k
// step gives the bits rebuilding it from the address would, for every kernel's strides. No CUDA
// header.
#pragma once
#include "moejit/common/host_device.cuh"

namespace moejit::hopper {

// Descriptor of a K-major tile written by TMA with 128-byte swizzle: each row is 64 16-bit
// elements (one 128-byte swizzle row) and 8-row core-matrix groups are 1024 bytes apart (SBO).
// LBO is unused for swizzled K-major operands (set to 1 as the ISA's examples do).
// The tile must start 1024-byte aligned so that the base-offset field can stay 0.
// Advancing by one k16 step inside the 128-byte row adds 32 bytes to the start address:
// the hardware applies the swizzle to the full address, so no other field changes.
MOEJIT_HOST_DEVICE constexpr unsigned long long wgmma_desc_sw128(unsigned smem_byte_addr) {
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
MOEJIT_HOST_DEVICE constexpr unsigned long long wgmma_desc_advance(unsigned long long desc, unsigned count) {
  static_assert(kStrideBytes % 16 == 0, "descriptor addresses count 16-byte units");
  return desc + count * (kStrideBytes >> 4);
}

}  // namespace moejit::hopper
