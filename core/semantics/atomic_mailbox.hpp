// Memory for emulated atomics (COURIER_ATOMICS=imm), one per proxy endpoint.
//
// An emulated atomic travels as a write with immediate data: the 32-byte
// AtomicRecord goes from this rank's request staging slot into the peer's
// request mailbox (slot chosen by the sender, named in the immediate data);
// the peer's proxy applies it and answers with an 8-byte write of the old
// value into this rank's reply mailbox. Slots are per (peer, slot), so no two
// senders ever share one. docs/wire-formats.md, "Emulated atomics".
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/proxy/proxy_transport.hpp"
#include "core/semantics/imm_codec.hpp"

namespace courier {

// Window ids of the four regions (registered on the endpoint like user windows).
inline constexpr uint32_t kRequestMailboxWindow = kFirstInternalWindow + 0;
inline constexpr uint32_t kReplyMailboxWindow = kFirstInternalWindow + 1;
inline constexpr uint32_t kRequestStagingWindow = kFirstInternalWindow + 2;
inline constexpr uint32_t kReplyStagingWindow = kFirstInternalWindow + 3;
static_assert(kReplyStagingWindow < kMaxWindowIds);

struct AtomicRecord {
  uint32_t op;       // one COURIER_NIC_ATOMIC_* bit
  uint16_t seq;      // the stream sequence number of the request (checked)
  uint8_t window;    // the receiver's window
  uint8_t reserved;  // 0
  uint64_t offset;   // byte offset in that window, aligned to the op's width
  uint64_t operand;  // addend or new value
  uint32_t channel;  // the sender's FIFO channel (for diagnostics)
  uint32_t check;    // kRecordCheck ^ seq: a slot that was never written fails it
};
static_assert(sizeof(AtomicRecord) == 32);
inline constexpr uint32_t kRecordCheck = 0xC0A7E5u;

class AtomicMailbox {
 public:
  explicit AtomicMailbox(uint32_t world_size);

  uint32_t world_size() const { return world_; }
  // Offsets of (peer, slot) inside each region.
  static uint64_t request_offset(uint32_t peer, uint32_t slot) {
    return (uint64_t{peer} * kMailboxSlots + slot) * sizeof(AtomicRecord);
  }
  static uint64_t reply_offset(uint32_t peer, uint32_t slot) {
    return (uint64_t{peer} * kMailboxSlots + slot) * sizeof(uint64_t);
  }
  AtomicRecord& request_in(uint32_t peer, uint32_t slot) { return requests_in_[index(peer, slot)]; }
  AtomicRecord& request_out(uint32_t peer, uint32_t slot) {
    return requests_out_[index(peer, slot)];
  }
  uint64_t& reply_in(uint32_t peer, uint32_t slot) { return replies_in_[index(peer, slot)]; }
  uint64_t& reply_out(uint32_t peer, uint32_t slot) { return replies_out_[index(peer, slot)]; }

  // Base and size of a region, by window id, for registration.
  void* base(uint32_t window);
  size_t bytes(uint32_t window) const;

 private:
  size_t index(uint32_t peer, uint32_t slot) const { return size_t{peer} * kMailboxSlots + slot; }
  uint32_t world_;
  std::unique_ptr<AtomicRecord[]> requests_in_, requests_out_;
  std::unique_ptr<uint64_t[]> replies_in_, replies_out_;
};

}  // namespace courier
