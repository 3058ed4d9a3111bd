// Where a rank's idle proxy threads sleep, and how they are woken (docs/
// fifo-and-proxy.md, "Idle proxies"). A proxy thread that found nothing to
// do for a while announces itself as a sleeper, looks for work once more and
// then blocks on the word (a futex) until somebody rings or a bounded time
// passes. Who rings: the rank's own host code when it hands the proxies work
// (a kernel launch, a task), and the proxies of peers on the same host after
// they posted a write this rank may have to progress. The word lives in the
// host's shared segment, so a futex wake crosses processes.
//
// Ordering (a Dekker pair): the sleeper increments `sleepers`, then looks
// for work; a ringer publishes its work, then (after a full fence) reads
// `sleepers` and, when non-zero, bumps `rings` and wakes. One of the two
// always sees the other, and a ring between the sleeper's look and its
// futex wait changes `rings`, which makes the wait return at once.
#pragma once

#include <cstdint>

namespace courier {

struct alignas(64) DoorbellWord {
  uint32_t rings = 0;     // the futex word: bumped by every ring that found a sleeper
  uint32_t sleepers = 0;  // threads between begin_sleep and end_sleep
};

class Doorbell {
 public:
  Doorbell() = default;
  explicit Doorbell(DoorbellWord* word) : word_(word) {}
  bool valid() const { return word_ != nullptr; }

  // Wakes every sleeper, if there is one; otherwise costs a fence and a load.
  // A no-op without a word.
  void ring() const;

  // A sleeper: begin_sleep, then look for work, then sleep unless some was
  // found, then end_sleep. sleep() returns true when woken by a ring (or
  // when a ring came before it blocked), false after `timeout_ns`.
  uint32_t begin_sleep() const;
  bool sleep(uint32_t ticket, uint64_t timeout_ns) const;
  void end_sleep() const;

 private:
  DoorbellWord* word_ = nullptr;
};

}  // namespace courier
