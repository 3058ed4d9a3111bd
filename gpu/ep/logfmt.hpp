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

// A group of four channels' share of its block's range: the largest and
// smallest magnitude so far. A value that is not finite makes amax
// infinite, so the block stays bfloat16 (logfmt_params refuses amax >= 1).
COURIER_DEVICE_INLINE void logfmt_range4(const uint16_t* v, float* amax, float* amin) {
  for (uint32_t i = 0; i < 4; ++i) {
    float a = fabsf(bf16_to_float(v[i]));
    if (!(a <= 3.0e38f)) a = INFINITY;  // inf or NaN
    *amax = a > *amax ? a : *amax;
    *amin = a < *amin ? a : *amin;
  }
}

// Whether a block whose magnitudes span [amin, amax] is coded; if so the
// scale and offset that turn log2|v| into its level (logfmt_group_word).
// Level m (m >= 1) is lmin + (m - 1) * step; the boundary between m and
// m + 1 lies where the value is the mean of the two levels, at log2 offset
// log2((1 + 2^step) / 2) above level m.
COURIER_DEVICE_INLINE bool logfmt_levels(float amax, float amin, float* inv, float* bias) {
  float lmin = 0.0f, step = 0.0f;
  if (!logfmt_params(amax, amin, &lmin, &step)) return false;
  *inv = 1.0f / step;
  *bias = 2.0f - log2f((1.0f + exp2f(step)) * 0.5f) * *inv - lmin * *inv;
  return true;
}

// Channels 4g..4g+3 (`v`) of a coded block as the 40-bit word group g's
// five bytes hold.
COURIER_DEVICE_INLINE uint64_t logfmt_group_word(const uint16_t* v, float inv, float bias) {
  uint64_t word = 0;
  for (uint32_t i = 0; i < 4; ++i) {
    const float f = bf16_to_float(v[i]);
    const float a = fabsf(f);
    uint32_t m = 0;
    if (a > 0.0f) {
      const float q = log2f(a) * inv + bias;
      m = q <= 0.0f                                 ? 0u
          : q >= static_cast<float>(kLogfmtTopCode) ? kLogfmtTopCode
                                                    : static_cast<uint32_t>(q);
    }
    const uint32_t code = m | (f < 0.0f && m != 0 ? 0x200u : 0u);
    word |= uint64_t{code} << (10 * i);
  }
  return word;
}

// A coded block's meta word. amax and amin are bfloat16 values (the
// block's own), so it holds them exactly.
COURIER_DEVICE_INLINE uint32_t logfmt_meta(float amax, float amin) {
  return uint32_t{float_to_bf16(amax)} << 16 | uint32_t{float_to_bf16(amin)};
}

// Encodes one block of 128 bfloat16 values (`src`) into `block` (160 or 256
// bytes written) and returns its meta word. One thread.
COURIER_DEVICE_INLINE uint32_t logfmt_encode_block(const uint16_t* src, std::byte* block) {
  float amax = 0.0f, amin = 3.0e38f;
  for (uint32_t g = 0; g < kLogfmtChannels / 4; ++g) logfmt_range4(src + 4 * g, &amax, &amin);
  float inv = 0.0f, bias = 0.0f;
  if (!logfmt_levels(amax, amin, &inv, &bias)) {
    auto* out = reinterpret_cast<uint16_t*>(block);
    for (uint32_t i = 0; i < kLogfmtChannels; ++i) out[i] = src[i];
    return 0;
  }
  auto* out = reinterpret_cast<uint8_t*>(block);
  for (uint32_t g = 0; g < kLogfmtChannels / 4; ++g) {
    const uint64_t word = logfmt_group_word(src + 4 * g, inv, bias);
    for (uint32_t j = 0; j < 5; ++j) out[5 * g + j] = static_cast<uint8_t>(word >> (8 * j));
  }
  return logfmt_meta(amax, amin);
}

#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
// A row encoded by the 32 lanes of a group (a warp; half a wavefront on
// AMD, shuffles of width 32), a block at a time: lane l holds channels
// 4l..4l+3, code group l, so the block's 256 bytes load and its 160 (or
// 256) store side by side across the lanes, and the block's range is
// two shuffle reductions. The same bytes as logfmt_encode_block (the range
// is a max and a min, exact in any order). kAhead blocks' loads are in
// flight per lane before they are encoded. Every lane of the group calls it.
inline constexpr uint32_t kLogfmtLanes = 32;

__device__ __forceinline__ float logfmt_lanes_reduce(float v, bool largest) {
  for (int mask = kLogfmtLanes / 2; mask > 0; mask /= 2) {
#if defined(__CUDA_ARCH__)
    const float other = __shfl_xor_sync(0xffffffffu, v, mask);
#else
    const float other = __shfl_xor(v, mask, kLogfmtLanes);
#endif
    v = largest ? fmaxf(v, other) : fminf(v, other);
  }
  return v;
}

__device__ __forceinline__ void logfmt_encode_row_lanes(std::byte* slot, const uint2* src,
                                                        uint32_t blocks, uint32_t lane) {
  constexpr uint32_t kAhead = 8;
  auto* meta = reinterpret_cast<uint32_t*>(slot);
  std::byte* body = slot + logfmt_meta_bytes(blocks * kLogfmtChannels);
  for (uint32_t b0 = 0; b0 < blocks; b0 += kAhead) {
    uint2 in[kAhead];
#pragma unroll
    for (uint32_t j = 0; j < kAhead; ++j) {
      if (b0 + j < blocks) in[j] = src[uint64_t{b0 + j} * kLogfmtLanes + lane];
    }
#pragma unroll
    for (uint32_t j = 0; j < kAhead; ++j) {
      if (b0 + j >= blocks) break;
      const uint16_t v[4] = {static_cast<uint16_t>(in[j].x), static_cast<uint16_t>(in[j].x >> 16),
                             static_cast<uint16_t>(in[j].y), static_cast<uint16_t>(in[j].y >> 16)};
      float amax = 0.0f, amin = 3.0e38f;
      logfmt_range4(v, &amax, &amin);
      amax = logfmt_lanes_reduce(amax, true);
      amin = logfmt_lanes_reduce(amin, false);
      std::byte* block = body + uint64_t{b0 + j} * kLogfmtBlockBytes;
      float inv = 0.0f, bias = 0.0f;
      if (!logfmt_levels(amax, amin, &inv, &bias)) {
        auto* out = reinterpret_cast<uint32_t*>(block) + 2 * lane;  // slots are 4-aligned
        out[0] = in[j].x;
        out[1] = in[j].y;
        if (lane == 0) meta[b0 + j] = 0;
        continue;
      }
      const uint64_t word = logfmt_group_word(v, inv, bias);
      auto* out = reinterpret_cast<uint8_t*>(block) + 5 * lane;
      for (uint32_t k = 0; k < 5; ++k) out[k] = static_cast<uint8_t>(word >> (8 * k));
      if (lane == 0) meta[b0 + j] = logfmt_meta(amax, amin);
    }
  }
}
#endif

// Encodes the row `src` (hidden bfloat16 values) into `slot`, a block per
// thread: its blocks split over `lanes` threads (this one is `lane`).
COURIER_DEVICE_INLINE void logfmt_encode_row_by_block(std::byte* slot, const void* src,
                                                      uint32_t hidden, uint32_t lane,
                                                      uint32_t lanes) {
  const uint64_t meta = logfmt_meta_bytes(hidden);
  for (uint32_t b = lane; b < hidden / kLogfmtChannels; b += lanes) {
    const uint32_t word =
        logfmt_encode_block(static_cast<const uint16_t*>(src) + uint64_t{b} * kLogfmtChannels,
                            slot + meta + uint64_t{b} * kLogfmtBlockBytes);
    reinterpret_cast<uint32_t*>(slot)[b] = word;
  }
}

// Encodes the row `src` into `slot` with the `lanes` threads of a group
// (this one is `lane`): on a GPU a group of 32 encodes each block together
// (logfmt_encode_row_lanes), elsewhere a block per thread.
COURIER_DEVICE_INLINE void logfmt_encode_row(std::byte* slot, const void* src, uint32_t hidden,
                                             uint32_t lane, uint32_t lanes) {
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
  if (lanes == kLogfmtLanes && (reinterpret_cast<uintptr_t>(src) & 7u) == 0) {
    logfmt_encode_row_lanes(slot, static_cast<const uint2*>(src), hidden / kLogfmtChannels, lane);
    return;
  }
#endif
  logfmt_encode_row_by_block(slot, src, hidden, lane, lanes);
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

// Decodes channels [c, c + 4 * groups) (c a multiple of 4, within one
// block; groups 1 or 2) of the slot into v: the block's levels computed
// once.
COURIER_DEVICE_INLINE void logfmt_load_groups(const std::byte* slot, uint32_t hidden, uint32_t c,
                                              uint32_t groups, float* v) {
  const uint32_t b = c / kLogfmtChannels, at = c % kLogfmtChannels;
  const uint32_t meta = reinterpret_cast<const uint32_t*>(slot)[b];
  const std::byte* block = slot + logfmt_meta_bytes(hidden) + uint64_t{b} * kLogfmtBlockBytes;
  float lmin = 0.0f, step = 0.0f;
  if (meta == 0 ||
      !logfmt_params(bf16_to_float(static_cast<uint16_t>(meta >> 16)),
                     bf16_to_float(static_cast<uint16_t>(meta & 0xFFFFu)), &lmin, &step)) {
    const auto* p = reinterpret_cast<const uint16_t*>(block) + at;
    for (uint32_t i = 0; i < 4 * groups; ++i) v[i] = meta == 0 ? bf16_to_float(p[i]) : 0.0f;
    return;
  }
  for (uint32_t g = 0; g < groups; ++g) {
    const auto* p = reinterpret_cast<const uint8_t*>(block) + 5 * (at / 4 + g);
    uint64_t word = 0;
    for (uint32_t j = 0; j < 5; ++j) word |= uint64_t{p[j]} << (8 * j);
    for (uint32_t i = 0; i < 4; ++i) {
      const uint32_t code = static_cast<uint32_t>(word >> (10 * i)) & 0x3FFu;
      const uint32_t m = code & 0x1FFu;
      const float a = m == 0 ? 0.0f : exp2f(lmin + static_cast<float>(m - 1) * step);
      v[4 * g + i] = (code & 0x200u) != 0 ? -a : a;
    }
  }
}

// Decodes channels [c, c + 4) (c a multiple of 4) of the slot into v.
COURIER_DEVICE_INLINE void logfmt_load4(const std::byte* slot, uint32_t hidden, uint32_t c,
                                        float* v) {
  logfmt_load_groups(slot, hidden, c, 1, v);
}

// Decodes channels [c, c + 8) (c a multiple of 8) of the slot into v.
COURIER_DEVICE_INLINE void logfmt_load8(const std::byte* slot, uint32_t hidden, uint32_t c,
                                        float* v) {
  logfmt_load_groups(slot, hidden, c, 2, v);
}

}  // namespace courier::device
