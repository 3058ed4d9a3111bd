// Element conversions the EP kernels need on the device: bfloat16 <->
// float, and float -> FP8 e4m3 ("fn": no infinities, largest 448), rounded
// to nearest even and saturated, the same rules as the host codec
// (core/ep/element_types.hpp), written with integer operations so nvcc and
// hipcc (which has no FP8 header in ROCm 5) give the same bits. Also the
// layouts the receive kernels write FP8 scales in.
#pragma once

#include <cmath>
#include <cstdint>

#include "courier/abi/gpu_v1.h"
#include "courier/platform.hpp"

namespace courier::device {

COURIER_DEVICE_INLINE uint32_t float_bits(float f) {
  union {
    float f;
    uint32_t u;
  } v{f};
  return v.u;
}

COURIER_DEVICE_INLINE float bits_float(uint32_t u) {
  union {
    uint32_t u;
    float f;
  } v{u};
  return v.f;
}

COURIER_DEVICE_INLINE float bf16_to_float(uint16_t v) { return bits_float(uint32_t{v} << 16); }

// Round to nearest even; NaN stays NaN.
COURIER_DEVICE_INLINE uint16_t float_to_bf16(float f) {
  uint32_t bits = float_bits(f);
  if ((bits & 0x7F800000u) == 0x7F800000u && (bits & 0x007FFFFFu) != 0) {
    return static_cast<uint16_t>((bits >> 16) | 0x40);
  }
  bits += 0x7FFFu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

inline constexpr float kE4m3Max = 448.0f;
inline constexpr uint32_t kFp8Channels = 128;  // channels per scale

// The scale of a block of FP8 values whose largest magnitude is `amax`:
// amax / 448 (1 for an all-zero block), or with `pow2` that rounded up to a
// power of two (DeepEP's round_scale: exact to apply, and what UE8M0 keeps).
COURIER_DEVICE_INLINE float fp8_scale(float amax, bool pow2) {
  if (!(amax > 0.0f)) return 1.0f;
  const float scale = amax / kE4m3Max;
  if (!pow2) return scale;
  const uint32_t bits = float_bits(scale);
  int32_t exponent = static_cast<int32_t>((bits >> 23) & 0xFFu) - 127;
  if ((bits & 0x7FFFFFu) != 0 || exponent == -127) ++exponent;  // not a power of two yet
  if (exponent < -126) exponent = -126;                         // smallest normal float
  if (exponent > 127) exponent = 127;
  return bits_float(static_cast<uint32_t>(exponent + 127) << 23);
}

// x / scale for the values x of an FP8 block (|x| <= 448 * scale: the
// scale came from their amax), giving the e4m3 codes of IEEE division: the
// reciprocal once per block, then per value a product and one fma
// correction (Markstein). The quotient can differ from the division's only
// below 2^-11, where the residual turns subnormal and both round to a zero
// code of x's sign; unit-fp8-divisor checks the codes over every bfloat16
// value. Scales outside [2^-60, 2^60] divide. (A division is a subroutine
// of about 30 instructions: 16 per thread took a low-latency dispatch block
// 2.9 of its 8.4 us until its rows were stored.)
struct Fp8Divisor {
  float scale, inverse;
  bool divide;
  COURIER_DEVICE_INLINE explicit Fp8Divisor(float s)
      : scale(s), inverse(1.0f / s), divide(!(s >= 0x1p-60f && s <= 0x1p60f)) {}
  COURIER_DEVICE_INLINE float operator()(float x) const {
    if (divide) return x / scale;
    const float q = x * inverse;
    return copysignf(fmaf(fmaf(-q, scale, x), inverse, q), x);  // (-0 stays -0)
  }
};

// e4m3fn bits of an already scaled value.
COURIER_DEVICE_INLINE uint8_t float_to_e4m3(float f) {
  const uint32_t bits = float_bits(f);
  const uint8_t sign = static_cast<uint8_t>((bits >> 24) & 0x80);
  const uint32_t magnitude = bits & 0x7FFFFFFFu;
  if (magnitude > 0x7F800000u) return 0x7F;  // NaN
  const float a = bits_float(magnitude);
  if (a >= kE4m3Max) return sign | 0x7E;
  if (a < 0.015625f) {               // below 2^-6: subnormal steps of 2^-9, ties to even
    const float steps = a * 512.0f;  // exact
    uint32_t q = static_cast<uint32_t>(steps);
    const float rest = steps - static_cast<float>(q);
    if (rest > 0.5f || (rest == 0.5f && (q & 1u) != 0)) ++q;
    return sign | static_cast<uint8_t>(q);  // 8 steps is 2^-6, the first normal code
  }
  // Normal: keep 3 of the 23 mantissa bits, ties to even; a carry moves
  // into the exponent, which is what rounding up should do.
  const uint32_t rounded = magnitude + 0x7FFFFu + ((magnitude >> 20) & 1u);
  const uint32_t code = (rounded >> 20) - ((127u - 7u) << 3);
  return sign | static_cast<uint8_t>(code > 0x7Eu ? 0x7Eu : code);
}

// Four scaled values as e4m3fn codes, v[0] in the low byte: the same bits
// as float_to_e4m3 each. On sm_89 and later one conversion instruction per
// pair (round to nearest even, saturated to 448, as above; only a NaN's
// sign could differ, so NaNs keep float_to_e4m3's 0x7F): the integer
// version costs a low-latency dispatch's quantizing threads about 40
// instructions a value.
COURIER_DEVICE_INLINE uint32_t float4_to_e4m3(const float* v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  uint16_t lo = 0, hi = 0;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %2, %1;" : "=h"(lo) : "f"(v[0]), "f"(v[1]));
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %2, %1;" : "=h"(hi) : "f"(v[2]), "f"(v[3]));
  uint32_t codes = uint32_t{lo} | uint32_t{hi} << 16;
  for (int i = 0; i < 4; ++i) {
    if (v[i] != v[i]) codes = (codes & ~(0xFFu << (8 * i))) | 0x7Fu << (8 * i);
  }
  return codes;
#else
  uint32_t codes = 0;
  for (int i = 0; i < 4; ++i) codes |= uint32_t{float_to_e4m3(v[i])} << (8 * i);
  return codes;
#endif
}

// Row `row` of expert l's FP8 scales (`cols` floats at `from`) into
// `scales` laid out as `layout` says (COURIER_GPU_EP_SCALES_* of gpu_v1.h,
// not 0: column-major and/or UE8M0 exponent bytes four per u32, the bytes
// past `cols` zero), `rows` rows per expert. Lanes `lane` of `lanes` share
// the work.
// Scale c of row `row` of expert l stored as store_scales lays it out: the
// float, or with UE8M0 its exponent byte (bits: the float's bits, or 0 for
// a padding byte past `cols`).
COURIER_DEVICE_INLINE void store_scale(void* scales, uint32_t layout, uint32_t cols, uint64_t rows,
                                       uint32_t l, uint64_t row, uint32_t c, uint32_t bits) {
  const bool ue8m0 = (layout & COURIER_GPU_EP_SCALES_UE8M0) != 0;
  const bool column_major = (layout & COURIER_GPU_EP_SCALES_COLUMN_MAJOR) != 0;
  const uint32_t words = ue8m0 ? (cols + 3) / 4 : cols;  // per row
  const uint32_t p = ue8m0 ? c / 4 : c;
  const uint64_t word = column_major ? (uint64_t{l} * words + p) * rows + row
                                     : (uint64_t{l} * rows + row) * words + p;
  if (ue8m0) {
    static_cast<uint8_t*>(scales)[word * 4 + c % 4] =
        c < cols ? static_cast<uint8_t>((bits >> 23) & 0xFFu) : uint8_t{0};
  } else {
    static_cast<uint32_t*>(scales)[word] = bits;
  }
}

COURIER_DEVICE_INLINE void store_scales(void* scales, uint32_t layout, uint32_t cols, uint64_t rows,
                                        uint32_t l, uint64_t row, const void* from, uint32_t lane,
                                        uint32_t lanes) {
  const bool ue8m0 = (layout & COURIER_GPU_EP_SCALES_UE8M0) != 0;
  const uint32_t end = ue8m0 ? (cols + 3) / 4 * 4 : cols;  // UE8M0: the padding bytes too
  const auto* bits = static_cast<const uint32_t*>(from);
  for (uint32_t c = lane; c < end; c += lanes) {
    store_scale(scales, layout, cols, rows, l, row, c, c < cols ? bits[c] : 0u);
  }
}

}  // namespace courier::device
