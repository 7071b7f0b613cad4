// The kernel ABI: the one struct every moejit kernel takes by value.
// Included by NVRTC (device side) and by the host library (launcher side),
// so both sides agree on the layout by construction. Plain C++ only: no CUDA headers.
#pragma once

namespace moejit {

// Group layouts (values are part of the ABI; mirrored by moejit::GroupLayout on the host).
//  contiguous: A is [total_rows, K]; group g owns rows [group_offsets[g], group_offsets[g+1]).
//              C is [total_rows, N] with the same rows.
//  masked:     A is [num_groups, capacity, K]; group g owns rows [0, group_counts[g]) of its slab.
//              C is [num_groups, capacity, N]; rows past the count are never written.
// B is always [num_groups, N, K], K contiguous (how MoE weights are stored).
struct GroupedGemmParams {
  const void* a;
  const void* b;
  void* c;
  const int* group_offsets;  // contiguous: num_groups + 1 entries, non-decreasing
  const int* group_counts;   // masked: num_groups entries, each in [0, capacity]
  int* tile_counter;         // dynamic scheduler: one zeroed int per launch (the kernel resets it)
  int num_groups;
  int n;
  int k;
  int capacity;              // masked: rows per group slab
  int total_rows;            // contiguous: rows of A and C; kernels clamp offsets to it
  // 1: the 4-bit kernel's weight copies carry an L2 evict_first hint (decode launches whose
  // weights are small: weights_evict_first in heuristics/config.cpp); 0 otherwise and in other kernels.
  int weight_l2_evict_first;
  // Scales of quantized operands (null for 16-bit ones); layouts in include/moejit/formats.hpp.
  // Appended after the 16-bit kernels' fields so that their offsets (and SASS) do not move, and
  // the struct stays within the 128 bytes before the first 64-byte aligned tensor map.
  const float* scale_a;      // e4m3: fp32 [ceil(K/128)][total_rows], K-block-major
  const void* scale_b;       // e4m3: fp32 [E][ceil(N/128)][ceil(K/128)]; mxfp4/nvfp4: in the packed weights
  const float* scale_b_tensor;  // nvfp4: fp32 [E], one per expert
  // split=tail (common/split_tail.cuh): tiles [split_from, split_from + split_tiles) run as
  // split_count pieces of K each (split_count < 2: every tile whole). The workspace holds one fp32
  // tile per piece (split_partials) and two zeroed counters per split tile (split_flags; the kernel
  // leaves them zero).
  float* split_partials;
  int* split_flags;
  int split_from;
  int split_tiles;
  int split_count;
};

static_assert(sizeof(GroupedGemmParams) <= 128, "tensor-map parameters must stay at offset 128");

// Fusion operands (docs/design.md, "Fusions"): an extra __grid_constant__ kernel parameter that
// only kernels compiled with fusions take (unfused kernels keep their signature). "Routed row" r
// is a row of the layout's row space (contiguous: [0, total_rows); masked: g * capacity + i).
struct FusionParams {
  const int* gather_rows;         // fuse=gather: routed row r reads A row gather_rows[r] (A: [num_tokens, K])
  const int* scatter_rows;        // fuse=scatter: routed row r goes to C row scatter_rows[r] (C: [num_out_rows, n_out])
  const float* routing_weights;   // fuse=weight: one per routed row, multiplies the row after the activation
  const float* bias;              // fuse=bias: [num_groups, n], added to the accumulators before the activation
  int num_tokens;                 // rows of A with fuse=gather; indices outside [0, num_tokens) read zeros
  int num_out_rows;               // rows of C with fuse=scatter; indices outside are not written
  int n_out;                      // columns of C: n, or n / 2 after a GLU activation
  int reserved0;
  float* c_scales;                // c=e4m3: C's scales, fp32 [ceil(n_out / 128)][rows of C] (1x128 blocks)
};

// A 128-byte CUtensorMap as an opaque blob, so kernels need not include cuda.h.
struct alignas(64) TmaDescriptor {
  unsigned long long opaque[16];
};

}  // namespace moejit
