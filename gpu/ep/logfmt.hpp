// LogFMT: the low-latency combine's optional compressed row format (GPU ABI
// minor 5, COURIER_GPU_EP_COMBINE_LOGFMT; docs/ep.md, "LogFMT combine"),
// after DeepEP's use_logfmt. A bfloat16 row of `hidden` channels (a multiple
// of 128) travels in a slot of COURIER_GPU_EP_LOGFMT_SLOT_BYTES(hidden):
//
//   [hidden / 128 meta words (u32)] [block 0: 256 bytes] [block 1] ...
//
// Block b holds channels [128 b, 128 b + 128). Its meta word is 0 when the
// block travels as plain bfloat16 (256 bytes), else (bf16(amax) << 16) |
// bf16(amin) of the block's magnitudes, and the block holds 128 10-bit codes
// in its first 160 bytes: channels 4g..4g+3 in bytes [5g, 5g + 5) as a
// little-endian 40-bit word, channel 4g+i at bits [10i, 10i + 10); bit 9 of
// a code is the sign, bits 0-8 the magnitude m: 0 is zero, m >= 1 is
// 2^(lmin + (m - 1) * step), with lmax = log2(amax), lmin = max(log2(amin),
// lmax - 32) and step = (lmax - lmin) / 510, so that levels 1 and 511 are
// amin (or the clip) and amax. Values are rounded to the nearest level in
// linear terms. A block is coded only when every value is finite, amax < 1
// and lmin < lmax (as DeepEP's); larger blocks keep bfloat16.
//
// Encode and decode share logfmt_params, so both ends compute the same
// levels from the same two bfloat16 numbers. Written once for nvcc, hipcc
// and the host compiler.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "courier/abi/gpu_v1.h"
#include "courier/platform.hpp"
#include "gpu/ep/element_codec.hpp"

namespace courier::device {

inline constexpr uint32_t kLogfmtChannels = 128;    // channels per block
inline constexpr uint32_t kLogfmtBlockBytes = 256;  // room per block (a bfloat16 block)
inline constexpr uint32_t kLogfmtCodedBytes = 160;  // 128 codes of 10 bits
inline constexpr float kLogfmtClip = 32.0f;         // log2 range kept below amax
inline constexpr uint32_t kLogfmtTopCode = 511;     // magnitude codes 1..511

COURIER_DEVICE_INLINE uint64_t logfmt_meta_bytes(uint32_t hidden) {
  return uint64_t{hidden} / kLogfmtChannels * 4;
}

// Whether a block whose magnitudes span [amin, amax] (amin may be 0) is
// coded; if so its lowest level's log2 and the step between levels.
COURIER_DEVICE_INLINE bool logfmt_params(float amax, float amin, float* lmin, float* step) {
  if (!(amax > 0.0f) || !(amax < 1.0f)) return false;
  const float lmax = log2f(amax);
  float low = lmax - kLogfmtClip;
  if (amin > 0.0f) {
    const float l = log2f(amin);
    if (l > low) low = l;
  }
  if (!(low < lmax)) return false;
  *lmin = low;
  *step = (lmax - low) / static_cast<float>(kLogfmtTopCode - 1);
  return true;
}

// Encodes one block of 128 bfloat16 values (`src`) into `block` (160 or 256
// bytes written) and returns its meta word. One thread.
COURIER_DEVICE_INLINE uint32_t logfmt_encode_block(const uint16_t* src, std::byte* block) {
  float amax = 0.0f, amin = 3.0e38f;
  bool finite = true;
  for (uint32_t i = 0; i < kLogfmtChannels; ++i) {
    const float a = fabsf(bf16_to_float(src[i]));
    if (!(a <= 3.0e38f)) finite = false;  // inf or NaN
    amax = a > amax ? a : amax;
    amin = a < amin ? a : amin;
  }
  // amax and amin are bfloat16 values, so the meta word holds them exactly.
  float lmin = 0.0f, step = 0.0f;
  if (!finite || !logfmt_params(amax, amin, &lmin, &step)) {
    auto* out = reinterpret_cast<uint16_t*>(block);
    for (uint32_t i = 0; i < kLogfmtChannels; ++i) out[i] = src[i];
    return 0;
  }
  // Level m (m >= 1) is lmin + (m - 1) * step; the boundary between m and
  // m + 1 lies where the value is the mean of the two levels, at log2 offset
  // log2((1 + 2^step) / 2) above level m.
  const float inv = 1.0f / step;
  const float bias = 2.0f - log2f((1.0f + exp2f(step)) * 0.5f) * inv - lmin * inv;
  auto* out = reinterpret_cast<uint8_t*>(block);
  for (uint32_t g = 0; g < kLogfmtChannels / 4; ++g) {
    uint64_t word = 0;
    for (uint32_t i = 0; i < 4; ++i) {
      const float v = bf16_to_float(src[4 * g + i]);
      const float a = fabsf(v);
      uint32_t m = 0;
      if (a > 0.0f) {
        const float q = log2f(a) * inv + bias;
        m = q <= 0.0f                                 ? 0u
            : q >= static_cast<float>(kLogfmtTopCode) ? kLogfmtTopCode
                                                      : static_cast<uint32_t>(q);
      }
      const uint32_t code = m | (v < 0.0f && m != 0 ? 0x200u : 0u);
      word |= uint64_t{code} << (10 * i);
    }
    for (uint32_t j = 0; j < 5; ++j) out[5 * g + j] = static_cast<uint8_t>(word >> (8 * j));
  }
  return uint32_t{float_to_bf16(amax)} << 16 | uint32_t{float_to_bf16(amin)};
}

// Encodes the row `src` (hidden bfloat16 values) into `slot`, its blocks
// split over `lanes` threads (this one is `lane`).
COURIER_DEVICE_INLINE void logfmt_encode_row(std::byte* slot, const void* src, uint32_t hidden,
                                             uint32_t lane, uint32_t lanes) {
  const uint32_t blocks = hidden / kLogfmtChannels;
  const uint64_t meta = logfmt_meta_bytes(hidden);
  for (uint32_t b = lane; b < blocks; b += lanes) {
    const uint32_t word =
        logfmt_encode_block(static_cast<const uint16_t*>(src) + uint64_t{b} * kLogfmtChannels,
                            slot + meta + uint64_t{b} * kLogfmtBlockBytes);
    reinterpret_cast<uint32_t*>(slot)[b] = word;
  }
}

// Bytes of a row's slot that carry something: the meta words, and 160 or
// 256 bytes per block (a sender may store only these).
COURIER_DEVICE_INLINE uint64_t logfmt_used_bytes(const std::byte* slot, uint32_t hidden) {
  uint64_t used = logfmt_meta_bytes(hidden);
  for (uint32_t b = 0; b < hidden / kLogfmtChannels; ++b) {
    used += reinterpret_cast<const uint32_t*>(slot)[b] != 0 ? kLogfmtCodedBytes : kLogfmtBlockBytes;
  }
  return used;
}

// Decodes channels [c, c + 4) (c a multiple of 4) of the slot into v.
COURIER_DEVICE_INLINE void logfmt_load4(const std::byte* slot, uint32_t hidden, uint32_t c,
                                        float* v) {
  const uint32_t b = c / kLogfmtChannels, at = c % kLogfmtChannels;
  const uint32_t meta = reinterpret_cast<const uint32_t*>(slot)[b];
  const std::byte* block = slot + logfmt_meta_bytes(hidden) + uint64_t{b} * kLogfmtBlockBytes;
  float lmin = 0.0f, step = 0.0f;
  if (meta == 0 ||
      !logfmt_params(bf16_to_float(static_cast<uint16_t>(meta >> 16)),
                     bf16_to_float(static_cast<uint16_t>(meta & 0xFFFFu)), &lmin, &step)) {
    const auto* p = reinterpret_cast<const uint16_t*>(block) + at;
    for (int i = 0; i < 4; ++i) v[i] = meta == 0 ? bf16_to_float(p[i]) : 0.0f;
    return;
  }
  const auto* p = reinterpret_cast<const uint8_t*>(block) + 5 * (at / 4);
  uint64_t word = 0;
  for (uint32_t j = 0; j < 5; ++j) word |= uint64_t{p[j]} << (8 * j);
  for (uint32_t i = 0; i < 4; ++i) {
    const uint32_t code = static_cast<uint32_t>(word >> (10 * i)) & 0x3FFu;
    const uint32_t m = code & 0x1FFu;
    const float a = m == 0 ? 0.0f : exp2f(lmin + static_cast<float>(m - 1) * step);
    v[i] = (code & 0x200u) != 0 ? -a : a;
  }
}

}  // namespace courier::device
