// FP8 (E4M3) operands and weight-only 4-bit B for the portable family. 4-bit: the pre-arranged MXFP4 / NVFP4 blocks of
// pack_w4_sm90 (include/moejit/formats.hpp, "W4 SM90"; one layout for both families) widened to
// BF16 by the CUDA cores into the same shared-memory stage the 16-bit kernel's cp.async fills, so
// the ldmatrix + mma.sync mainloop is unchanged. Correctness first (the reference path on any
// GPU): the loads are synchronous byte loads, not overlapped with the MMAs like cp.async.
#pragma once
#include "moejit/common/types.cuh"
#include "moejit/common/w4_layout.cuh"
#include "moejit/common/fusion_index.cuh"  // split_glu_tile_row
#include "moejit/hopper_w4/e2m1.cuh"  // integer-only E2M1 / E8M0 bit placement (no sm_90 instruction)

namespace moejit::portable {

// bf16x2 product on sm_80 (mul.bf16x2 needs sm_90): fma with -0 as the addend; exact wherever the
// product is (E2M1 x scale always is).
__device__ __forceinline__ unsigned bf16x2_mul_sm80(unsigned a, unsigned b) {
  unsigned d;
  asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(0x80008000u));
  return d;
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
// kSplit (B of fuse act=swiglu*, glu=split): tile row 2i is gate row out0 + i, 2i + 1 up row
// half_n + out0 + i of the group (split_glu_tile_row), as the 16-bit OperandLoader::init_split.
template <int kRows, int kBlockK, int kThreads, int kPitch, bool kSplit = false>
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
  int out0, half_n;  // kSplit only (unused otherwise: never read, so no registers)
  __device__ __forceinline__ void init_split(const void* group_base, int first_out, int half, int rows_present,
                                             long long stride) {
    init(group_base, rows_present, stride);
    out0 = first_out;
    half_n = half;
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
        const long long src_row = kSplit ? (long long)split_glu_tile_row(local, out0, half_n) : (long long)local;
        asm volatile("ld.global.nc.v2.b32 {%0, %1}, [%2];"
                     : "=r"(w0), "=r"(w1)
                     : "l"(src + src_row * row_stride + kabs));
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

// The A operand of FP8 with fuse=gather: tile row i is E4M3 row rows[i] of A (token order),
// widened like E4m3WidenLoader; an index outside [0, num_tokens) reads a zero row. The kernel
// gathers the rows' activation scales by the same tokens (scale_a is [K blocks][num_tokens]).
template <int kRows, int kBlockK, int kThreads, int kPitch>
struct E4m3GatherLoader {
  static constexpr int kChunksPerRow = kBlockK / 8;
  static constexpr int kRowsPerPass = kThreads / kChunksPerRow;
  static constexpr int kPasses = (kRows + kRowsPerPass - 1) / kRowsPerPass;
  static_assert(kThreads % kChunksPerRow == 0, "a pass of the CTA must cover whole rows");

  int token[kPasses];  // -1: absent row

  __device__ __forceinline__ void init(const int* rows, int rows_valid, int num_tokens) {
    const int row = (int)threadIdx.x / kChunksPerRow;
#pragma unroll
    for (int i = 0; i < kPasses; ++i) {
      const int r = row + i * kRowsPerPass;
      int t = -1;
      if ((kRows % kRowsPerPass == 0 || r < kRows) && r < rows_valid) t = __ldg(rows + r);
      token[i] = (unsigned)t < (unsigned)num_tokens ? t : -1;
    }
  }

  __device__ __forceinline__ void load(unsigned stage_address, int k_begin, int k, const void* base) const {
    const int row = (int)threadIdx.x / kChunksPerRow;
    const int kabs = k_begin + ((int)threadIdx.x % kChunksPerRow) * 8;
    const unsigned dst = (unsigned)(row * kPitch + ((int)threadIdx.x % kChunksPerRow) * 8) * 2u;
#pragma unroll
    for (int i = 0; i < kPasses; ++i) {
      if (kRows % kRowsPerPass != 0 && row + i * kRowsPerPass >= kRows) continue;
      unsigned out[4] = {0u, 0u, 0u, 0u};
      if (kabs < k && token[i] >= 0) {
        unsigned w0, w1;
        asm volatile("ld.global.nc.v2.b32 {%0, %1}, [%2];"
                     : "=r"(w0), "=r"(w1)
                     : "l"(static_cast<const unsigned char*>(base) + (long long)token[i] * k + kabs));
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
// kSplit (fuse act=swiglu*, glu=split): tile row 2i is weight row first_row / 2 + i (gate), 2i + 1
// weight row n / 2 + first_row / 2 + i (up), as the 16-bit OperandLoader::init_split.
template <int kRows, int kBlockK, int kThreads, int kFormat, int kPitch, bool kSplit = false>
struct W4WidenLoader {
  static constexpr int kChunksPerRow = kBlockK / 8;
  static constexpr int kRowsPerPass = kThreads / kChunksPerRow;
  static constexpr int kPasses = (kRows + kRowsPerPass - 1) / kRowsPerPass;
  static constexpr bool kNv = kFormat == kNVFP4;
  static constexpr int kScaleBytes = kFormat == kNVFP4 ? 8 : 4;        // per fragment thread
  static_assert(kThreads % kChunksPerRow == 0, "a pass of the CTA must cover whole rows");
  static_assert(kBlockK % 16 == 0 && 64 % kBlockK == 0, "k-blocks must tile the 64-wide packed blocks");

  const unsigned char* group_blocks;  // this expert's packed weights (its first 128-row run)
  int k_blocks64;                     // packed blocks per 128 rows
  int row;                            // this thread's row of pass 0, inside the tile
  int tile_col;                       // first weight row (N index) of the tile
  int rows_valid;
  int k_offset;
  int half_n;  // kSplit only
  unsigned dst;

  __device__ __forceinline__ void init(const void* packed, int group, int first_row, int rows_present, int n, int k) {
    half_n = n / 2;
    row = (int)threadIdx.x / kChunksPerRow;
    k_offset = ((int)threadIdx.x % kChunksPerRow) * 8;
    k_blocks64 = (k + 63) / 64;
    const long long n_blocks = (n + 127) / 128;
    group_blocks = static_cast<const unsigned char*>(packed) + group * n_blocks * w4_sm90_run_bytes(k_blocks64, kNv);
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
        const int weight_row = kSplit ? split_glu_tile_row(local, tile_col / 2, half_n) : tile_col + local;
        const W4Offsets at = w4_sm90_offsets(weight_row, kabs, k_blocks64, kNv);
        const unsigned char* block = group_blocks + at.block;
        const unsigned scale_byte = __ldg(block + at.scale);
        // MXFP4: the stored scale is relative to the row's exponent; 129 marks a NaN block. NVFP4:
        // stored re-encoded, widened to scale x 2^117 (formats.hpp, w4_sm90_nvfp4_factor_bits).
        unsigned scale;
        if constexpr (kNv) {
          scale = w4_sm90_nvfp4_factor_bits(scale_byte);
          scale |= scale << 16;
        } else {
          scale = hopper::e8m0_to_bf16x2(scale_byte == 129u ? 255u : min(scale_byte + __ldg(group_blocks + at.exponent), 255u));
        }
        // The pair is one of four in a stored (bit-scattered) word: common/w4_layout.cuh.
        const unsigned* words = reinterpret_cast<const unsigned*>(block + (at.code & ~3));
        const int pair = at.code & 3;
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          const unsigned bits = hopper::e2m1_pair_bits_as_bf16x2(__ldg(words + c * 4), pair);
          // MXFP4: x 2^126, x scale. NVFP4: x (scale x 2^117) = value x scale x 2^-9 (at least
          // 2^-19, 6 significant bits: exact), then x 2^9.
          out[c] = kNv ? bf16x2_mul_sm80(bf16x2_mul_sm80(bits, scale), 0x44004400u)
                       : bf16x2_mul_sm80(bf16x2_mul_sm80(bits, 0x7E807E80u), scale);
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
