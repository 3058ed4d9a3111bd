// Element types of activations on the host side of the EP layer: bfloat16
// and float32 rows summed in float (combine).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "core/ep/tensor_checks.hpp"

namespace courier::ep {

inline float bf16_to_float(uint16_t v) {
  const uint32_t bits = uint32_t{v} << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Round to nearest even, NaN stays NaN.
inline uint16_t float_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7F800000u) == 0x7F800000u && (bits & 0x007FFFFFu) != 0) {
    return static_cast<uint16_t>((bits >> 16) | 0x40);
  }
  bits += 0x7FFFu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

// sum[i] += row[i] for `n` elements of `dtype` (bfloat16 or float32).
inline void accumulate(DType dtype, const std::byte* row, size_t n, float* sum) {
  for (size_t i = 0; i < n; ++i) {
    if (dtype == DType::float32) {
      float v;
      std::memcpy(&v, row + 4 * i, 4);
      sum[i] += v;
    } else {
      uint16_t v;
      std::memcpy(&v, row + 2 * i, 2);
      sum[i] += bf16_to_float(v);
    }
  }
}

// Writes `n` floats as `dtype` elements to `out`.
inline void store(DType dtype, const float* values, size_t n, std::byte* out) {
  for (size_t i = 0; i < n; ++i) {
    if (dtype == DType::float32) {
      std::memcpy(out + 4 * i, &values[i], 4);
    } else {
      const uint16_t v = float_to_bf16(values[i]);
      std::memcpy(out + 2 * i, &v, 2);
    }
  }
}

}  // namespace courier::ep
