#include "core/proxy/doorbell.hpp"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <ctime>

namespace courier {

void Doorbell::ring() const {
  if (word_ == nullptr) return;
    // The caller's work (a queued task, a posted write) before the look at
    // `sleepers`: the sleeper's increment and its look for work are ordered
    // the other way round.
#if defined(__SANITIZE_THREAD__)
  // ThreadSanitizer models no fences: a read-modify-write orders the same way.
  if (std::atomic_ref<uint32_t>(word_->sleepers).fetch_add(0, std::memory_order_seq_cst) == 0) {
    return;
  }
#else
  // A fence and a plain load keep the line shared among the ringers while
  // nobody sleeps (a read-modify-write per post would bounce it).
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (std::atomic_ref<uint32_t>(word_->sleepers).load(std::memory_order_relaxed) == 0) return;
#endif
  std::atomic_ref<uint32_t>(word_->rings).fetch_add(1, std::memory_order_seq_cst);
  // Not FUTEX_PRIVATE: the word may be shared with other processes.
  syscall(SYS_futex, &word_->rings, FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

uint32_t Doorbell::begin_sleep() const {
  const uint32_t ticket = std::atomic_ref<uint32_t>(word_->rings).load(std::memory_order_seq_cst);
  std::atomic_ref<uint32_t>(word_->sleepers).fetch_add(1, std::memory_order_seq_cst);
  return ticket;
}

bool Doorbell::sleep(uint32_t ticket, uint64_t timeout_ns) const {
  timespec timeout{static_cast<time_t>(timeout_ns / 1'000'000'000),
                   static_cast<long>(timeout_ns % 1'000'000'000)};
  const long rc = syscall(SYS_futex, &word_->rings, FUTEX_WAIT, ticket, &timeout, nullptr, 0);
  if (rc != 0 && errno == ETIMEDOUT) return false;
  // Woken, or the word had changed already (EAGAIN), or a signal (EINTR):
  // in all these cases look for work at once.
  return std::atomic_ref<uint32_t>(word_->rings).load(std::memory_order_seq_cst) != ticket ||
         rc == 0;
}

void Doorbell::end_sleep() const {
  std::atomic_ref<uint32_t>(word_->sleepers).fetch_sub(1, std::memory_order_seq_cst);
}

}  // namespace courier
