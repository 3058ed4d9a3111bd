#include "tests/support/bfloat16.hpp"

#include <bit>

namespace courier::test {

uint16_t to_bf16(float value) {
  uint32_t bits = std::bit_cast<uint32_t>(value);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) {
    return static_cast<uint16_t>((bits >> 16) | 0x40);  // quiet NaN: rounding could make it inf
  }
  bits += 0x7FFFu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

float from_bf16(uint16_t bits) { return std::bit_cast<float>(uint32_t{bits} << 16); }

float round_bf16(float value) { return from_bf16(to_bf16(value)); }

}  // namespace courier::test
