// Writing a consumer warpgroup's wgmma accumulators to C, with the grouped-GEMM masks:
// rows past the group's end (the next group's rows, or masked-layout padding) and columns
// past N are never written.
//
// wgmma m64nN accumulator layout (per thread of the warpgroup): warp w holds rows 16w..16w+15;
// register 4j + 2h + e is row 16w + lane/4 + 8h, column 8j + 2(lane%4) + e.
#pragma once
#include "moejit/params.cuh"
#include "moejit/common/types.cuh"
#include "moejit/common/fusion_index.cuh"
#include "moejit/hopper/tma.cuh"
#include "moejit/hopper/warpgroup.cuh"

namespace moejit::hopper {

// Transposes 4 words among the 4 lanes of a quad (lanes 4i..4i+3): lane q starts with word j of
// column group j and ends with word i = lane i's word q, i.e. all 8 columns of group q in order.
// Two xor-shuffle rounds (2x2 element swaps, then 2x2 block swaps).
__device__ __forceinline__ void quad_transpose(unsigned (&w)[4], int lane) {
  const bool odd = lane & 1;
#pragma unroll
  for (int base = 0; base < 4; base += 2) {
    unsigned got = __shfl_xor_sync(0xffffffffu, odd ? w[base] : w[base + 1], 1);
    if (odd) w[base] = got; else w[base + 1] = got;
  }
  const bool upper = lane & 2;
#pragma unroll
  for (int base = 0; base < 2; ++base) {
    unsigned got = __shfl_xor_sync(0xffffffffu, upper ? w[base] : w[base + 2], 2);
    if (upper) w[base] = got; else w[base + 2] = got;
  }
}

// Stores columns col and col + 1 (relative to the lane's first column; `addr` is the global
// address of column col) where they are < cols_left: as one pair store when `pairs`, else as
// single elements (the halves of the same packed pair for 16-bit C: cvt.rn.*x2 rounds each
// half on its own). Inline PTX so that the masks stay predicates rather than a branch per store:
// NVVM and ptxas spent most of the kernel's compile time on the ~200 little blocks that a
// C++ `if` per store makes. With `pairs`, col is even and N is even, so col + 1 >= cols_left
// implies col >= cols_left: a pair is stored whole or not at all, like single stores would.
template <int kTypeC>
__device__ __forceinline__ void store_edge(unsigned long long addr, float v0, float v1, bool pairs, int col,
                                           int cols_left) {
  if constexpr (kTypeC == kF32) {
    asm volatile(
        "{\n.reg .pred pp, p0, p1, sp;\n"
        "setp.ne.b32 sp, %3, 0;\n"
        "setp.lt.and.s32 pp, %4, %5, sp;\n"
        "setp.lt.and.s32 p0, %6, %5, !sp;\n"
        "setp.lt.and.s32 p1, %4, %5, !sp;\n"
        "@pp st.global.v2.f32 [%0], {%1, %2};\n"
        "@p0 st.global.f32 [%0], %1;\n"
        "@p1 st.global.f32 [%0+4], %2;\n}\n" ::"l"(addr),
        "f"(v0), "f"(v1), "r"((int)pairs), "r"(col + 1), "r"(cols_left), "r"(col)
        : "memory");
  } else {
    const unsigned w = pack_pair<kTypeC>(v0, v1);
    asm volatile(
        "{\n.reg .pred pp, p0, p1, sp;\n.reg .b16 lo, hi;\n"
        "mov.b32 {lo, hi}, %1;\n"
        "setp.ne.b32 sp, %2, 0;\n"
        "setp.lt.and.s32 pp, %3, %4, sp;\n"
        "setp.lt.and.s32 p0, %5, %4, !sp;\n"
        "setp.lt.and.s32 p1, %3, %4, !sp;\n"
        "@pp st.global.b32 [%0], %1;\n"
        "@p0 st.global.b16 [%0], lo;\n"
        "@p1 st.global.b16 [%0+2], hi;\n}\n" ::"l"(addr),
        "r"(w), "r"((int)pairs), "r"(col + 1), "r"(cols_left), "r"(col)
        : "memory");
  }
}

// m0: group-local row of this warp's first accumulator row; n0: first column of the warpgroup's slice.
template <int kTypeC, int kWgN>
__device__ __forceinline__ void store_accumulators(const GroupedGemmParams& p, const float (&acc)[kWgN / 2],
                                                   int row_begin, int group_rows, int m0, int n0, int lane) {
  using T = typename StorageOf<kTypeC>::type;
  T* const c = static_cast<T*>(p.c);
  const int n = p.n;
  const int quad_row = lane / 4;
  const int quad_col = (lane % 4) * 2;
  const int cols_left = n - n0 - quad_col;  // columns of the row from this lane's first one on
  // Pair stores need an even element index (true for every row only when N is even) and C
  // aligned to a pair (4 bytes for 16-bit, 8 for f32); otherwise single-element stores.
  const bool pairs = (n & 1) == 0 && (reinterpret_cast<unsigned long long>(c) % (2 * sizeof(T))) == 0;
  const bool full_width = pairs && n0 + kWgN <= n;
  // 16-bit C: a quad's pair stores cover only 16 bytes of a row (half a 32-byte sector). After a
  // quad transpose each lane owns 8 consecutive columns and the warp writes 64 contiguous bytes
  // per row with 16-byte stores. Needs 16-byte aligned rows: N % 8 == 0 and C 16-byte aligned.
  const bool wide = kTypeC != kF32 && kWgN % 32 == 0 && full_width && (n % 8) == 0 &&
                    (reinterpret_cast<unsigned long long>(c) & 15) == 0;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int m = m0 + quad_row + 8 * h;
    const bool row_valid = m < group_rows;
    T* const row = c + static_cast<long long>(row_begin + m) * n + n0;
    if (kTypeC != kF32 && wide) {
      // `wide` is warp-uniform and the shuffles run on every lane; only the stores are masked.
      T* const lane_ptr = row + (lane % 4) * 8;
#pragma unroll
      for (int jb = 0; jb < kWgN / 32; ++jb) {
        unsigned w[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int j = 4 * jb + i;
          w[i] = pack_pair<kTypeC>(acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]);
        }
        quad_transpose(w, lane);
        if (row_valid) *reinterpret_cast<uint4*>(lane_ptr + 32 * jb) = make_uint4(w[0], w[1], w[2], w[3]);
      }
    } else if (!row_valid) {
      continue;
    } else if (kTypeC == kF32 && full_width) {
      T* const lane_ptr = row + quad_col;
#pragma unroll
      for (int j = 0; j < kWgN / 8; ++j) store_pair<kTypeC>(lane_ptr, 8 * j, acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]);
    } else {
      // Right edge of C, odd N, unaligned C (and, for 16-bit C, N % 8 != 0): every store is
      // predicated on its column, as straight-line code (a PTX predicate per store, no branches).
      const unsigned long long lane_addr = __cvta_generic_to_global(row + quad_col);
#pragma unroll
      for (int j = 0; j < kWgN / 8; ++j)
        store_edge<kTypeC>(lane_addr + 8 * j * sizeof(T), acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1], pairs, 8 * j,
                           cols_left);
    }
  }
}

// Staged epilogue: a consumer warpgroup writes its 64-row slice to shared memory; where all 64
// rows lie inside the group, TMA stores take it to C, so that the warpgroup starts the next
// tile's wgmma while the copy engine drains the stores (the tensor cores otherwise idle for the
// whole global store). A slice that crosses the group's end (the rows after it belong to the
// next group, or are masked-layout padding) is copied by the threads instead, 16 bytes at a
// time with a per-row predicate (N % 8 == 0 and C 16-byte aligned are validated on the host,
// so a 16-byte unit is wholly inside or outside N). The slice is cut into chunks of 64 rows x 128 bytes (64 16-bit or 32 fp32 columns), the box of
// the C tensor map (128-byte swizzle, so the writes below are free of bank conflicts), that
// alternate between two 8 KB buffers across chunks and tiles: a chunk may be written once every
// store that read its buffer has read it (c_staging_* in common/fusion_index.cuh keep the count:
// a group-end slice commits no store, so "wait for all but the newest" is not always enough; H100,
// v9: 64-row tiles with f32 C rewrote a buffer a TMA store was still reading). Only thread 0 of
// the warpgroup issues and waits for the stores (bulk async-groups belong to the thread).
constexpr unsigned kCStageChunkBytes = 64 * 128;
constexpr unsigned kCStageBytesPerConsumer = 2 * kCStageChunkBytes;

// The next chunk buffer of this warpgroup's staging, once every TMA store that read it has read it
// (the leader waits, then the warpgroup syncs): see above. whole: the slice has all 64 rows.
// kBuffers == 1 (the kernels with absorbed tail rows, whose stages take the second buffer's room):
// one buffer, every chunk waits for all stores' reads.
template <int kBuffers = 2>
__device__ __forceinline__ unsigned acquire_c_chunk(unsigned staging, unsigned& state, bool whole, bool leader,
                                                    int barrier_id) {
  static_assert(kBuffers == 1 || kBuffers == 2, "one or two chunk buffers per consumer");
  const unsigned buf = kBuffers == 1 ? staging : staging + c_staging_buffer(state) * kCStageChunkBytes;
  const bool wait_all = kBuffers == 1 || c_staging_wait_all(state);
  if constexpr (kBuffers == 2) state = c_staging_next(state, whole);
  if (leader) {
    if (wait_all)
      tma_store_wait_read<0>();
    else
      tma_store_wait_read<1>();
  }
  named_barrier_sync<128>(barrier_id);
  return buf;
}

// A written chunk (64 rows x 128 bytes, 128-byte swizzle) to C: by one TMA store where the slice has
// all 64 rows, else by the threads, 16 bytes at a time with a per-row predicate. row: the slice's
// first row of C; col: the chunk's first column (in elements of kElemBytes); n: columns of C.
template <int kElemBytes>
__device__ __forceinline__ void flush_c_chunk(void* c, const TmaDescriptor& tma_c, unsigned buf, int row, int rows, int col,
                                              int n, bool whole, bool leader, int warp_in_group, int lane, int barrier_id) {
  if (whole) {
    fence_proxy_async_shared();
    named_barrier_sync<128>(barrier_id);
    if (leader) {
      tma_store_2d(tma_c, buf, col, row);
      tma_store_commit();
    }
  } else {
    // 64 rows x 8 units of 16 bytes; 8 consecutive threads write one row's 128 bytes. The
    // barrier at the next use of this buffer (two chunks on) orders these reads before it.
    named_barrier_sync<128>(barrier_id);
    const int thread = warp_in_group * 32 + lane;
    const int unit = thread % 8;
    const int unit_col = col + unit * (16 / kElemBytes);
    // A rows loop, not unrolled: four unrolled copies per chunk cost ~25 ms of NVVM time in
    // every compile (docs/perf.md, JIT latency) for a path only group-end slices take.
    if (unit_col < n) {
#pragma unroll 1
      for (int r = thread / 8; r < rows; r += 16) {
        uint4 v;
        asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];"
                     : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                     : "r"(buf + r * 128 + ((unit ^ (r % 8)) * 16)));
        *reinterpret_cast<uint4*>(static_cast<unsigned char*>(c) + (static_cast<long long>(row + r) * n + unit_col) * kElemBytes) = v;
      }
    }
  }
}

// staging: this warpgroup's kBuffers chunk buffers (1024-byte aligned); row: first row of the slice
// in C (absolute); rows: its rows inside the group (1..64); n0: its first column; n: columns of C (chunks wholly past it are skipped, the
// map clips the rest); barrier_id: this warpgroup's named barrier; state: the buffers' state
// (c_staging_*), kept by the caller from tile to tile, 0 at first.
template <int kTypeC, int kWgN, int kBuffers = 2>
__device__ __forceinline__ void store_accumulators_staged(const GroupedGemmParams& p, const TmaDescriptor& tma_c,
                                                          const float (&acc)[kWgN / 2], unsigned staging, int row,
                                                          int rows, int n0, int warp_in_group, int lane,
                                                          int barrier_id, unsigned& state) {
  using T = typename StorageOf<kTypeC>::type;
  constexpr int kChunkCols = 128 / sizeof(T);
  constexpr int kGroupsPerChunk = kChunkCols / 8;  // 8-column accumulator groups per chunk
  static_assert(kWgN % kChunkCols == 0, "slice width must be a whole number of chunks");
  const int n = p.n;
  const bool leader = warp_in_group == 0 && lane == 0;
  const bool whole = rows == 64;  // uniform over the warpgroup
#pragma unroll
  for (int chunk = 0; chunk < kWgN / kChunkCols; ++chunk) {
    if (n0 + chunk * kChunkCols >= n) break;  // uniform over the warpgroup
    const unsigned buf = acquire_c_chunk<kBuffers>(staging, state, whole, leader, barrier_id);
    if constexpr (kTypeC == kF32) {
      // Lane: row lane/4 (+8), columns 2(lane%4), +1 of each 8-column group: 8 bytes inside
      // 16-byte unit (2 j + (lane%4)/2) of the 128-byte row; the swizzle XORs the unit with row % 8.
#pragma unroll
      for (int jj = 0; jj < kGroupsPerChunk; ++jj) {
        const int j = chunk * kGroupsPerChunk + jj;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int r = warp_in_group * 16 + lane / 4 + 8 * h;
          const unsigned unit = 2 * jj + (lane % 4) / 2;
          const unsigned addr = buf + r * 128 + ((unit ^ (r % 8)) * 16) + (lane % 2) * 8;
          asm volatile("st.shared.v2.f32 [%0], {%1, %2};" ::"r"(addr), "f"(acc[4 * j + 2 * h]),
                       "f"(acc[4 * j + 2 * h + 1])
                       : "memory");
        }
      }
    } else {
      // stmatrix x4: matrices (rows 0-7, group j), (rows 8-15, group j), (rows 0-7, group j+1),
      // (rows 8-15, group j+1) of the warp's 16 rows; each matrix fragment is exactly the
      // accumulator layout (row lane/4, columns 2(lane%4), +1), and lane l gives the address of
      // row l%8 of matrix l/8. A row of a group is one 16-byte unit; swizzle: unit ^ (row % 8).
      const int matrix = lane / 8;
      const int r = warp_in_group * 16 + 8 * (matrix & 1) + lane % 8;
#pragma unroll
      for (int jj = 0; jj < kGroupsPerChunk; jj += 2) {
        const int j = chunk * kGroupsPerChunk + jj;
        const unsigned unit = jj + (matrix >> 1);
        const unsigned addr = buf + r * 128 + ((unit ^ (lane % 8)) * 16);
        asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(addr),
                     "r"(pack_pair<kTypeC>(acc[4 * j], acc[4 * j + 1])),
                     "r"(pack_pair<kTypeC>(acc[4 * j + 2], acc[4 * j + 3])),
                     "r"(pack_pair<kTypeC>(acc[4 * j + 4], acc[4 * j + 5])),
                     "r"(pack_pair<kTypeC>(acc[4 * j + 6], acc[4 * j + 7]))
                     : "memory");
      }
    }
    flush_c_chunk<sizeof(T)>(p.c, tma_c, buf, row, rows, n0 + chunk * kChunkCols, n, whole, leader, warp_in_group, lane,
                             barrier_id);
  }
}

}  // namespace moejit::hopper
