// TransferCmd: the 16-byte command a GPU thread pushes into a FIFO channel.
//
// Bit layout (docs/wire-formats.md has the full table), two little-endian
// 64-bit words:
//
//   word0  [2:0] op   [5:3] flags   [9:6] window   [25:10] dst_rank
//          [39:26] seq   [63:40] length
//   word1  WRITE:   [31:0] src_offset   [63:32] dst_offset
//          ATOMIC:  [31:0] operand      [63:32] dst_offset
//          BARRIER: [63:0] epoch
//
// Offsets are relative to registered memory windows, never raw pointers, so
// a command means the same thing on every rank. op == 0 marks an empty ring
// slot; the producer stores word0 last, so a non-zero op publishes the slot.
// Encoders reject values that do not fit (never truncate) and report why.
#pragma once

#include <cstdint>

#include "courier/platform.hpp"

namespace courier {

// A mask of the low `bits` bits.
COURIER_HOST_DEVICE constexpr uint64_t low_bits(unsigned bits) { return (uint64_t{1} << bits) - 1; }

enum class CmdOp : uint8_t { empty = 0, write = 1, atomic = 2, drain = 3, barrier = 4 };

// WRITE flags.
inline constexpr uint8_t kCmdFlagImm = 1u << 0;  // deliver an immediate-data notification
// WRITE flag bits [2:1]: where the bytes are read. 0: `window` at
// src_offset, like the destination; 1..kCmdSources: this rank's source
// registration (Context::set_source) number value - 1.
inline constexpr unsigned kCmdSourceShift = 1;
inline constexpr uint8_t kCmdSourceMask = 3u << kCmdSourceShift;
inline constexpr uint32_t kCmdSources = 3;

// ATOMIC operations (carried in the flags field): a non-fetching add of the
// 32-bit operand, sign-extended, to a 64- or 32-bit word (so counters can
// also be decremented). Values 2-7 are reserved.
enum class AtomicOp : uint8_t { add_u64 = 0, add_u32 = 1 };

enum class CmdStatus : uint8_t {
  ok = 0,
  rank_too_large,
  window_too_large,
  length_zero,
  length_too_large,
  src_offset_too_large,
  dst_offset_too_large,
  flags_invalid,
  operand_too_large,
  source_too_large,
};

COURIER_HOST_DEVICE inline const char* to_string(CmdStatus status) {
  switch (status) {
    case CmdStatus::ok:
      return "ok";
    case CmdStatus::rank_too_large:
      return "destination rank exceeds 65535";
    case CmdStatus::window_too_large:
      return "window id exceeds 15";
    case CmdStatus::length_zero:
      return "length is zero";
    case CmdStatus::length_too_large:
      return "length exceeds 16777215 bytes";
    case CmdStatus::src_offset_too_large:
      return "source offset exceeds 32 bits";
    case CmdStatus::dst_offset_too_large:
      return "destination offset exceeds 32 bits";
    case CmdStatus::flags_invalid:
      return "unknown flag bits";
    case CmdStatus::operand_too_large:
      return "atomic operand exceeds 32 bits";
    case CmdStatus::source_too_large:
      return "WRITE source exceeds 3";
  }
  return "unknown status";
}

struct alignas(16) TransferCmd {
  uint64_t word0 = 0;
  uint64_t word1 = 0;

  // Field geometry: {shift, bits}.
  static constexpr unsigned kOpShift = 0, kOpBits = 3;
  static constexpr unsigned kFlagsShift = 3, kFlagsBits = 3;
  static constexpr unsigned kWindowShift = 6, kWindowBits = 4;
  static constexpr unsigned kRankShift = 10, kRankBits = 16;
  static constexpr unsigned kSeqShift = 26, kSeqBits = 14;
  static constexpr unsigned kLengthShift = 40, kLengthBits = 24;

  static constexpr uint64_t kMaxRank = low_bits(kRankBits);
  static constexpr uint64_t kMaxWindow = low_bits(kWindowBits);
  static constexpr uint64_t kMaxLength = low_bits(kLengthBits);
  static constexpr uint64_t kSeqMask = low_bits(kSeqBits);
  static constexpr uint64_t kMaxOffset = low_bits(32);

  COURIER_HOST_DEVICE constexpr uint64_t field(unsigned shift, unsigned bits) const {
    return (word0 >> shift) & low_bits(bits);
  }
  COURIER_HOST_DEVICE constexpr CmdOp op() const {
    return static_cast<CmdOp>(field(kOpShift, kOpBits));
  }
  COURIER_HOST_DEVICE constexpr uint8_t flags() const {
    return static_cast<uint8_t>(field(kFlagsShift, kFlagsBits));
  }
  COURIER_HOST_DEVICE constexpr uint32_t window() const {
    return static_cast<uint32_t>(field(kWindowShift, kWindowBits));
  }
  // WRITE: 0 (read `window`) or this rank's source registration + 1.
  COURIER_HOST_DEVICE constexpr uint32_t source() const {
    return (flags() & kCmdSourceMask) >> kCmdSourceShift;
  }
  COURIER_HOST_DEVICE constexpr uint32_t dst_rank() const {
    return static_cast<uint32_t>(field(kRankShift, kRankBits));
  }
  COURIER_HOST_DEVICE constexpr uint32_t seq() const {
    return static_cast<uint32_t>(field(kSeqShift, kSeqBits));
  }
  COURIER_HOST_DEVICE constexpr uint32_t length() const {
    return static_cast<uint32_t>(field(kLengthShift, kLengthBits));
  }
  COURIER_HOST_DEVICE constexpr uint32_t src_offset() const {
    return static_cast<uint32_t>(word1 & kMaxOffset);
  }
  COURIER_HOST_DEVICE constexpr uint32_t operand() const { return src_offset(); }
  COURIER_HOST_DEVICE constexpr uint32_t dst_offset() const {
    return static_cast<uint32_t>(word1 >> 32);
  }
  COURIER_HOST_DEVICE constexpr uint64_t epoch() const { return word1; }

  // Stamps the per-channel sequence number (the ring ticket modulo 2^14).
  COURIER_HOST_DEVICE constexpr void set_seq(uint64_t ticket) {
    word0 = (word0 & ~(kSeqMask << kSeqShift)) | ((ticket & kSeqMask) << kSeqShift);
  }
};
static_assert(sizeof(TransferCmd) == 16, "TransferCmd must be exactly 16 bytes");
static_assert(TransferCmd::kLengthShift + TransferCmd::kLengthBits == 64, "word0 is full");

struct WriteCmdArgs {
  uint64_t dst_rank = 0;
  uint64_t window = 0;
  uint64_t src_offset = 0;
  uint64_t dst_offset = 0;
  uint64_t length = 0;
  uint8_t flags = 0;  // kCmdFlag*
  // 0: read [src_offset, +length) of `window` here; 1..kCmdSources: of this
  // rank's source registration source - 1 (Context::set_source) instead.
  uint8_t source = 0;
};

namespace detail {
COURIER_HOST_DEVICE constexpr uint64_t pack(unsigned shift, uint64_t value) {
  return value << shift;
}
COURIER_HOST_DEVICE constexpr CmdStatus check_common(uint64_t rank, uint64_t window) {
  if (rank > TransferCmd::kMaxRank) return CmdStatus::rank_too_large;
  if (window > TransferCmd::kMaxWindow) return CmdStatus::window_too_large;
  return CmdStatus::ok;
}
COURIER_HOST_DEVICE constexpr uint64_t header(CmdOp op, uint64_t flags, uint64_t window,
                                              uint64_t rank, uint64_t length) {
  return pack(TransferCmd::kOpShift, static_cast<uint64_t>(op)) |
         pack(TransferCmd::kFlagsShift, flags) | pack(TransferCmd::kWindowShift, window) |
         pack(TransferCmd::kRankShift, rank) | pack(TransferCmd::kLengthShift, length);
}
}  // namespace detail

COURIER_HOST_DEVICE constexpr CmdStatus encode_write(const WriteCmdArgs& a, TransferCmd* out) {
  CmdStatus status = detail::check_common(a.dst_rank, a.window);
  if (status != CmdStatus::ok) return status;
  if (a.length == 0) return CmdStatus::length_zero;
  if (a.length > TransferCmd::kMaxLength) return CmdStatus::length_too_large;
  if (a.src_offset > TransferCmd::kMaxOffset) return CmdStatus::src_offset_too_large;
  if (a.dst_offset > TransferCmd::kMaxOffset) return CmdStatus::dst_offset_too_large;
  if ((a.flags & ~kCmdFlagImm) != 0) return CmdStatus::flags_invalid;
  if (a.source > kCmdSources) return CmdStatus::source_too_large;
  const uint64_t flags = a.flags | (uint64_t{a.source} << kCmdSourceShift);
  out->word0 = detail::header(CmdOp::write, flags, a.window, a.dst_rank, a.length);
  out->word1 = a.src_offset | (a.dst_offset << 32);
  return CmdStatus::ok;
}

// An atomic add on a 64- or 32-bit word at dst_offset of `window` on dst_rank;
// `operand` holds the addend's 32-bit two's-complement pattern.
COURIER_HOST_DEVICE constexpr CmdStatus encode_atomic(uint64_t dst_rank, uint64_t window,
                                                      uint64_t dst_offset, AtomicOp op,
                                                      uint64_t operand, TransferCmd* out) {
  CmdStatus status = detail::check_common(dst_rank, window);
  if (status != CmdStatus::ok) return status;
  if (dst_offset > TransferCmd::kMaxOffset) return CmdStatus::dst_offset_too_large;
  if (operand > TransferCmd::kMaxOffset) return CmdStatus::operand_too_large;
  if (op != AtomicOp::add_u64 && op != AtomicOp::add_u32) return CmdStatus::flags_invalid;
  out->word0 = detail::header(CmdOp::atomic, static_cast<uint64_t>(op), window, dst_rank, 0);
  out->word1 = operand | (dst_offset << 32);
  return CmdStatus::ok;
}

COURIER_HOST_DEVICE constexpr CmdStatus encode_drain(TransferCmd* out) {
  out->word0 = detail::header(CmdOp::drain, 0, 0, 0, 0);
  out->word1 = 0;
  return CmdStatus::ok;
}

// BARRIER flags: which ranks take part.
inline constexpr uint8_t kBarrierWorld = 0;  // every rank of the job
inline constexpr uint8_t kBarrierRail = 1;   // the ranks with this rank's local index on every host

COURIER_HOST_DEVICE constexpr CmdStatus encode_barrier(uint64_t epoch, TransferCmd* out,
                                                       uint8_t scope = kBarrierWorld) {
  if (scope != kBarrierWorld && scope != kBarrierRail) return CmdStatus::flags_invalid;
  out->word0 = detail::header(CmdOp::barrier, scope, 0, 0, 0);
  out->word1 = epoch;
  return CmdStatus::ok;
}

}  // namespace courier
