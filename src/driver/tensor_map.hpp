// TMA tensor maps for the Hopper family, encoded on the host through the driver.
#pragma once
#include <cstdint>

#include "moejit/params.cuh"
#include "moejit/spec.hpp"

namespace moejit {

// A 2-D row-major matrix [rows, cols] (bf16, f16, f32 or e4m3), copied in boxes of box_rows × box_cols
// with 128-byte swizzle (wgmma's operand layout; box_cols × element size ≤ 128 bytes): loads read
// zeros past the edges, stores skip what lies past them.
TmaDescriptor make_tma_2d_swizzled(const void* base, DType type, std::uint64_t rows, std::uint64_t cols,
                                   std::uint32_t box_rows, std::uint32_t box_cols);

}  // namespace moejit
