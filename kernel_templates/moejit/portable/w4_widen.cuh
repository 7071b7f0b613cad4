// FP8 (E4M3) operands and weight-only 4-bit B for the portable family. 4-bit: the pre-arranged MXFP4 / NVFP4 blocks of
// pack_w4_sm90 (include/moejit/formats.hpp, "W4 SM90"; one layout for both families) widened to
// BF16 by the CUDA cores into the same shared-memory stage the 16-bit kernel's cp.async fills, so
// the ldmatrix + mma.sync mainloop is unchanged. Correctness first (the reference path on any
// GPU): the loads are synchronous byte loads, not overlapped with the MMAs like cp.async.
#pragma once
#include "moejit/common/types.cuh"
#include "moejit/common/w4_layout.cuh"
#include "moejit/hopper_w4/e2m1.cuh"  // integer-only E2M1 / E8M0 bit placement (no sm_90 instruction)

namespace moejit::portable {

// bf16x2 product on sm_80 (mul.bf16x2 needs sm_90): fma with -0 as the addend; exact wherever the
// product is (E2M1 x scale always is).
__device__ __forceinline__ unsigned bf16x2_mul_sm80(unsigned a, unsigned b) {
  unsigned d;
  asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(0x80008000u));
  return d;
}

// E4M3 block scale (positive) -> BF16 pair: magnitude bits at BF16 bits 10..4 read as value x
// 2^-120 (see hopper::e4m3_to_bf16x2), then one exact multiply by 2^120. NaN stays NaN.
__device__ __forceinline__ unsigned e4m3_to_bf16x2_sm80(unsigned s) {
  if ((s & 0x7Fu) == 0x7Fu) return 0x7FC07FC0u;
  const unsigned bits = (s & 0x7Fu) << 4;
  return bf16x2_mul_sm80(bits | (bits << 16), 0x7B807B80u);
}

// E4M3 pair (byte 0 = lower K in the low half) -> BF16 pair, exact: sign to bit 15, magnitude
// bits at BF16 bits 10..4 (value x 2^-120), one multiply by 2^120. NaN (S.1111.111) stays NaN.
__device__ __forceinline__ unsigned e4m3x2_to_bf16x2_sm80(unsigned two_bytes) {
  const unsigned lo = two_bytes & 0xFFu, hi = (two_bytes >> 8) & 0xFFu;
  const unsigned bits = ((lo & 0x80u) << 8) | ((lo & 0x7Fu) << 4) | ((hi & 0x80u) << 24) | ((hi & 0x7Fu) << 20);
  unsigned out = bf16x2_mul_sm80(bits, 0x7B807B80u);
  if ((lo & 0x7Fu) == 0x7Fu) out = (out & 0xFFFF0000u) | 0x7FC0u;
  if ((hi & 0x7Fu) == 0x7Fu) out = (out & 0x0000FFFFu) | 0x7FC00000u;
  return out;
}

namespace detail {

// The per-thread part of loading one k-block of a kRows x kBlockK tile of E4M3 (FP8 A or B): the
// OperandLoader's chunk mapping (8 K of one row per chunk), each chunk's 8 bytes read from global
// memory and widened exactly to BF16 into the stage. Scales are applied by the kernel's promotion.
template <int kRows, int kBlockK, int kThreads, int kPitch>
struct E4m3WidenLoader {
  static constexpr int kChunksPerRow = kBlockK / 8;
  static constexpr int kRowsPerPass = kThreads / kChunksPerRow;
  static constexpr int kPasses = (kRows + kRowsPerPass - 1) / kRowsPerPass;
  static_assert(kThreads % kChunksPerRow == 0, "a pass of the CTA must cover whole rows");

  const unsigned char* src;  // this thread's row of pass 0 at k = 0 (only formed for a present row)
  long long row_stride;      // bytes between rows
  int row, rows_valid, k_offset;
  unsigned dst;

  __device__ __forceinline__ void init(const void* tile_base, int rows_present, long long stride) {
    row = (int)threadIdx.x / kChunksPerRow;
    k_offset = ((int)threadIdx.x % kChunksPerRow) * 8;
    rows_valid = rows_present;
    row_stride = stride;
    src = static_cast<const unsigned char*>(tile_base);
    dst = (unsigned)(row * kPitch + k_offset) * 2u;
  }

  __device__ __forceinline__ void load(unsigned stage_address, int k_begin, int k) const {
    const int kabs = k_begin + k_offset;  // K % 16 == 0 for e4m3: a chunk is all in or all out
#pragma unroll
    for (int i = 0; i < kPasses; ++i) {
      const int local = row + i * kRowsPerPass;
      if (kRows % kRowsPerPass != 0 && local >= kRows) continue;
      unsigned out[4] = {0u, 0u, 0u, 0u};
      if (kabs < k && local < rows_valid) {
        unsigned w0, w1;
        asm volatile("ld.global.nc.v2.b32 {%0, %1}, [%2];"
                     : "=r"(w0), "=r"(w1)
                     : "l"(src + local * row_stride + kabs));
        out[0] = e4m3x2_to_bf16x2_sm80(w0);
        out[1] = e4m3x2_to_bf16x2_sm80(w0 >> 16);
        out[2] = e4m3x2_to_bf16x2_sm80(w1);
        out[3] = e4m3x2_to_bf16x2_sm80(w1 >> 16);
      }
      const unsigned address = stage_address + dst + (unsigned)(i * kRowsPerPass * kPitch * 2);
      asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};" ::"r"(address), "r"(out[0]), "r"(out[1]), "r"(out[2]),
                   "r"(out[3])
                   : "memory");
    }
  }
};

// The per-thread part of widening one k-block of a kRows x kBlockK tile of 4-bit B: the same
// chunk-to-thread mapping as OperandLoader (16 bytes of BF16 = 8 K of one row per chunk), so the
// stage layout is the 16-bit kernel's. kPitch: row pitch of a stage in 16-bit elements.
template <int kRows, int kBlockK, int kThreads, int kFormat, int kPitch>
struct W4WidenLoader {
  static constexpr int kChunksPerRow = kBlockK / 8;
  static constexpr int kRowsPerPass = kThreads / kChunksPerRow;
  static constexpr int kPasses = (kRows + kRowsPerPass - 1) / kRowsPerPass;
  static constexpr int kBlockBytes = kFormat == kNVFP4 ? 6144 : 5120;  // 128 rows x 64 K
  static constexpr int kScaleBytes = kFormat == kNVFP4 ? 8 : 4;        // per fragment thread
  static_assert(kThreads % kChunksPerRow == 0, "a pass of the CTA must cover whole rows");
  static_assert(kBlockK % 16 == 0 && 64 % kBlockK == 0, "k-blocks must tile the 64-wide packed blocks");

  const unsigned char* group_blocks;  // this expert's first packed block
  int k_blocks64;                     // packed blocks per 128 rows
  int row;                            // this thread's row of pass 0, inside the tile
  int tile_col;                       // first weight row (N index) of the tile
  int rows_valid;
  int k_offset;
  unsigned dst;

  __device__ __forceinline__ void init(const void* packed, int group, int first_row, int rows_present, int n, int k) {
    row = (int)threadIdx.x / kChunksPerRow;
    k_offset = ((int)threadIdx.x % kChunksPerRow) * 8;
    k_blocks64 = (k + 63) / 64;
    const long long n_blocks = (n + 127) / 128;
    group_blocks = static_cast<const unsigned char*>(packed) + group * n_blocks * k_blocks64 * kBlockBytes;
    tile_col = first_row;
    rows_valid = rows_present;
    dst = (unsigned)(row * kPitch + k_offset) * 2u;
  }

  __device__ __forceinline__ void load(unsigned stage_address, int k_begin, int k) const {
    const int kabs = k_begin + k_offset;  // K is a multiple of the scale block: a chunk is all in or all out
#pragma unroll
    for (int i = 0; i < kPasses; ++i) {
      const int local = row + i * kRowsPerPass;
      if (kRows % kRowsPerPass != 0 && local >= kRows) continue;
      unsigned out[4] = {0u, 0u, 0u, 0u};
      if (kabs < k && local < rows_valid) {
        // Fragment position of (weight row r, K kabs .. kabs + 7) in the packed block (formats.hpp);
        // K pair kabs + 2c, + 1 lives in fragment thread c, 16 bytes after thread c - 1's.
        const W4Offsets at = w4_sm90_offsets(tile_col + local, kabs, k_blocks64, kFormat == kNVFP4);
        const unsigned char* block = group_blocks + at.block * kBlockBytes;
        const unsigned scale_byte = __ldg(block + at.scale);
        const unsigned scale = kFormat == kNVFP4 ? e4m3_to_bf16x2_sm80(scale_byte) : hopper::e8m0_to_bf16x2(scale_byte);
        const unsigned char* codes = block + at.code;
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          const unsigned bits = hopper::e2m1x2_bits_as_bf16x2<0>(__ldg(codes + c * 16));
          out[c] = bf16x2_mul_sm80(bf16x2_mul_sm80(bits, 0x7E807E80u), scale);  // x 2^126, x scale
        }
      }
      const unsigned address = stage_address + dst + (unsigned)(i * kRowsPerPass * kPitch * 2);
      asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};" ::"r"(address), "r"(out[0]), "r"(out[1]), "r"(out[2]),
                   "r"(out[3])
                   : "memory");
    }
  }
};

}  // namespace detail
}  // namespace moejit::portable
