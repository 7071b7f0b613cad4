// 4-bit widening on the CUDA cores: E2M1 codes and E8M0 (MXFP4) or E4M3 (NVFP4) scales to BF16 pairs, in the
// bf16x2 register form that both 4-bit kernels (shared-memory and register-A widening) use.
#pragma once
#include "moejit/common/w4_layout.cuh"  // w4_sm90_pair_shift: the stored code words

namespace moejit::hopper {

// Code pair p of a stored code word (bit-interleaved, common/w4_layout.cuh) -> BF16 pair holding
// each code's bits where BF16 keeps them, before scaling: magnitude e1 e0 m at bits 8..6 (exponent
// field e, top mantissa bit m) and the sign at bit 15. Read as BF16 that is the E2M1 value times
// 2^-126 (e = 0, m = 1 lands on the subnormal 2^-127 = 0.5 * 2^-126), so one multiply by 2^126
// restores it exactly.
// The interleaved word makes this a table lookup: (word >> shift) & 0x3333 leaves in each nibble
// of the low half a 2-bit field of the pair, the OR sets bit 2 of nibbles 1 and 3, and prmt reads
// each output byte from the 8-byte table {kE2m1LowBytes, kE2m1HighBytes}: a low byte from (e0, m)
// -> e0 << 7 | m << 6, a high byte from (sign, e1) -> sign << 7 | e1. A shift (none for p = 0), a
// LOP3 and a PRMT per pair; the byte-per-pair layout before it took 3.75 (docs/perf.md v12).
constexpr unsigned kE2m1LowBytes = 0xC0804000u;   // index e0 m: 0x00 0x40 0x80 0xC0
constexpr unsigned kE2m1HighBytes = 0x81800100u;  // index 4 + (sign e1): 0x00 0x01 0x80 0x81

// Read from constant memory, not written as literals, so that ptxas keeps them in registers: with
// 0x4040 a literal it splits the AND-OR into two LOP3s (SASS takes one immediate), and with the
// low table a literal it copies it from a uniform register before every PRMT (one IMAD.U32 per
// pair). As constants: 11 instructions per word of four pairs against 15 (docs/perf.md v12).
__constant__ unsigned e2m1_high_select = 0x4040u;
__constant__ unsigned e2m1_low_bytes = kE2m1LowBytes;

__device__ __forceinline__ unsigned e2m1_pair_from_fields(unsigned fields) {
  unsigned out;
  asm("prmt.b32 %0, %1, %2, %3;"
      : "=r"(out)
      : "r"(e2m1_low_bytes), "r"(kE2m1HighBytes), "r"((fields & 0x3333u) | e2m1_high_select));
  return out;
}

template <int kPair>
__device__ __forceinline__ unsigned e2m1_pair_bits_as_bf16x2(unsigned word) {
  return e2m1_pair_from_fields(word >> w4_sm90_pair_shift(kPair));
}

// The same for a pair chosen at run time (the portable family's loader).
__device__ __forceinline__ unsigned e2m1_pair_bits_as_bf16x2(unsigned word, int pair) {
  return e2m1_pair_from_fields(word >> w4_sm90_pair_shift(pair));
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

// Two E4M3 block scales (NVFP4: bytes 0 and 1 of `two`) -> each scale x 2^117 as a BF16 pair (its
// value in both halves): `lo` from byte 0, `hi` from byte 1. Exact (3 significant bits; at most
// 448 x 2^117 < 2^126), and NaN (0x7F, 0xFF) stays NaN. Through the hardware E4M3 -> F16 pair
// conversion (sm_89+) and F32: 7 instructions for two scales, where placing each scale's bits in a
// BF16 and multiplying twice (with a NaN test) took about 8 per scale (docs/perf.md v12).
__device__ __forceinline__ void e4m3x2_times_2pow117_bf16x2(unsigned two, unsigned& lo, unsigned& hi) {
  unsigned halves;
  asm("{\n .reg .b16 t;\n cvt.u16.u32 t, %1;\n cvt.rn.f16x2.e4m3x2 %0, t;\n}" : "=r"(halves) : "r"(two));
  float a, b;
  asm("{\n .reg .b16 l, h;\n mov.b32 {l, h}, %2;\n cvt.f32.f16 %0, l;\n cvt.f32.f16 %1, h;\n}"
      : "=f"(a), "=f"(b)
      : "r"(halves));
  const float kTwoPow117 = __int_as_float(0x7A000000);
  a *= kTwoPow117;
  b *= kTwoPow117;
  asm("cvt.rn.bf16x2.f32 %0, %1, %1;" : "=r"(lo) : "f"(a));
  asm("cvt.rn.bf16x2.f32 %0, %1, %1;" : "=r"(hi) : "f"(b));
}

}  // namespace moejit::hopper
