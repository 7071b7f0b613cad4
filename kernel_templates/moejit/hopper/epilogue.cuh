// Writing a consumer warpgroup's wgmma accumulators to C, with the grouped-GEMM masks:
// rows past the group's end (the next group's rows, or masked-layout padding) and columns
// past N are never written.
//
// wgmma m64nN accumulator layout (per thread of the warpgroup): warp w holds rows 16w..16w+15;
// register 4j + 2h + e is row 16w + lane/4 + 8h, column 8j + 2(lane%4) + e.
#pragma once
#include "moejit/params.cuh"
#include "moejit/common/types.cuh"

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

}  // namespace moejit::hopper
