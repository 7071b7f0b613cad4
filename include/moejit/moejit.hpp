// moejit: runtime-JIT grouped GEMM kernels for Mixture-of-Experts layers.
#pragma once
#include "moejit/errors.hpp"
#include "moejit/formats.hpp"
#include "moejit/routing.hpp"
#include "moejit/runtime.hpp"
#include "moejit/spec.hpp"

namespace moejit {
// Part of every cache key: bump when host code changes what a kernel binary does.
inline constexpr const char* kVersion = "0.1.0";
}  // namespace moejit
