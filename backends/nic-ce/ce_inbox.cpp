// The receiving side: the messages peers left in this endpoint's inbox. A
// host_write message's bytes are copied into place; an imm message becomes
// an RX_IMM completion. Advancing `consumed` afterwards is what tells the
// sender its message was delivered.
#include <cstring>

#include "ce_endpoint.hpp"

namespace courier::nic_ce {

namespace {
// Host-memory writes applied per poll, so one poll's time stays bounded.
constexpr uint32_t kMaxHostWritesPerPoll = 256;
}  // namespace

void Endpoint::apply_host_write(const Message& m) {
  const auto slot = static_cast<uint32_t>(m.key & 0xFFFFFFFFu);
  const auto generation = static_cast<uint32_t>(m.key >> 32);
  const LocalRegion* region = slot < kRegistrationSlots ? regions_[slot] : nullptr;
  if (region != nullptr && region->generation != generation) region = nullptr;
  // The sender checked the key and the bounds against this registration;
  // a message that fails them now (deregistered meanwhile) is dropped.
  if (region == nullptr || region->mem_kind != COURIER_MEM_HOST || m.length > kInlineBytes ||
      m.offset > region->length || m.length > region->length - m.offset) {
    ++dropped_host_writes_;
    return;
  }
  std::memcpy(region->address + m.offset, m.payload, m.length);
}

uint32_t Endpoint::drain_inbox(courier_nic_completion_v1* out, uint32_t max) {
  SegmentLayout& own = *own_.get();
  uint32_t n = 0;
  uint32_t writes = 0;
  Message m;
  while (n < max && writes < kMaxHostWritesPerPoll && dequeue(own, consume_position_, &m)) {
    if (m.kind == MessageKind::host_write) {
      apply_host_write(m);
      ++writes;
    } else {
      courier_nic_completion_v1& c = out[n++];
      c = {};
      c.kind = COURIER_NIC_COMP_RX_IMM;
      c.status = 0;
      c.peer = m.sender;
      c.imm = m.imm;
      c.length = m.length;
    }
    ++consume_position_;
    // After the bytes are in place: the sender's write counts as delivered.
    own.consumed.store(consume_position_, std::memory_order_release);
  }
  return n;
}

}  // namespace courier::nic_ce
