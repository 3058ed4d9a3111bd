// Fp8Divisor (gpu/ep/element_codec.hpp), run on the host: the FP8 codes it
// gives are those of dividing by the scale, for every bfloat16 value of a
// block under scales from amax values across the whole bfloat16 range, with
// and without round_scale's powers of two, and for float32 values.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>

#include "gpu/ep/element_codec.hpp"

namespace {

using courier::device::bits_float;
using courier::device::float_bits;
using courier::device::float_to_e4m3;
using courier::device::fp8_scale;
using courier::device::Fp8Divisor;

std::string hex(float f) {
  char text[32];
  std::snprintf(text, sizeof text, "%a", static_cast<double>(f));
  return text;
}

struct Mismatches {
  uint64_t checked = 0, codes = 0, quotients = 0;
  std::string first;
  void check(float x, float scale) {
    const float want = x / scale, got = Fp8Divisor(scale)(x);
    ++checked;
    // Where the code can tell them apart, the quotient itself is the division's.
    if (std::fabs(want) >= 0x1p-11f && float_bits(got) != float_bits(want)) ++quotients;
    if (float_to_e4m3(got) != float_to_e4m3(want)) {
      if (codes++ == 0) {
        first = "x " + hex(x) + " scale " + hex(scale) + ": " + std::to_string(float_to_e4m3(got)) +
                " instead of " + std::to_string(float_to_e4m3(want));
      }
    }
  }
};

// Every bfloat16 value of magnitude at most amax (its block's largest).
void check_block(float amax, bool pow2, Mismatches* m) {
  const float scale = fp8_scale(amax, pow2);
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    const float x = bits_float(h << 16);
    if (std::fabs(x) <= amax) m->check(x, scale);
  }
}

}  // namespace

TEST_CASE("FP8 codes through Fp8Divisor are those of dividing by the scale, every bfloat16") {
  for (const bool pow2 : {false, true}) {
    Mismatches m;
    // Every 31st positive finite bfloat16 as a block's amax, and the ends:
    // subnormal amax (scales divide), the smallest normal, 1, the largest.
    for (uint32_t a = 1; a < 0x7F80u; a += 31) check_block(bits_float(a << 16), pow2, &m);
    for (const uint32_t a : {0x0001u, 0x0080u, 0x3F80u, 0x7F7Fu}) {
      check_block(bits_float(a << 16), pow2, &m);
    }
    INFO("round_scale ", pow2, ", first mismatch: ", m.first);
    CHECK(m.checked > 30'000'000u);
    CHECK(m.codes == 0);
    CHECK(m.quotients == 0);
  }
}

TEST_CASE("FP8 codes through Fp8Divisor match division for float32 blocks") {
  std::mt19937 rng(2026);
  std::uniform_int_distribution<uint32_t> any;
  Mismatches m;
  for (int block = 0; block < 4000; ++block) {
    // amax of any exponent, values below it of any exponent too.
    const float amax = bits_float(any(rng) & 0x7F7FFFFFu);
    const float scale = fp8_scale(amax, block % 2 == 1);
    for (int i = 0; i < 2000; ++i) {
      const float x = bits_float(any(rng) & 0xFF7FFFFFu);
      if (std::fabs(x) <= amax) m.check(x, scale);
    }
    m.check(amax, scale);
    m.check(-amax, scale);
  }
  INFO("first mismatch: ", m.first);
  CHECK(m.checked > 1'000'000u);
  CHECK(m.codes == 0);
  CHECK(m.quotients == 0);
}

TEST_CASE("Fp8Divisor keeps zeros' signs and NaNs, and an all-zero block's scale of 1") {
  const Fp8Divisor one(fp8_scale(0.0f, false));
  CHECK(one.scale == 1.0f);
  CHECK(float_bits(one(-0.0f)) == float_bits(-0.0f));
  const Fp8Divisor d(fp8_scale(3.0f, false));
  CHECK(float_bits(d(-0.0f)) == float_bits(-0.0f));
  CHECK(float_bits(d(0.0f)) == float_bits(0.0f));
  CHECK(std::isnan(d(std::nanf(""))));
  CHECK(float_to_e4m3(d(3.0f)) == 0x7E);   // the block's amax: 448
  CHECK(float_to_e4m3(d(-3.0f)) == 0xFE);  // -448
}
