// What the routing helpers (src/runtime/routing.cpp) need from a Runtime: its cache, its context,
// and modules that live as long as it does. Internal; not part of the public surface.
#pragma once
#include <algorithm>
#include <cuda.h>

#include <cstdint>
#include <functional>
#include <string>

#include "cache/kernel_cache.hpp"
#include "moejit/runtime.hpp"

namespace moejit {

KernelCache& runtime_cache(Runtime& rt);
void runtime_make_current(Runtime& rt);
// The function `entry` of the module built for spec_text, loaded once per runtime (cubin() is
// called on the first request only) and unloaded with it. Throws DriverError.
CUfunction runtime_function(Runtime& rt, const std::string& spec_text, const char* entry,
                            const std::function<std::string()>& cubin);

// Hot path in front of runtime_function: a function by a 64-bit key the caller packs from its
// spec (no text, no allocation); null until remembered.
CUfunction runtime_cached_function(Runtime& rt, std::uint64_t key);
void runtime_remember_function(Runtime& rt, std::uint64_t key, CUfunction function);

// Appends the programmatic stream serialization attribute to config.attrs (room for it is the
// caller's) when `on`: the kernel may launch before the one ahead of it in the stream finishes,
// and waits for it in griddepcontrol.wait (kernel_templates/moejit/common/grid_dependency.cuh).
inline void add_programmatic_launch(CUlaunchConfig& config, bool on) {
  if (!on) return;
  CUlaunchAttribute& a = config.attrs[config.numAttrs++];
  a.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
  a.value.programmaticStreamSerializationAllowed = 1;
}

// A launch of CTA pairs (a 2-CTA cluster along x, hopper cluster=1x2 / 2x1): an even grid, one
// pair at least. `config.attrs` needs room for one more attribute.
inline void add_cta_pair(CUlaunchConfig& config) {
  config.gridDimX = std::max(2u, config.gridDimX & ~1u);
  CUlaunchAttribute& cluster = config.attrs[config.numAttrs++];
  cluster.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
  cluster.value.clusterDim.x = 2;
  cluster.value.clusterDim.y = cluster.value.clusterDim.z = 1;
}

}  // namespace moejit
