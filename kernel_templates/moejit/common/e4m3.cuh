// E4M3 (OCP e4m3fn) quantization shared by quantize_activations_fp8 (routing/routing.cuh) and the
// FP8 kernel's quantized C (hopper/fused_epilogue.cuh, c=e4m3), so that both give the host
// quantizer's bits (moejit::quantize_fp8, formats.cpp): the quotient value / scale correctly
// rounded, then rounded to nearest even into E4M3, saturating to +-448 (no infinity in E4M3),
// NaN -> its sign | 0x7F.
#pragma once

namespace moejit {

// float -> E4M3 (OCP e4m3fn), round to nearest even, saturating to +-448 (no infinity in E4M3; NaN
// -> 0x7F with its sign): the steps of the host's float_to_e4m3 (formats.cpp), so that both give
// the same bits. The scaling by a power of two is exact.
__device__ __forceinline__ unsigned e4m3_code(float value) {
  const unsigned bits = __float_as_uint(value);
  const unsigned sign = (bits >> 24) & 0x80u;
  const float a = fabsf(value);
  if (a != a) return sign | 0x7Fu;
  if (a >= 448.f) return sign | 0x7Eu;
  const int exp = a < 0.015625f ? -6 : (int)((bits >> 23) & 0xFFu) - 127;  // 2^-6: E4M3's smallest normal
  const unsigned steps = __float2uint_rn(__fmul_rn(a, __uint_as_float((unsigned)(127 + 3 - exp) << 23)));
  return sign | (((unsigned)(exp + 6) << 3) + steps);
}

// Blocks a warp quantizes: two at a time (a half-warp each, 8 elements per lane in one 16-byte
// load), kQuantizeSteps steps with every load issued before the first block's math (loads in flight
// per lane, not per warp, are what a copy-like kernel needs; v28: one warp per block with 8-byte
// loads ran near 1.3 TB/s).
constexpr int kQuantizeSteps = 4;
constexpr int kQuantizeBlocksPerWarp = 2 * kQuantizeSteps;

// n values divided by one block's scale, each quotient correctly rounded (what __fdiv_rn gives and
// the host computes): from the correctly rounded reciprocal y, q1 = v·y is within an ulp, the
// residual v - q1·scale is exact (an fma; no underflow while scale >= 2^-100 and the quotient is
// large enough to give a nonzero code), and q1 + residual·y rounds to the correctly rounded
// quotient (Markstein's theorem). An infinite v stays infinite (its residual would be NaN), and a
// NaN v is passed on as it is (GPU arithmetic returns a NaN without its sign, and the host's code
// keeps the sign). The scale is positive, so the quotient has v's sign: copied from v, which keeps
// a -0 negative (its Markstein sum is +0). Four instructions a value instead of a division's ~20
// (its range check and slow-path branch); scales under 2^-100 (blocks of values under ~4e-28) divide.
template <int kN>
__device__ __forceinline__ void divide_by_scale(const float (&v)[kN], float scale, float (&q)[kN]) {
  if (scale >= 0x1p-100f) {
    const float y = __frcp_rn(scale);
#pragma unroll
    for (int i = 0; i < kN; ++i) {
      const float q1 = __fmul_rn(v[i], y);
      q[i] = fabsf(q1) <= 3.402823466e38f ? copysignf(__fmaf_rn(__fmaf_rn(-q1, scale, v[i]), y, q1), v[i])
                                          : q1 != q1 ? v[i] : q1;
    }
  } else {
#pragma unroll
    for (int i = 0; i < kN; ++i) q[i] = v[i] != v[i] ? v[i] : __fdiv_rn(v[i], scale);
  }
}

// Two values -> two E4M3 codes, lo in the low byte. sm_89+: the hardware conversion, which rounds
// and saturates (infinities too) as e4m3_code does; a NaN gets e4m3_code's code whatever the
// hardware's is.
__device__ __forceinline__ unsigned e4m3x2(float lo, float hi) {
#if __CUDA_ARCH__ >= 890
  unsigned short hw;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(hw) : "f"(hi), "f"(lo));
  unsigned pair = hw;
  if (lo != lo) pair = (pair & 0xFF00u) | ((__float_as_uint(lo) >> 24) & 0x80u) | 0x7Fu;
  if (hi != hi) pair = (pair & 0x00FFu) | ((((__float_as_uint(hi) >> 24) & 0x80u) | 0x7Fu) << 8);
  return pair;
#else
  return e4m3_code(lo) | e4m3_code(hi) << 8;
#endif
}

}  // namespace moejit
