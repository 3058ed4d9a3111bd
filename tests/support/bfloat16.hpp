// bfloat16 on the host, for the test programs' inputs and references: the
// upper 16 bits of an IEEE float, rounded to nearest even.
#pragma once

#include <cstdint>

namespace courier::test {

// The bfloat16 nearest to `value` (ties to even); NaN stays NaN.
uint16_t to_bf16(float value);
// The float a bfloat16 stands for (exact).
float from_bf16(uint16_t bits);
// `value` rounded to bfloat16, as a float.
float round_bf16(float value);

}  // namespace courier::test
