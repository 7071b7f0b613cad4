// 4-bit widening on the CUDA cores: E2M1 codes and E8M0 (MXFP4) or E4M3 (NVFP4) scales to BF16 pairs, in the
// bf16x2 register form that both 4-bit kernels (shared-memory and register-A widening) use.
#pragma once

namespace moejit::hopper {

// Byte j of `word` (two E2M1 codes: K index 2j in the low nibble, 2j + 1 in the high one) ->
// BF16 pair holding each code's bits where BF16 keeps them, before scaling: magnitude e1 e0 m at
// bits 8..6 (exponent field e, top mantissa bit m) and the sign at bit 15. Read as BF16 that is
// the E2M1 value times 2^-126 (e = 0, m = 1 lands on the subnormal 2^-127 = 0.5 * 2^-126), so one
// multiply by 2^126 restores it exactly.
// Three integer operations per pair, plus three per word that the four calls on one word share
// (the widening is most of the 4-bit kernels' instructions; the shift-and-mask form took ~8 per
// pair): the word's low and high nibbles go to two masked words; a byte permute takes byte j of
// each, the low code to bits 3..0 and the high one to bits 19..16, zeros elsewhere (bytes 1 and 3
// replicate the sign bit of a byte <= 0x0F); one multiply by 2^6 + 2^12 writes each code twice,
// at +6 (magnitude to 8..6) and +12 (sign to 15), into bits that do not overlap, and a mask keeps
// magnitude and sign.
template <int kByte>
__device__ __forceinline__ unsigned e2m1x2_bits_as_bf16x2(unsigned word) {
  constexpr unsigned kSelect = kByte | ((8 | kByte) << 4) | ((4 + kByte) << 8) | ((8 | kByte) << 12);
  unsigned codes;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(codes) : "r"(word & 0x0F0F0F0Fu), "r"((word >> 4) & 0x0F0F0F0Fu), "n"(kSelect));
  return (codes * 0x1040u) & 0x81C081C0u;
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

// E4M3 block scale (NVFP4; positive) -> BF16 bits of its value, duplicated in both halves. The
// magnitude bits e3..e0 m2..m0 placed at BF16 bits 10..4 read as the value times 2^-120 (exponent
// field e, or for e = 0 the BF16 subnormal m * 2^-129 = m * 2^-9 * 2^-120), so one exact multiply
// by 2^120 restores it: every E4M3 value is a BF16 value. 0x7F / 0xFF (NaN) -> BF16 NaN.
__device__ __forceinline__ unsigned e4m3_to_bf16x2(unsigned s) {
  constexpr unsigned kTwoPow120x2 = 0x7B807B80u;
  if ((s & 0x7Fu) == 0x7Fu) return 0x7FC07FC0u;
  const unsigned bits = (s & 0x7Fu) << 4;
  return bf16x2_mul(bits | (bits << 16), kTwoPow120x2);
}

}  // namespace moejit::hopper
