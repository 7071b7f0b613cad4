// Programmatic dependent launch (sm_90). The Runtime launches every kernel but the Hopper 4-bit
// 48-token tile (KernelSpec::grid_dependency) with the programmatic stream serialization attribute
// (RuntimeOptions::programmatic_launch), so a kernel may be
// dispatched before the kernel ahead of it in the stream has finished: its CTAs fill the SMs that
// kernel's last CTAs leave and wait here, before their first global memory access, until it has
// completed and its writes are visible. Each kernel then lets the one behind it launch early in
// turn. What it saves is the gap between two launches (the next grid's dispatch behind the
// previous one's tail). Without the attribute, or before sm_90, both instructions do nothing.
#pragma once

namespace moejit {

// kOn = false (KernelSpec::grid_dependency): a kernel the Runtime launches without the attribute.
template <bool kOn = true>
__device__ __forceinline__ void grid_dependency_sync() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if constexpr (kOn) {
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  }
#endif
}

}  // namespace moejit
