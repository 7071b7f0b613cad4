// Host-side element conversions for preparing operands and checking results.
// Round to nearest even; NaN stays NaN; overflow becomes infinity (as the hardware does).
#pragma once
#include <cstdint>

namespace moejit {

std::uint16_t float_to_bf16(float value);
float bf16_to_float(std::uint16_t bits);
std::uint16_t float_to_f16(float value);
float f16_to_float(std::uint16_t bits);

}  // namespace moejit
