// Where a weight lives in the pre-arranged 4-bit layout (include/moejit/formats.hpp, "W4 SM90"),
// as one function that kernels use and the host tests check against pack_w4_sm90, so that a
// kernel's address arithmetic is verified without a GPU. Plain C++ with __host__ __device__.
#pragma once

#if !defined(__CUDACC__) && !defined(__CUDACC_RTC__)
#ifndef __host__
#define __host__
#endif
#ifndef __device__
#define __device__
#endif
#endif

namespace moejit {

// Scale bytes per quad (the four fragment threads of lane / 4, which multiply the same two rows
// r0, r1 over the same K blocks): MXFP4 2 rows x 2 blocks of 32, NVFP4 2 rows x 4 blocks of 16.
// One copy per quad: until v13 each thread had its own (4x the scale bytes: 18% / 33% more bytes
// per block for MXFP4 / NVFP4 to stream at decode, where the weights' bytes are the floor).
__host__ __device__ constexpr int w4_sm90_quad_scale_bytes(bool nvfp4) { return nvfp4 ? 8 : 4; }
// Bytes of one block of 128 weight rows x 64 K: 4096 of codes, then the scales of 2 x 32 quads:
// 4352 (MXFP4) or 4608 (NVFP4), the format's own bytes (codes + one scale per block and row).
__host__ __device__ constexpr int w4_sm90_block_bytes(bool nvfp4) { return 4096 + 64 * w4_sm90_quad_scale_bytes(nvfp4); }
// Byte offset, inside a block, of the scales of fragment thread `thread` = w * 128 + t (w: the
// 64-row part, t: 0..127 within it): its quad's (thread / 4) copy.
__host__ __device__ constexpr int w4_sm90_scale_offset(int thread, bool nvfp4) {
  return 4096 + (thread / 4) * w4_sm90_quad_scale_bytes(nvfp4);
}
// Bytes before each 128-row block's run of K blocks: MXFP4's row exponents (one byte per row; the
// stored scales are relative to them, formats.hpp), none for NVFP4.
__host__ __device__ constexpr int w4_sm90_header_bytes(bool nvfp4) { return nvfp4 ? 0 : 128; }
// Bytes of one 128-row block's run: the header, then k_blocks64 blocks. An expert is
// ceil(N / 128) runs. The count widens as unsigned (it is never negative): its sign extension was
// a value of its own, which the Hopper 4-bit kernel's gathering producer spilled (v21).
__host__ __device__ constexpr long long w4_sm90_run_bytes(int k_blocks64, bool nvfp4) {
  return w4_sm90_header_bytes(nvfp4) + static_cast<long long>(static_cast<unsigned>(k_blocks64)) * w4_sm90_block_bytes(nvfp4);
}

// Shared memory of the Hopper 4-bit kernel's staged epilogue (tiles of 128 and 256 tokens): per
// consumer warpgroup 128 token rows of its 64 C columns (128 bytes), rows 144 bytes apart (the 16
// spare bytes put stmatrix's 8 rows of a matrix on 8 different bank quads; the unfused kernels use
// 128-byte rows with the 128-byte swizzle instead, for TMA stores), + 1024 bytes to align it to the
// swizzle atom. Smaller tiles store from registers and need none (they run two CTAs per SM, which
// the 37 KB would not leave room for).
// The unfused 256-token tile stores two 128-token passes per tile and double-buffers them: each
// consumer has two 16 KB buffers (128-byte rows), so that the second pass need not wait for the
// first pass's TMA store to finish reading its buffer (Nsight Compute, MXFP4 Qwen3 down 16384,
// K = 768: that wait held ~4% of the warps' samples). 4 stages and the tail slots still fit.
__host__ __device__ constexpr int w4_sm90_c_staging_row_bytes() { return 144; }
__host__ __device__ constexpr bool w4_sm90_c_double_staged(int tokens, bool epilogue_fused) {
  return tokens == 256 && !epilogue_fused;
}
// One consumer's staging, which is also the stride between the two consumers' stagings.
__host__ __device__ constexpr int w4_sm90_c_staging_consumer_bytes(int tokens, bool epilogue_fused) {
  return w4_sm90_c_double_staged(tokens, epilogue_fused) ? 2 * 128 * 128 : 128 * w4_sm90_c_staging_row_bytes();
}
__host__ __device__ constexpr int w4_sm90_c_staging_bytes(int tokens, bool epilogue_fused) {
  return tokens < 128 ? 0 : 2 * w4_sm90_c_staging_consumer_bytes(tokens, epilogue_fused) + 1024;
}

// Rows past a whole 128- or 256-token tile that a group's last such tile multiplies too, instead of a
// tile of its own (16 where the producer gathers the rows, in whole 16-row steps): each widened weight then serves up to 24 more tokens. Why: the
// widening, not the MMA, paces a tile, so a group's short last tile cost nearly a whole one; random
// routing ends about half the 512 +- 22-row groups of DeepSeek-V3 and gpt-oss at 16384 tokens (and
// of the 128 +- 11-row ones at 4096) a few rows into a tile (docs/perf.md v23). 24: with 8 stages
// the extra rows' 3 KB per stage still fit in 227 KB (32 would not); the 256-token tile then takes 4
// stages (5 do not fit). Static scheduler only: with the dynamic one's 232-register consumers ptxas
// serialized the MXFP4 tile's wgmmas (C7511).
__host__ __device__ constexpr int w4_sm90_tail_rows(int tokens, bool gathered, bool dynamic) {
  return (tokens == 128 || tokens == 256) && !dynamic ? (gathered ? 16 : 24) : 0;
}

// Code words. The fragment layout (formats.hpp) names "code byte" 4 kk + p: the pair p = 0..3 of
// the thread's 32-bit word kk. In memory each word holds its four pairs' 32 bits scattered so that
// the kernel finds each pair's bits where a BF16 pair keeps them (hopper_w4/e2m1.cuh): code A
// (lower K) bits m, e0, e1, sign at BF16 bits 6, 7, 8, 15, code B's at 22, 23, 24, 31 (mask
// kW4Sm90PairMask). Pairs 0, 1, 2 are stored at those bits rotated left by 0, 3 and 6, so a rotate
// and an AND widen them (pair 0: the AND alone); no fourth rotation fits the bits left over, and
// pair 3 takes them as (A: m, e0, e1, sign) at bits (3, 4, 0, 1), B the same + 16, which a multiply
// by 2^3 + 2^8 + 2^14 moves into place without two copies meeting (so without carries). 8 integer
// instructions per word of four pairs; the 2-bit-field table lookup before (2026-11-25, v12) took 11.
// Stored bit of logical bit i (0..7: A's m, e0, e1, sign, then B's) of pair p.
constexpr unsigned kW4Sm90PairMask = 0x81C081C0u;
__host__ __device__ constexpr int w4_sm90_code_bit(int p, int i) {
  const int half = (i & 4) * 4;  // code B: + 16
  const int role = i & 3;        // m, e0, e1, sign
  if (p == 3) return half + ((0x1043 >> (4 * role)) & 0xF);  // at bits 3, 4, 0, 1
  return (half + (role == 3 ? 15 : 6 + role) + 3 * p) % 32;
}

// Logical word (byte p = pair p: A in the low nibble, B in the high one) -> stored word.
__host__ __device__ inline unsigned w4_sm90_interleave_codes(unsigned logical) {
  unsigned out = 0;
  for (int p = 0; p < 4; ++p)
    for (int i = 0; i < 8; ++i) out |= ((logical >> (8 * p + i)) & 1u) << w4_sm90_code_bit(p, i);
  return out;
}

// Stored word -> logical pair p (A in the low nibble, B in the high one).
__host__ __device__ inline unsigned w4_sm90_code_pair(unsigned stored, int p) {
  unsigned out = 0;
  for (int i = 0; i < 8; ++i) out |= ((stored >> w4_sm90_code_bit(p, i)) & 1u) << i;
  return out;
}

// Pair p of a stored word -> its codes' bits at their BF16 places (kW4Sm90PairMask), the first
// step of the kernels' widening (hopper_w4/e2m1.cuh), here so that the host tests check it: pairs
// 0-2 a rotate (SHF.R.W) and an AND, pair 3 an AND, a multiply and an AND.
template <int kPair>
__host__ __device__ constexpr unsigned w4_sm90_pair_bf16_bits(unsigned word) {
  static_assert(kPair >= 0 && kPair < 4, "four code pairs per word");
  if (kPair == 3) return ((word & 0x001B001Bu) * ((1u << 3) + (1u << 8) + (1u << 14))) & kW4Sm90PairMask;
  return ((word >> (3 * kPair)) | (word << ((32 - 3 * kPair) & 31))) & kW4Sm90PairMask;
}

// The same for a pair chosen at run time (the portable family's loader, the host tests).
__host__ __device__ inline unsigned w4_sm90_pair_bf16_bits(unsigned word, int pair) {
  switch (pair) {
    case 0: return w4_sm90_pair_bf16_bits<0>(word);
    case 1: return w4_sm90_pair_bf16_bits<1>(word);
    case 2: return w4_sm90_pair_bf16_bits<2>(word);
    default: return w4_sm90_pair_bf16_bits<3>(word);
  }
}

// NVFP4 block scales as stored (layout 4, docs/perf.md v20). An E4M3 scale is widened per pair of
// rows in two instructions, as MXFP4's is (a byte permute and a multiply-add): the stored byte
// b = (E << 3) | M means 2^(E - 10) (1 + M / 8), so (b << 4) + (234 << 7) are the BF16 bits of
// scale x 2^117 (exponent field E + 234, top mantissa bits M). E4M3's subnormals (m x 2^-9) become
// normal numbers there (E = 1..3), its normals 2^(e - 7) (1 + m / 8) have E = e + 3 (4..18).
// Before, the kernel converted through F16 and F32: 5 instructions per pair of rows against 2.
// pack_w4_sm90 makes every block fit: a negative scale's sign moves to the block's codes (E2M1
// negation is exact), a zero scale zeroes its codes (stored 0, any factor times a zero code is 0),
// and a NaN scale is stored as kW4Sm90Nvfp4NanScale, whose factor is NaN (0x7FC0).
constexpr unsigned kW4Sm90Nvfp4NanScale = (21u << 3) | 4u;  // exponent field 21 + 234 = 255
// Stored byte of a nonzero, non-NaN E4M3 magnitude (bits 0..6 of the E4M3 byte, 1..0x7E).
__host__ __device__ constexpr unsigned w4_sm90_nvfp4_stored_scale(unsigned e4m3_magnitude) {
  const unsigned e = e4m3_magnitude >> 3, m = e4m3_magnitude & 7u;
  if (e != 0) return ((e + 3u) << 3) | m;
  const unsigned p = m >= 4 ? 2u : m >= 2 ? 1u : 0u;  // m x 2^-9 = 2^(p - 9) (1 + f / 8)
  return ((p + 1u) << 3) | (((m - (1u << p)) << (3u - p)) & 7u);
}
// Inverse: stored byte -> E4M3 byte (0 -> 0, kW4Sm90Nvfp4NanScale -> 0x7F).
__host__ __device__ constexpr unsigned w4_sm90_nvfp4_scale_e4m3(unsigned stored) {
  if (stored == 0) return 0;
  if (stored == kW4Sm90Nvfp4NanScale) return 0x7Fu;
  const unsigned big_e = stored >> 3, m = stored & 7u;
  return big_e >= 4 ? ((big_e - 3u) << 3) | m : (8u + m) >> (4u - big_e);
}
// BF16 bits of the stored scale x 2^117 (the kernels widen two rows at once: the same
// multiply-add on a word holding one stored byte per 16-bit half).
__host__ __device__ constexpr unsigned w4_sm90_nvfp4_factor_bits(unsigned stored) { return (stored << 4) + 0x7500u; }

struct W4Offsets {
  long long block;     // byte offset, inside its expert, of the 128-row x 64-K block holding (r, k)
  long long exponent;  // MXFP4: byte offset, inside its expert, of row r's exponent; NVFP4: -1
  int code;            // logical code byte of (r, k) and (r, k + 1), k even: pair code % 4 of the
                       // stored word at code - code % 4 (w4_sm90_code_pair)
  int scale;           // byte of the block holding the scale of (r, k)
};

// Weight row r (N index) and K index k (even) of one expert; k_blocks64 = ceil(K / 64).
__host__ __device__ inline W4Offsets w4_sm90_offsets(int r, int k, int k_blocks64, bool nvfp4) {
  const int rr = r % 128, w = rr / 64, warp = (rr % 64) / 16, h = (rr % 16) / 8, q = rr % 8;
  const int kin = k % 64, kk = kin / 16, half = (kin % 16) / 8, c = (kin % 8) / 2;
  const int thread0 = w * 128 + warp * 32 + q * 4;  // the fragment thread of c = 0 (lane = 4 q + c)
  const long long run = static_cast<long long>(r / 128) * w4_sm90_run_bytes(k_blocks64, nvfp4);
  W4Offsets out;
  out.block = run + w4_sm90_header_bytes(nvfp4) + static_cast<long long>(k / 64) * w4_sm90_block_bytes(nvfp4);
  out.exponent = nvfp4 ? -1 : run + rr;
  out.code = (thread0 + c) * 16 + kk * 4 + h + 2 * half;
  out.scale = w4_sm90_scale_offset(thread0, nvfp4) + h + 2 * (nvfp4 ? kk : kin / 32);
  return out;
}

}  // namespace moejit
