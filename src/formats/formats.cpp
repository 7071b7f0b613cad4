#include "moejit/formats.hpp"

#include <cmath>
#include <cstring>
#include <limits>

#include "moejit/errors.hpp"

namespace moejit {
namespace {

// Magnitude code of a >= 0 in a small float format with IEEE-style subnormals, rounded to nearest
// even. Subnormals use the smallest normal's step, so one formula covers both: the step count
// `a / step` is at most 2^(mantissa_bits+1), and a count that reaches it carries into the exponent
// field, which is the correct code. Callers saturate values past the largest finite first.
unsigned round_to_minifloat(float a, int mantissa_bits, int bias) {
  const int min_normal_exp = 1 - bias;
  const int exp = a < std::ldexp(1.0f, min_normal_exp) ? min_normal_exp : std::ilogb(a);
  const auto steps = static_cast<unsigned>(std::nearbyint(std::ldexp(a, mantissa_bits - exp)));  // exact scaling
  return (static_cast<unsigned>(exp + bias - 1) << mantissa_bits) + steps;
}

float decode_minifloat(unsigned magnitude, int mantissa_bits, int bias) {
  const unsigned exp_field = magnitude >> mantissa_bits;
  const unsigned mantissa = magnitude & ((1u << mantissa_bits) - 1);
  if (exp_field == 0) return std::ldexp(static_cast<float>(mantissa), 1 - bias - mantissa_bits);
  return std::ldexp(static_cast<float>((1u << mantissa_bits) | mantissa), static_cast<int>(exp_field) - bias - mantissa_bits);
}

}  // namespace

std::uint16_t float_to_bf16(float value) {
  std::uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  if (std::isnan(value)) return static_cast<std::uint16_t>((bits >> 16) | 0x40);  // keep it a quiet NaN
  std::uint32_t rounding = 0x7fff + ((bits >> 16) & 1);
  return static_cast<std::uint16_t>((bits + rounding) >> 16);
}

float bf16_to_float(std::uint16_t bits) {
  std::uint32_t wide = static_cast<std::uint32_t>(bits) << 16;
  float out;
  std::memcpy(&out, &wide, sizeof out);
  return out;
}

std::uint16_t float_to_f16(float value) {
  std::uint32_t x;
  std::memcpy(&x, &value, sizeof x);
  std::uint32_t sign = (x >> 16) & 0x8000;
  std::uint32_t abs = x & 0x7fffffff;
  if (abs > 0x7f800000) return static_cast<std::uint16_t>(sign | 0x7e00);  // NaN
  if (abs >= 0x477ff000) return static_cast<std::uint16_t>(sign | 0x7c00);  // rounds past 65504: inf
  if (abs < 0x38800000) {  // below the smallest normal (2^-14): subnormal or zero
    // value * 2^24 rounded to nearest even gives the subnormal's mantissa.
    float scaled = std::fabs(value) * 16777216.0f;
    auto mant = static_cast<std::uint32_t>(std::nearbyint(scaled));
    return static_cast<std::uint16_t>(sign | mant);
  }
  std::uint32_t exp = ((abs >> 23) - 127 + 15);
  std::uint32_t mant = abs & 0x7fffff;
  std::uint32_t half = (exp << 10) | (mant >> 13);
  std::uint32_t rest = mant & 0x1fff;
  if (rest > 0x1000 || (rest == 0x1000 && (half & 1))) ++half;  // may carry into the exponent: correct
  return static_cast<std::uint16_t>(sign | half);
}

float f16_to_float(std::uint16_t h) {
  std::uint32_t sign = (h & 0x8000u) << 16;
  std::uint32_t exp = (h >> 10) & 0x1f;
  std::uint32_t mant = h & 0x3ff;
  float out;
  if (exp == 0) {
    out = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -out : out;
  }
  std::uint32_t bits = exp == 31 ? (sign | 0x7f800000 | (mant << 13)) : (sign | ((exp - 15 + 127) << 23) | (mant << 13));
  std::memcpy(&out, &bits, sizeof out);
  return out;
}

// Saturating, as PTX cvt.rn.satfinite.e4m3x2 does: e4m3fn has no infinity, and 0x7F (what 464 and
// up would round to) is NaN, so an unsaturated overflow would turn large weights into NaN.
std::uint8_t float_to_e4m3(float value) {
  const std::uint8_t sign = std::signbit(value) ? 0x80 : 0x00;
  if (std::isnan(value)) return sign | 0x7F;
  const float a = std::fabs(value);
  if (a >= 448.0f) return sign | 0x7E;
  return static_cast<std::uint8_t>(sign | round_to_minifloat(a, 3, 7));
}

float e4m3_to_float(std::uint8_t bits) {
  const unsigned magnitude = bits & 0x7Fu;
  if (magnitude == 0x7F) return std::copysign(std::numeric_limits<float>::quiet_NaN(), bits & 0x80 ? -1.0f : 1.0f);
  const float out = decode_minifloat(magnitude, 3, 7);
  return bits & 0x80 ? -out : out;
}

// E2M1 has no NaN code to give; the block quantizers mark a NaN block through its scale instead.
std::uint8_t float_to_e2m1(float value) {
  if (std::isnan(value)) throw InvalidArgument("float_to_e2m1: value is NaN (E2M1 has no NaN code)");
  const std::uint8_t sign = std::signbit(value) ? 0x8 : 0x0;
  const float a = std::fabs(value);
  if (a >= 6.0f) return sign | 0x7;
  return static_cast<std::uint8_t>(sign | round_to_minifloat(a, 1, 1));
}

float e2m1_to_float(std::uint8_t code) {
  const float out = decode_minifloat(code & 0x7u, 1, 1);
  return code & 0x8 ? -out : out;
}

float e8m0_to_float(std::uint8_t bits) {
  if (bits == 0xFF) return std::numeric_limits<float>::quiet_NaN();
  return std::ldexp(1.0f, static_cast<int>(bits) - 127);  // 2^-127 is a float subnormal: exact
}

}  // namespace moejit
