// The consumer side of a FIFO channel (one proxy thread per channel).
// Reads published slots in ticket order, checks each slot's sequence number
// and clears the slot so that its next lap can be told apart. A command the
// proxy cannot post yet goes back into its slot (the ring is the channel's
// only queue): the producers' room counts from the completed prefix, so a
// slot taken but not completed is never overwritten.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "courier/device_channel.hpp"
#include "courier/transfer_cmd.hpp"

namespace courier {

class FifoConsumer {
 public:
  FifoConsumer(TransferCmd* slots, uint32_t depth, uint32_t channel_id)
      : slots_(slots), mask_(depth - 1), channel_id_(channel_id) {}

  // Copies up to `max` published commands into `out`, in ticket order,
  // without taking them; the first has ticket next_ticket(). Throws
  // courier::Error when a slot's sequence number is not the expected one
  // (the ring was corrupted).
  uint32_t peek(TransferCmd* out, uint32_t max) const;
  // As peek(), and takes them: their slots are cleared (while their lines
  // are still in this core's cache) and next_ticket() moves past them.
  uint32_t poll(TransferCmd* out, uint32_t max);
  // Puts the last `n` commands poll() took back into their slots, unread:
  // the next poll() returns them first. `cmds` are those commands, in
  // ticket order.
  void give_back(const TransferCmd* cmds, uint32_t n);
  // Whether the command with ticket next_ticket() is published.
  bool ready() const {
    return std::atomic_ref<uint64_t>(slots_[next_ & mask_].word0).load(std::memory_order_acquire) !=
           0;
  }

  uint64_t next_ticket() const { return next_; }

 private:
  TransferCmd* slots_;
  uint64_t next_ = 0;
  uint32_t mask_;
  uint32_t channel_id_;
};

// Makes `completed` visible to the producers and wakes those blocked until
// it reached their target (CPU producers block on the low half of
// `completed`, FifoControl::wake_at).
void publish_completed(FifoControl& control, uint64_t completed);
// Wakes every producer blocked on the channel, whatever it waits for.
void wake_producers(FifoControl& control);
// Records a fatal error on the channel, replacing an earlier non-fatal one
// (a fatal error must be seen by every waiter; the first fatal one stays).
void mark_channel_fatal(FifoControl& control, uint64_t ticket, ChannelErrorCode code);

// Which tickets of a channel have completed, out of order; exposes the
// in-order prefix the producers see as control->completed.
class CompletionTracker {
 public:
  explicit CompletionTracker(uint32_t depth);
  // Throws courier::Error for a ticket that cannot be outstanding (already
  // complete, or a ring lap ahead): a duplicated or stale completion.
  void complete(uint64_t ticket) {
    // In order, the common case: the prefix's own ticket is never marked
    // (the prefix moves past marked tickets), so it cannot be a duplicate.
    if (ticket == prefix_) {
      ++prefix_;
      while (done_[prefix_ & mask_] == Mark::done) {
        done_[prefix_ & mask_] = Mark::open;
        ++prefix_;
      }
      return;
    }
    complete_out_of_order(ticket);
  }
  uint64_t prefix() const { return prefix_; }
  // Whether `ticket` (at or after the prefix) completed ahead of it.
  bool is_done(uint64_t ticket) const {
    return ticket < prefix_ || done_[ticket & mask_] == Mark::done;
  }

 private:
  void complete_out_of_order(uint64_t ticket);

  // Not a character type: stores to it cannot alias everything else, so
  // callers keep their state in registers across complete().
  enum class Mark : uint8_t { open = 0, done = 1 };

  std::unique_ptr<Mark[]> done_;
  uint64_t prefix_ = 0;
  uint32_t mask_;
};

}  // namespace courier
