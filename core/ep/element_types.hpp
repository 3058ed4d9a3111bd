// Element types of activations on the host side of the EP layer: bfloat16
// and float32 rows summed in float (combine), and FP8 e4m3 (the "fn"
// variant: no infinities, largest 448) with one float scale per 128
// channels (dispatch).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>

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

inline constexpr uint32_t kFp8Block = 128;  // channels per scale
inline constexpr float kFp8Max = 448.0f;

// e4m3fn bits of `f` (already scaled), rounded to nearest even, saturated
// to +-448; NaN gives 0x7F.
inline uint8_t float_to_e4m3(float f) {
  if (f != f) return 0x7F;
  const uint8_t sign = std::signbit(f) ? 0x80 : 0;
  float a = std::fabs(f);
  if (a >= kFp8Max) return sign | 0x7E;  // 448
  if (a < 0.0009765625f) return sign;    // below half the smallest subnormal (2^-9 / 2)
  int exp = 0;
  std::frexp(a, &exp);                         // a = m * 2^exp, m in [0.5, 1)
  int e = exp - 1;                             // a = 1.x * 2^e
  if (e < -6) e = -6;                          // subnormal range shares the 2^-6 exponent
  const float step = std::ldexp(1.0f, e - 3);  // 3 mantissa bits
  float q = std::nearbyint(a / step) * step;   // round half to even (default mode)
  if (q >= kFp8Max) return sign | 0x7E;
  std::frexp(q, &exp);
  int qe = exp - 1;
  if (q < std::ldexp(1.0f, -6)) {  // subnormal: exponent field 0
    return sign | static_cast<uint8_t>(std::lround(q / std::ldexp(1.0f, -9)));
  }
  const int mantissa = static_cast<int>(std::lround((q / std::ldexp(1.0f, qe) - 1.0f) * 8));
  return sign | static_cast<uint8_t>(((qe + 7) << 3) | mantissa);
}

inline float e4m3_to_float(uint8_t v) {
  const float sign = (v & 0x80) != 0 ? -1.0f : 1.0f;
  const int e = (v >> 3) & 0xF, m = v & 7;
  if (e == 0xF && m == 7) return std::numeric_limits<float>::quiet_NaN();
  if (e == 0) return sign * std::ldexp(static_cast<float>(m), -9);
  return sign * std::ldexp(1.0f + m / 8.0f, e - 7);
}

// Quantizes one row of `hidden` floats (hidden a multiple of 128): per
// block of 128, scale = amax / 448 (1 when the block is all zero), values
// x / scale as e4m3.
inline void quantize_row(const float* row, uint32_t hidden, uint8_t* values, float* scales) {
  for (uint32_t b = 0; b < hidden / kFp8Block; ++b) {
    float amax = 0.0f;
    for (uint32_t i = 0; i < kFp8Block; ++i)
      amax = std::max(amax, std::fabs(row[b * kFp8Block + i]));
    const float scale = amax > 0.0f ? amax / kFp8Max : 1.0f;
    scales[b] = scale;
    for (uint32_t i = 0; i < kFp8Block; ++i) {
      values[b * kFp8Block + i] = float_to_e4m3(row[b * kFp8Block + i] / scale);
    }
  }
}

}  // namespace courier::ep
