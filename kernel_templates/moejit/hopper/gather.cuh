// fuse=gather on Hopper (the bf16/f16, FP8 and 4-bit kernels): TMA cannot gather rows, so the producer
// warpgroup's 128 threads copy the tile's rows of A by cp.async into the 128B-swizzled position
// TMA would have written (common/fusion_index.cuh gives the thread -> row/chunk map). One warp
// issuing every copy, with the tokens passed around by shuffles, starved the MMAs: the fused GEMM1
// took 4x the plain GEMM's time at 16384 tokens and 2x at 16 with 4-bit weights (H100,
// 2026-11-23). Four warps, each thread holding the tokens of its own rows, issue a quarter each.
#pragma once

#include "moejit/common/fusion_index.cuh"
#include "moejit/hopper/tma.cuh"

namespace moejit::hopper {

// kElemBytes: 2 (bf16/f16: a stage row is 64 K) or 1 (e4m3: 128 K); a stage row is 128 bytes either way.
template <int kRows, int kElemBytes = 2>
struct GatherRowsSm90 {
  static_assert(kRows % 16 == 0, "gathered tiles: a multiple of 16 rows");
  static_assert(kElemBytes == 1 || kElemBytes == 2, "gathered rows: 1- or 2-byte elements");
  static constexpr int kSteps = gather_steps(kRows);
  static_assert(kSteps <= 32, "one bit of read_mask per step");
  // Per step, the row's first 16-byte chunk in A (token * k / (16 / kElemBytes)), 32 bits a row (the producer has
  // 40 registers, and 64-bit row pointers spilled; A stays under 64 GiB); 0 where nothing is read.
  int thread;  // 0..127 in the producer warpgroup
  unsigned row_chunk[kSteps];
  unsigned read_mask;  // bit s: step s reads its row; else (past the group's end, or a token outside
                       // [0, num_tokens)) its chunk is zero-filled

  __device__ __forceinline__ explicit GatherRowsSm90(int producer_thread) : thread(producer_thread) {}

  // This thread's rows for a tile whose tokens are gather_rows[row0, row0 + rows_valid); A is
  // [num_tokens, k] row-major, k a multiple of 16 / kElemBytes (a chunk's elements).
  __device__ __forceinline__ void load_tokens(const int* gather_rows, int row0, int rows_valid, int num_tokens, int k) {
    read_mask = 0;
#pragma unroll
    for (int s = 0; s < kSteps; ++s) {
      const int r = gather_tile_row(thread, s, kRows);
      unsigned c = 0;
      if (r < rows_valid) {
        const int t = __ldg(gather_rows + row0 + r);
        if ((unsigned)t < (unsigned)num_tokens) c = (unsigned)t * (unsigned)(k / (16 / kElemBytes)), read_mask |= 1u << s;
      }
      row_chunk[s] = c;
    }
  }

  // Columns [k0, k0 + 128 / kElemBytes) of this thread's rows into the 1024-byte aligned stage at `stage`;
  // chunks past k are zero-filled (a chunk is wholly in or out of K), as are rows that read nothing
  // (rows past the group's end are never stored).
  // Lean on purpose: the producer warps share each scheduler with two consumer warps. Three
  // instructions per copy (a predicate from the mask, one wide multiply-add for the source, the
  // copy with ignore-src); the whole-tile state (the mask for this K block, the column's 64-bit
  // base) is computed once. (Until v10 each copy selected its source and size with ~10
  // instructions, two of them constant-bank reloads: the 256-token gathered MXFP4 GEMM1 executed
  // 1.75x the plain kernel's instructions, docs/perf.md v10.)
  __device__ __forceinline__ void copy_k_block(unsigned stage, const void* a, int k, int k0) const {
    const int chunk = gather_chunk(thread);
    const int col = k0 + 16 / kElemBytes * chunk;
    const unsigned mask = col < k ? read_mask : 0u;
    const unsigned long long base = reinterpret_cast<unsigned long long>(a) + (unsigned long long)kElemBytes * (unsigned)col;
    const unsigned dst_even = stage + sw128_offset(gather_tile_row(thread, 0, kRows), chunk);
    const unsigned dst_odd = stage + sw128_offset(gather_tile_row(thread, 1, kRows), chunk) - 512u;
#pragma unroll
    for (int s = 0; s < kSteps; ++s) {
      const unsigned dst = (s % 2 ? dst_odd : dst_even) + 512u * s;  // row 4 s + ...: 512 bytes per step
      asm volatile(
          "{\n.reg .pred skip;\n.reg .u64 src;\n"
          "setp.eq.b32 skip, %3, 0;\n"
          "mad.wide.u32 src, %2, 16, %1;\n"
          "cp.async.cg.shared.global [%0], [src], 16, skip;\n}\n" ::"r"(dst),
          "l"(base), "r"(row_chunk[s]), "r"(mask & (1u << s))
          : "memory");
    }
  }
};

// Absorbed tail rows of a gathered tile (KernelSpec::tail, 16-bit A; hopper/tail_rows.cuh): the up
// to kRows (24) rows after the group's last whole tile, copied by cp.async into the tail slot that
// follows the tile's A in its stage, swizzled as a TMA box of kRows rows would land. Thread t copies
// 16-byte chunk t % 8 of slot rows t / 8 and, for t < 8 (kRows - 16), 16 + t / 8. Slot rows past the
// group are zero-filled (inside the slot; never stored). Its state is three registers beside the
// tile's GatherRowsSm90, live only in kernels with tail rows.
template <int kRows>
struct GatherTailRowsSm90 {
  static_assert(kRows > 16 && kRows <= 32 && kRows % 8 == 0, "tail rows: 24 (two steps of 16 rows)");
  unsigned row_chunk[2];  // the row's first 16-byte chunk in A (token * k / 8), 0 where nothing is read
  unsigned read_mask;     // bit s: step s reads its row

  __device__ __forceinline__ void load_tokens(const int* gather_rows, int row0, int rows_valid, int num_tokens, int k,
                                              int thread) {
    read_mask = 0;
#pragma unroll
    for (int s = 0; s < 2; ++s) {
      const int r = thread / 8 + 16 * s;
      unsigned c = 0;
      if (r < rows_valid && r < kRows) {
        const int t = __ldg(gather_rows + row0 + r);
        if ((unsigned)t < (unsigned)num_tokens) c = (unsigned)t * (unsigned)(k / 8), read_mask |= 1u << s;
      }
      row_chunk[s] = c;
    }
  }

  // Columns [k0, k0 + 64) of this thread's rows into the 1024-byte aligned slot; chunks past k are
  // zero-filled, as GatherRowsSm90::copy_k_block does.
  __device__ __forceinline__ void copy_k_block(unsigned slot, const void* a, int k, int k0, int thread) const {
    const int chunk = thread % 8;
    const int col = k0 + 8 * chunk;
    const unsigned mask = col < k ? read_mask : 0u;
    const unsigned long long base = reinterpret_cast<unsigned long long>(a) + 2ull * (unsigned)col;
#pragma unroll
    for (int s = 0; s < 2; ++s) {
      const int r = thread / 8 + 16 * s;
      if (r >= kRows) break;  // the second step: threads 0 .. 8 (kRows - 16) - 1 only
      asm volatile(
          "{\n.reg .pred skip;\n.reg .u64 src;\n"
          "setp.eq.b32 skip, %3, 0;\n"
          "mad.wide.u32 src, %2, 16, %1;\n"
          "cp.async.cg.shared.global [%0], [src], 16, skip;\n}\n" ::"r"(slot + sw128_offset(r, chunk)),
          "l"(base), "r"(row_chunk[s]), "r"(mask & (1u << s))
          : "memory");
    }
  }
};

// fuse=gather with gather_by=tma: one TMA copy per row instead of eight cp.async. The A map is
// over [num_tokens, K] with a 1-row x 64-column box (128B swizzle); a copy into row r's place in the
// 1024-byte aligned stage (stage + 128 r) lands swizzled exactly as a whole-tile copy would (the
// swizzle follows the shared-memory address). Rows past the group's end are not copied (nor
// stored); a token outside [0, num_tokens) is read at row num_tokens, past the map: TMA fills it
// with zeros and still counts its 128 bytes, as it does for the columns past K. The stage's full
// barrier then needs one arrive.expect_tx of rows x 128 bytes (+ B's bytes) and no per-thread
// arrivals. Thread t of the producer warpgroup owns rows t, t + 128, ...
template <int kRows>
struct GatherRowsTmaSm90 {
  static constexpr int kPerThread = (kRows + 127) / 128;
  static constexpr int kNoRow = -1;
  int row_coord[kPerThread];  // the token row in A, num_tokens for a zero row, kNoRow past the group

  __device__ __forceinline__ void load_tokens(const int* gather_rows, int row0, int rows_valid, int num_tokens, int thread) {
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      const int r = thread + 128 * i;
      int c = kNoRow;
      if (r < kRows && r < rows_valid) {
        const int t = __ldg(gather_rows + row0 + r);
        c = (unsigned)t < (unsigned)num_tokens ? t : num_tokens;
      }
      row_coord[i] = c;
    }
  }

  // Bytes the tile's copies of one K block bring: 128 per row inside the group.
  __device__ __forceinline__ static unsigned tx_bytes(int rows_valid) {
    return 128u * (unsigned)max(0, min(rows_valid, kRows));
  }

  __device__ __forceinline__ void copy_k_block(unsigned stage, const TmaDescriptor& map, unsigned bar, int k0, int thread) const {
#pragma unroll
    for (int i = 0; i < kPerThread; ++i)
      if (row_coord[i] != kNoRow) tma_load_2d(stage + 128u * (unsigned)(thread + 128 * i), map, bar, k0, row_coord[i]);
  }
};

}  // namespace moejit::hopper
