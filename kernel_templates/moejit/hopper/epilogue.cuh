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

// m0: group-local row of this warp's first accumulator row; n0: first column of the warpgroup's slice.
// zero: K == 0, no wgmma ran and the accumulators hold garbage; C is the empty sum.
template <int kTypeC, int kWgN>
__device__ __forceinline__ void store_accumulators(const GroupedGemmParams& p, const float (&acc_in)[kWgN / 2],
                                                   bool zero, int row_begin, int group_rows, int m0, int n0,
                                                   int lane) {
  float acc[kWgN / 2];
#pragma unroll
  for (int i = 0; i < kWgN / 2; ++i) acc[i] = zero ? 0.f : acc_in[i];
  const int n = p.n;
  const int quad_row = lane / 4;
  const int quad_col = (lane % 4) * 2;
  // Pair stores need an even element index (true for every row only when N is even) and C
  // aligned to a pair (4 bytes for 16-bit, 8 for f32); otherwise single-element stores.
  constexpr unsigned long long kPairBytes = kTypeC == kF32 ? 8 : 4;
  const bool pairs = (n & 1) == 0 && (reinterpret_cast<unsigned long long>(p.c) % kPairBytes) == 0;
  const bool full_width = pairs && n0 + kWgN <= n;
  // 16-bit C: a quad's pair stores cover only 16 bytes of a row (half a 32-byte sector). After a
  // quad transpose each lane owns 8 consecutive columns and the warp writes 64 contiguous bytes
  // per row with 16-byte stores. Needs 16-byte aligned rows: N % 8 == 0 and C 16-byte aligned.
  const bool wide = kTypeC != kF32 && kWgN % 32 == 0 && full_width && (n % 8) == 0 &&
                    (reinterpret_cast<unsigned long long>(p.c) & 15) == 0;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int m = m0 + quad_row + 8 * h;
    const bool row_valid = m < group_rows;
    const long long row_index = static_cast<long long>(row_begin + m) * n;
    if (wide) {
      // `wide` is warp-uniform and the shuffles run on every lane; only the stores are masked.
      unsigned short* row_ptr = static_cast<unsigned short*>(p.c) + row_index + n0 + (lane % 4) * 8;
#pragma unroll
      for (int jb = 0; jb < kWgN / 32; ++jb) {
        unsigned w[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int j = 4 * jb + i;
          w[i] = pack_pair<kTypeC>(acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]);
        }
        quad_transpose(w, lane);
        if (row_valid) *reinterpret_cast<uint4*>(row_ptr + 32 * jb) = make_uint4(w[0], w[1], w[2], w[3]);
      }
    } else if (!row_valid) {
      continue;
    } else if (full_width) {
#pragma unroll
      for (int j = 0; j < kWgN / 8; ++j) {
        store_pair<kTypeC>(p.c, row_index + n0 + 8 * j + quad_col, acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]);
      }
    } else {
#pragma unroll
      for (int j = 0; j < kWgN / 8; ++j) {
        const int col = n0 + 8 * j + quad_col;
        if (pairs && col + 1 < n) {
          store_pair<kTypeC>(p.c, row_index + col, acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]);
        } else {
          if (col < n) store_one<kTypeC>(p.c, row_index + col, acc[4 * j + 2 * h]);
          if (col + 1 < n) store_one<kTypeC>(p.c, row_index + col + 1, acc[4 * j + 2 * h + 1]);
        }
      }
    }
  }
}

}  // namespace moejit::hopper
