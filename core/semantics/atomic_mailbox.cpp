#include "core/semantics/atomic_mailbox.hpp"

#include "core/check.hpp"

namespace courier {

AtomicMailbox::AtomicMailbox(uint32_t world_size)
    : world_(world_size),
      requests_in_(new AtomicRecord[size_t{world_size} * kMailboxSlots]()),
      requests_out_(new AtomicRecord[size_t{world_size} * kMailboxSlots]()),
      replies_in_(new uint64_t[size_t{world_size} * kMailboxSlots]()),
      replies_out_(new uint64_t[size_t{world_size} * kMailboxSlots]()) {}

void* AtomicMailbox::base(uint32_t window) {
  switch (window) {
    case kRequestMailboxWindow:
      return requests_in_.get();
    case kReplyMailboxWindow:
      return replies_in_.get();
    case kRequestStagingWindow:
      return requests_out_.get();
    case kReplyStagingWindow:
      return replies_out_.get();
    default:
      fail("window {} is not an atomic mailbox region", window);
  }
}

size_t AtomicMailbox::bytes(uint32_t window) const {
  const size_t slots = size_t{world_} * kMailboxSlots;
  switch (window) {
    case kRequestMailboxWindow:
    case kRequestStagingWindow:
      return slots * sizeof(AtomicRecord);
    case kReplyMailboxWindow:
    case kReplyStagingWindow:
      return slots * sizeof(uint64_t);
    default:
      fail("window {} is not an atomic mailbox region", window);
  }
}

}  // namespace courier
