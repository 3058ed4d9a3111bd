// The LogFMT codec of the low-latency combine (gpu/ep/logfmt.hpp, docs/ep.md
// "LogFMT combine"), run on the host: which blocks are coded, the error
// bound of coded values, the clip, and the slot layout.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "gpu/ep/logfmt.hpp"

namespace {

using courier::device::bf16_to_float;
using courier::device::float_to_bf16;

constexpr uint32_t kHidden = 512;  // 4 blocks

struct RoundTrip {
  std::vector<std::byte> slot;
  std::vector<float> in, out;
};

RoundTrip round_trip(const std::vector<float>& values) {
  RoundTrip r;
  std::vector<uint16_t> row(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    row[i] = float_to_bf16(values[i]);
    r.in.push_back(bf16_to_float(row[i]));
  }
  const auto hidden = static_cast<uint32_t>(values.size());
  r.slot.assign(COURIER_GPU_EP_LOGFMT_SLOT_BYTES(hidden), std::byte{0xAB});
  // Two lanes, as a group would split the blocks.
  for (uint32_t lane = 0; lane < 2; ++lane) {
    courier::device::logfmt_encode_row(r.slot.data(), row.data(), hidden, lane, 2);
  }
  r.out.resize(hidden);
  for (uint32_t c = 0; c < hidden; c += 4) {
    courier::device::logfmt_load4(r.slot.data(), hidden, c, r.out.data() + c);
  }
  return r;
}

uint32_t meta_of(const RoundTrip& r, uint32_t block) {
  uint32_t word;
  std::memcpy(&word, r.slot.data() + 4 * block, 4);
  return word;
}

}  // namespace

TEST_CASE("blocks below 1 are coded; each value within half a level step") {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal;
  for (const float scale : {0.25f, 0.1f, 1e-3f, 1e-20f}) {  // amax stays below 1
    std::vector<float> values(kHidden);
    for (float& v : values) v = normal(rng) * scale;
    values[7] = 0.0f;  // a zero stays zero
    const RoundTrip r = round_trip(values);
    for (uint32_t b = 0; b < kHidden / 128; ++b) {
      const uint32_t meta = meta_of(r, b);
      REQUIRE(meta != 0);  // coded
      float amax = 0, amin = 1e30f;
      for (uint32_t i = 0; i < 128; ++i) {
        amax = std::max(amax, std::fabs(r.in[b * 128 + i]));
        amin = std::min(amin, std::fabs(r.in[b * 128 + i]));
      }
      CHECK(bf16_to_float(static_cast<uint16_t>(meta >> 16)) == amax);
      CHECK(bf16_to_float(static_cast<uint16_t>(meta & 0xFFFF)) == amin);
      float lmin = 0, step = 0;
      REQUIRE(courier::device::logfmt_params(amax, amin, &lmin, &step));
      CHECK(step <= 32.0f / 510 + 1e-6f);
      // Nearest level in linear terms: at most half the gap to the next
      // level, 2^(step / 2) - 1 relative (plus float rounding).
      const float bound = std::exp2(step / 2) - 1 + 1e-5f;
      for (uint32_t i = 0; i < 128; ++i) {
        const float in = r.in[b * 128 + i], out = r.out[b * 128 + i];
        if (in == 0) {
          CHECK(out == 0);
          continue;
        }
        CHECK(std::signbit(in) == std::signbit(out));
        CHECK(std::fabs(out - in) <= bound * std::fabs(in));
      }
      // The block's extremes are levels 1 and 511: they come back (nearly) exact.
      for (uint32_t i = 0; i < 128; ++i) {
        const float a = std::fabs(r.in[b * 128 + i]);
        if (a == amax || a == amin) {
          CHECK(std::fabs(std::fabs(r.out[b * 128 + i]) - a) <= 1e-5f * a);
        }
      }
    }
  }
}

TEST_CASE("blocks with a magnitude of 1 or more, all zeros or non-finite values stay bfloat16") {
  std::vector<float> values(kHidden);
  for (uint32_t i = 0; i < kHidden; ++i) values[i] = 0.01f * static_cast<float>(i % 50) - 0.2f;
  values[0] = 1.0f;                                           // block 0: amax == 1
  for (uint32_t i = 128; i < 256; ++i) values[i] = 0.0f;      // block 1: zeros
  values[256 + 9] = std::numeric_limits<float>::quiet_NaN();  // block 2: NaN
  values[384 + 3] = -std::numeric_limits<float>::infinity();  // block 3: infinity
  const RoundTrip r = round_trip(values);
  for (uint32_t b = 0; b < 4; ++b) CHECK(meta_of(r, b) == 0);
  for (uint32_t i = 0; i < kHidden; ++i) {
    if (std::isnan(r.in[i])) {
      CHECK(std::isnan(r.out[i]));
    } else {
      CHECK(r.out[i] == r.in[i]);  // bit for bit
    }
  }
}

TEST_CASE("values more than 2^32 below the block's largest become 0; the rest keep the bound") {
  std::vector<float> values(128);
  for (uint32_t i = 0; i < 128; ++i) values[i] = 0.5f * std::exp2(-static_cast<float>(i % 30));
  values[5] = 1e-12f;  // 2^-40 or so: past the clip
  values[6] = -1e-12f;
  const RoundTrip r = round_trip(values);
  REQUIRE(meta_of(r, 0) != 0);
  CHECK(r.out[5] == 0.0f);
  CHECK(r.out[6] == 0.0f);
  const float bound = std::exp2(32.0f / 510 / 2) - 1 + 1e-5f;  // the widest step
  for (uint32_t i = 0; i < 128; ++i) {
    if (i == 5 || i == 6) continue;
    CHECK(std::fabs(r.out[i] - r.in[i]) <= bound * std::fabs(r.in[i]));
  }
}

TEST_CASE("the slot: meta words, then a 256-byte room per block; coded rooms use 160 bytes") {
  std::vector<float> values(kHidden, 0.25f);
  values[1] = 0.125f;                                  // block 0 coded (amin < amax)
  for (uint32_t i = 128; i < 256; ++i) values[i] = 2;  // block 1 bfloat16
  values[257] = 3;
  for (uint32_t i = 256; i < 512; ++i) values[i] = 0.5f * (i % 2 ? 1 : -1);
  values[300] = 0.3f;  // blocks 2 and 3 coded (amin < amax)
  values[400] = 0.3f;
  const RoundTrip r = round_trip(values);
  CHECK(r.slot.size() == 2 * kHidden + kHidden / 32);
  CHECK(meta_of(r, 0) != 0);
  CHECK(meta_of(r, 1) == 0);
  CHECK(courier::device::logfmt_used_bytes(r.slot.data(), kHidden) == 16 + 3 * 160 + 256);
  // A coded room's bytes past 160 are not written (the sender may skip them).
  for (uint32_t i = 160; i < 256; ++i) {
    CHECK(r.slot[16 + i] == std::byte{0xAB});
  }
  // The bfloat16 room holds the values themselves.
  uint16_t first;
  std::memcpy(&first, r.slot.data() + 16 + 256, 2);
  CHECK(bf16_to_float(first) == 2.0f);
  CHECK(r.out[1] == doctest::Approx(0.125f).epsilon(1e-4));
  CHECK(r.out[0] == doctest::Approx(0.25f).epsilon(1e-4));
}
