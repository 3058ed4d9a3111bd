// The 32 bits of immediate data Courier sends with a write (docs/wire-formats.md,
// "Immediate data"). 32 bits because verbs and EFA carry no more.
//
//   [31:30] kind
//   kind 0 ordered write, 1 write with a user notification:
//           [29:16] sender's channel (mod 2^14)   [15:0] stream sequence number
//   kind 2 emulated atomic (record in mailbox slot):
//           [29:24] 0   [23:16] mailbox slot   [15:0] stream sequence number
//   kind 3 control: [29:26] subkind, the rest per subkind
//           atomic reply (subkind 0 applied, 1 rejected):
//           [25:24] 0   [23:16] mailbox slot   [15:0] the request's sequence number
//           barrier messages (subkinds 2-7): [25:16] channel   [15:0] generation
//
// A stream is one pair of proxy endpoints (thread i of one rank -> thread i of
// another); its sequence numbers count the messages that carry one.
#pragma once

#include <cstdint>

namespace courier {

enum class ImmKind : uint32_t { ordered_write = 0, notify_write = 1, atomic = 2, control = 3 };
enum class ControlKind : uint32_t {
  atomic_applied = 0,
  atomic_rejected = 1,
  barrier_arrive = 2,          // a host leader reached the world barrier
  barrier_release = 3,         // the global leader releases a host leader
  barrier_release_failed = 4,  // ... and says the epochs disagreed
  rail_arrive = 5,             // a rail member reached the rail barrier
  rail_release = 6,            // the rail leader releases a member
  rail_release_failed = 7,
};

inline constexpr uint32_t kImmSeqBits = 16;
inline constexpr uint32_t kImmSeqMask = (1u << kImmSeqBits) - 1;
inline constexpr uint32_t kImmChannelMask = (1u << 14) - 1;
inline constexpr uint32_t kMailboxSlots = 256;  // 8-bit slot field

struct DecodedImm {
  ImmKind kind = ImmKind::ordered_write;
  ControlKind control = ControlKind::atomic_applied;  // kind == control only
  uint32_t channel = 0;                               // kinds 0 and 1
  uint32_t slot = 0;                                  // atomic and replies
  uint16_t seq = 0;
};

constexpr uint32_t encode_write_imm(bool notify, uint32_t channel, uint16_t seq) {
  const uint32_t kind =
      static_cast<uint32_t>(notify ? ImmKind::notify_write : ImmKind::ordered_write);
  return (kind << 30) | ((channel & kImmChannelMask) << 16) | seq;
}

constexpr uint32_t encode_atomic_imm(uint32_t slot, uint16_t seq) {
  return (static_cast<uint32_t>(ImmKind::atomic) << 30) | ((slot & 0xffu) << 16) | seq;
}

constexpr uint32_t encode_reply_imm(ControlKind control, uint32_t slot, uint16_t seq) {
  return (static_cast<uint32_t>(ImmKind::control) << 30) | (static_cast<uint32_t>(control) << 26) |
         ((slot & 0xffu) << 16) | seq;
}

constexpr uint32_t encode_barrier_imm(ControlKind kind, uint32_t channel, uint16_t generation) {
  return (static_cast<uint32_t>(ImmKind::control) << 30) | (static_cast<uint32_t>(kind) << 26) |
         ((channel & 0x3ffu) << 16) | generation;
}

constexpr bool is_barrier(ControlKind kind) {
  return static_cast<uint32_t>(kind) >= static_cast<uint32_t>(ControlKind::barrier_arrive);
}

constexpr DecodedImm decode_imm(uint64_t imm) {
  const uint32_t v = static_cast<uint32_t>(imm);
  DecodedImm d;
  d.kind = static_cast<ImmKind>(v >> 30);
  d.seq = static_cast<uint16_t>(v & kImmSeqMask);
  if (d.kind == ImmKind::ordered_write || d.kind == ImmKind::notify_write) {
    d.channel = (v >> 16) & kImmChannelMask;
  } else {
    d.slot = (v >> 16) & 0xffu;
    if (d.kind == ImmKind::control) {
      d.control = static_cast<ControlKind>((v >> 26) & 0xfu);
      if (is_barrier(d.control)) d.channel = (v >> 16) & 0x3ffu;
    }
  }
  return d;
}

}  // namespace courier
