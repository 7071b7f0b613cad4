// Asynchronous global -> shared copies (sm_80+), in inline PTX so that NVRTC needs no toolkit header.
#pragma once

namespace moejit::portable {

// 32-bit shared-window address of a generic pointer into shared memory (what cp.async,
// ldmatrix and ld/st.shared take).
__device__ __forceinline__ unsigned shared_address(const void* ptr) {
  unsigned address;
  asm("{ .reg .u64 a; cvta.to.shared.u64 a, %1; cvt.u32.u64 %0, a; }" : "=r"(address) : "l"(ptr));
  return address;
}

// Copies 16 bytes, or writes 16 zero bytes when `valid` is false: with src-size 0 the
// source is never read, which is how rows past a group's end, columns past N and the
// K tail become zeros without a branch. `src` must still be a valid address.
// .cg: the tile is used once per CTA from shared memory, so L1 would only be polluted.
__device__ __forceinline__ void cp_async_16_zfill(unsigned dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16, %2;\n"
               :: "r"(dst), "l"(src), "r"(valid ? 16 : 0)
               : "memory");
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

// Waits until at most kPending of this thread's committed groups are still in flight.
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" :: "n"(kPending) : "memory");
}

}  // namespace moejit::portable
