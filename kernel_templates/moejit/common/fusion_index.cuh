// Index arithmetic of the fused kernels (and the staged epilogue's buffer bookkeeping), as plain
// functions that compile for the device (NVRTC) and the host (tests/test_fusion_index.cpp checks
// them against independent models of the TMA 128B swizzle, the wgmma / mma.sync accumulator
// layouts, the GLU contract and TMA store groups). No CUDA header.
#pragma once
#include "moejit/common/host_device.cuh"

namespace moejit {

// Byte offset of 16-byte chunk `chunk` (0..7) of row `row` inside a 128B-swizzled K-major tile
// (128-byte rows, base 1024-byte aligned): the chunk index is XORed with row % 8, which is what
// TMA (CU_TENSOR_MAP_SWIZZLE_128B) writes and what a wgmma descriptor with 128B swizzle reads.
MOEJIT_HOST_DEVICE constexpr unsigned sw128_offset(int row, int chunk) {
  return (unsigned)row * 128u + ((chunk ^ (row % 8)) * 16);  // row >= 0
}

// fuse=gather on Hopper: the producer warpgroup's 128 threads copy a tile of `rows` rows x 128
// bytes (64 K of BF16) in 16-byte chunks. Warp w takes rows [w rows/4, (w+1) rows/4); in step s,
// thread t (lane t % 32) copies chunk t % 8 of row w rows/4 + 4 s + (t % 32) / 8, so 8 consecutive
// lanes read one row's 128 contiguous global bytes. rows / 16 steps; rows a multiple of 16.
MOEJIT_HOST_DEVICE constexpr int gather_steps(int rows) { return rows / 16; }
MOEJIT_HOST_DEVICE constexpr int gather_tile_row(int thread, int step, int rows) {
  return (thread / 32) * (rows / 4) + 4 * step + (thread % 32) / 8;
}
MOEJIT_HOST_DEVICE constexpr int gather_chunk(int thread) { return thread % 8; }

// Interleaved GLU on the wgmma accumulator layout (register 4j + 2h + e: row lane/4 + 8h, column
// 8j + 2(lane%4) + e). Lane q of a quad holds, per 8-column group, the (gate, up) pair of output
// column 4j + q. Output column 8j' + 2q + e is then the pair of lane (2q + e) % 4 of the same quad,
// in its group 2j' + 1 when 2q + e >= 4 (the "hi" group), else 2j'.
MOEJIT_HOST_DEVICE constexpr int glu_pair_source_lane(int lane, int e) { return (lane & ~3) | ((2 * (lane % 4) + e) & 3); }
MOEJIT_HOST_DEVICE constexpr bool glu_pair_from_hi(int lane) { return lane % 4 >= 2; }

// Split GLU on Hopper: the B rows of a consumer slice come in two boxes of wg_n / 2 rows, gate
// rows first. First B row (inside the group's n rows) of box `up` (0: gate, 1: up) of slice s of
// N tile n_block; slice column cl < wg_n / 2 is then gate column out + cl, cl >= wg_n / 2 up column
// n / 2 + out + cl - wg_n / 2, with out = split_glu_out0(...).
MOEJIT_HOST_DEVICE constexpr int split_glu_out0(int n_block, int block_n, int wg_n, int slice) {
  return n_block * (block_n / 2) + slice * (wg_n / 2);
}
MOEJIT_HOST_DEVICE constexpr int split_glu_box_row(int n, int n_block, int block_n, int wg_n, int slice, int up) {
  return (up ? n / 2 : 0) + split_glu_out0(n_block, block_n, wg_n, slice);
}

// GEMM column (before the GLU halves N) of slice column cl of a split-GLU slice whose first
// output column is out0: the gate half, then the up half (what the bias of that column is).
MOEJIT_HOST_DEVICE constexpr int split_glu_slice_column(int n, int out0, int wg_n, int cl) {
  return cl < wg_n / 2 ? out0 + cl : n / 2 + out0 + (cl - wg_n / 2);
}

// Split GLU in the portable kernel: the B loader interleaves gate and up rows so that tile row 2i
// is gate row out0 + i and tile row 2i + 1 is up row n/2 + out0 + i (out0 = tile_col / 2).
MOEJIT_HOST_DEVICE constexpr int split_glu_tile_row(int tile_row, int out0, int half_n) {
  return (tile_row & 1) * half_n + out0 + tile_row / 2;
}

// The TMA-store epilogue's two shared-memory chunk buffers (hopper/epilogue.cuh). Chunks alternate
// between them; a chunk whose rows all belong to the group is stored by TMA (one committed bulk
// group), one that crosses the group's end is copied out by the threads (no group). Before a
// chunk is written, every store that reads its buffer must have read it: waiting for all groups
// but the newest suffices when the newest reads the other buffer, not otherwise (after a copied
// chunk, the newest group may be this buffer's: the v9 race). state, kept across chunks and tiles
// (0 at first): bit 0 the buffer the next chunk writes, bit 1 set once a group was committed, bit
// 2 the buffer the newest group reads.
MOEJIT_HOST_DEVICE constexpr unsigned c_staging_buffer(unsigned state) { return state & 1u; }
// Whether the next chunk must wait for every group (the newest reads its buffer).
MOEJIT_HOST_DEVICE constexpr bool c_staging_wait_all(unsigned state) {
  return (state & 2u) != 0 && ((state >> 2) & 1u) == (state & 1u);
}
// The state after the next chunk: stored by TMA (committed) or copied by the threads.
MOEJIT_HOST_DEVICE constexpr unsigned c_staging_next(unsigned state, bool committed) {
  return committed ? (((state & 1u) ^ 1u) | 2u | ((state & 1u) << 2)) : (state ^ 1u);
}

}  // namespace moejit
