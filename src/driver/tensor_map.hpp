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

// A 1-D fp32 array of `elements` seen as rows of 4 floats (16 bytes), copied in boxes of box_quads
// such rows (at most 256): a box starts at any row, i.e. at any element rounded down to a multiple
// of 4, which is how TMA takes an unaligned start (a 1-D map whose box started at an unaligned
// element faulted on the H100: illegal instruction; here the innermost coordinate is always 0).
// Loads read zeros past the last row; the last row's floats past `elements` (at most 3, inside
// base's 16-byte-aligned last chunk) are read as they are. base must be 16-byte aligned.
TmaDescriptor make_tma_f32_quads(const float* base, std::uint64_t elements, std::uint32_t box_quads);

}  // namespace moejit
