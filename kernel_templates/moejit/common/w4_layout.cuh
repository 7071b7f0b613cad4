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
// ceil(N / 128) runs.
__host__ __device__ constexpr long long w4_sm90_run_bytes(int k_blocks64, bool nvfp4) {
  return w4_sm90_header_bytes(nvfp4) + static_cast<long long>(k_blocks64) * w4_sm90_block_bytes(nvfp4);
}

// Code words. The fragment layout (formats.hpp) names "code byte" 4 kk + p: the pair p = 0..3 of
// the thread's 32-bit word kk. In memory each word holds its four pairs bit-interleaved: pair p's
// codes A (lower K) and B sit as 2-bit fields at bit w4_sm90_pair_shift(p) + {0, 4, 8, 12} =
// {A bits 1..0, A bits 3..2, B bits 1..0, B bits 3..2}. Why: (word >> shift) & 0x3333 is then
// four byte-permute selectors, and one prmt over an 8-byte table widens the pair to BF16 bits
// (hopper_w4/e2m1.cuh): a shift, a LOP3 and a PRMT per pair instead of ~3.75 integer operations.
__host__ __device__ constexpr int w4_sm90_pair_shift(int p) { return (p & 1) * 2 + (p >> 1) * 16; }

// Logical word (byte p = pair p: A in the low nibble, B in the high one) -> stored word.
__host__ __device__ inline unsigned w4_sm90_interleave_codes(unsigned logical) {
  unsigned out = 0;
  for (int p = 0; p < 4; ++p) {
    const unsigned byte = (logical >> (8 * p)) & 0xFFu, a = byte & 0xFu, b = byte >> 4;
    const int s = w4_sm90_pair_shift(p);
    out |= ((a & 3u) << s) | ((a >> 2) << (s + 4)) | ((b & 3u) << (s + 8)) | ((b >> 2) << (s + 12));
  }
  return out;
}

// Stored word -> logical pair p (A in the low nibble, B in the high one).
__host__ __device__ inline unsigned w4_sm90_code_pair(unsigned stored, int p) {
  const unsigned f = stored >> w4_sm90_pair_shift(p);
  return (f & 3u) | (((f >> 4) & 3u) << 2) | (((f >> 8) & 3u) << 4) | (((f >> 12) & 3u) << 6);
}

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
