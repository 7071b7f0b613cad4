// 4-bit widening on the CUDA cores: E2M1 codes and E8M0 (MXFP4) scales to BF16 pairs (NVFP4 scales:
// common/w4_layout.cuh, w4_sm90_nvfp4_factor_bits), in the
// bf16x2 register form that both 4-bit kernels (shared-memory and register-A widening) use.
#pragma once
#include "moejit/common/w4_layout.cuh"  // w4_sm90_pair_bf16_bits: the stored code words

namespace moejit::hopper {

// Code pair p of a stored code word (common/w4_layout.cuh) -> BF16 pair holding each code's bits
// where BF16 keeps them, before scaling: magnitude e1 e0 m at bits 8..6 (exponent field e, top
// mantissa bit m) and the sign at bit 15. Read as BF16 that is the E2M1 value times 2^-126 (e = 0,
// m = 1 lands on the subnormal 2^-127 = 0.5 * 2^-126), so one multiply by 2^126 restores it exactly.
// The stored word keeps pairs 0-2 at those bits rotated by 3p: an AND (p = 0) or a funnel-shift
// rotate and an AND; pair 3's bits move by one multiply (three copies of the word's pair-3 bits,
// which never meet) between two ANDs. 8 instructions per word of four pairs (11 with v12's
// 2-bit-field table lookup, docs/perf.md v15).
template <int kPair>
__device__ __forceinline__ unsigned e2m1_pair_bits_as_bf16x2(unsigned word) {
  return w4_sm90_pair_bf16_bits<kPair>(word);
}

// The same for a pair chosen at run time (the portable family's loader).
__device__ __forceinline__ unsigned e2m1_pair_bits_as_bf16x2(unsigned word, int pair) {
  return w4_sm90_pair_bf16_bits(word, pair);
}

__device__ __forceinline__ unsigned bf16x2_mul(unsigned a, unsigned b) {
  unsigned d;
  asm("mul.rn.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
}

// E8M0 scale -> BF16 bits of 2^(s - 127), duplicated in both halves. BF16 shares FP32's exponent
// range: s = 1..254 are normal powers of two, s = 0 is the subnormal 2^-127, s = 255 is NaN.
__device__ __forceinline__ unsigned e8m0_to_bf16x2(unsigned s) {
  const unsigned bits = s == 0 ? 0x0040u : s == 255 ? 0x7FC0u : (s << 7);
  return bits | (bits << 16);
}

// x times half h (0: low, 1: high) of `pair`, in both halves: HMUL2 with an operand select, so
// that one register carries two rows' scale factors.
__device__ __forceinline__ unsigned bf16x2_mul_by_half(unsigned x, unsigned pair, int h) {
  unsigned d;
  if (h == 0)
    asm("{\n .reg .b16 l, u;\n .reg .b32 t;\n mov.b32 {l, u}, %2;\n mov.b32 t, {l, l};\n mul.rn.bf16x2 %0, %1, t;\n}"
        : "=r"(d) : "r"(x), "r"(pair));
  else
    asm("{\n .reg .b16 l, u;\n .reg .b32 t;\n mov.b32 {l, u}, %2;\n mov.b32 t, {u, u};\n mul.rn.bf16x2 %0, %1, t;\n}"
        : "=r"(d) : "r"(x), "r"(pair));
  return d;
}

}  // namespace moejit::hopper
