#include "core/proxy/fifo_consumer.hpp"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <climits>

#include "core/check.hpp"

namespace courier {

uint32_t FifoConsumer::peek(TransferCmd* out, uint32_t max) const {
  // In locals: the stores to `out` could alias the members as far as the
  // compiler knows, and reloading them costs the per-command path.
  TransferCmd* const slots = slots_;
  const uint64_t mask = mask_;
  const uint64_t first = next_;
  uint32_t count = 0;
  while (count < max) {
    const uint64_t ticket = first + count;
    TransferCmd& slot = slots[ticket & mask];
    const uint64_t header = std::atomic_ref<uint64_t>(slot.word0).load(std::memory_order_acquire);
    if (header == 0) break;  // not published yet
    TransferCmd cmd;
    cmd.word0 = header;
    cmd.word1 = std::atomic_ref<uint64_t>(slot.word1).load(std::memory_order_relaxed);
    if (cmd.seq() != (ticket & TransferCmd::kSeqMask)) [[unlikely]] {
      fail(
          "FIFO channel {}: slot {} holds sequence number {} but ticket {} (sequence {}) was "
          "expected: the ring was overwritten or corrupted",
          channel_id_, ticket & mask, cmd.seq(), ticket, ticket & TransferCmd::kSeqMask);
    }
    out[count++] = cmd;
  }
  return count;
}

uint32_t FifoConsumer::poll(TransferCmd* out, uint32_t max) {
  const uint32_t n = peek(out, max);
  for (uint32_t i = 0; i < n; ++i) {
    // Published to the producers by `completed`, not by this store.
    std::atomic_ref<uint64_t>(slots_[(next_ + i) & mask_].word0)
        .store(0, std::memory_order_relaxed);
  }
  next_ += n;
  return n;
}

void FifoConsumer::give_back(const TransferCmd* cmds, uint32_t n) {
  // Only this thread writes a published slot until its ticket completes
  // (the producers' room counts from the completed prefix).
  next_ -= n;
  for (uint32_t i = 0; i < n; ++i) {
    std::atomic_ref<uint64_t>(slots_[(next_ + i) & mask_].word0)
        .store(cmds[i].word0, std::memory_order_relaxed);
  }
}

void publish_completed(FifoControl& control, uint64_t completed) {
  // Sequentially consistent with the wake_at load below, and with a
  // producer's wake_at update and completed load: a producer about to block
  // is either seen here or sees the new value.
  std::atomic_ref<uint64_t>(control.completed).store(completed);
  std::atomic_ref<uint64_t> wake(control.wake_at);
  uint64_t waiting_for = wake.load();
  while (waiting_for != 0 && completed >= waiting_for) {
    if (wake.compare_exchange_weak(waiting_for, 0)) {
      wake_producers(control);
      return;
    }
  }
}

void wake_producers(FifoControl& control) {
  // The futex word is the low half of `completed` (little-endian), as the
  // producers' wait has it.
  syscall(SYS_futex, reinterpret_cast<const uint32_t*>(&control.completed), FUTEX_WAKE_PRIVATE,
          INT_MAX, nullptr, nullptr, 0);
}

void mark_channel_fatal(FifoControl& control, uint64_t ticket, ChannelErrorCode code) {
  std::atomic_ref<uint64_t> error(control.error);
  uint64_t seen = error.load(std::memory_order_relaxed);
  while (!is_fatal_channel_error(seen)) {
    if (error.compare_exchange_weak(seen, encode_channel_error(ticket, code))) return;
  }
}

CompletionTracker::CompletionTracker(uint32_t depth)
    : done_(std::make_unique<Mark[]>(depth)), mask_(depth - 1) {}

void CompletionTracker::complete_out_of_order(uint64_t ticket) {
  if (ticket - prefix_ > mask_ ||
      done_[ticket & mask_] == Mark::done) {  // also catches ticket < prefix_
    fail(
        "completion for ticket {} does not match an outstanding command (completed up to {}, "
        "ring depth {}): a duplicated or stale completion",
        ticket, prefix_, mask_ + 1);
  }
  // Ahead of the prefix: marked, and passed once the tickets before it
  // completed (complete() above).
  done_[ticket & mask_] = Mark::done;
}

}  // namespace courier
