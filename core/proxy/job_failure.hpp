// JobFailure: the moment the job failed, as the proxy layer sees it.
//
// The Context trips it once, when it learns that a peer died or failed (the
// bootstrap's liveness watch, this rank's transport giving up, a hang it
// reported). From then on proxy threads and their transports post nothing
// more, to any rank: every channel is failed already, and a post can be
// swallowed for good by the failure itself. libfabric shm, for one, takes a
// spinlock in the target's shared region on every post; a rank killed while
// holding it (its progress holds it, so under traffic that is likely) leaves
// it held forever, and every later post to that rank spins inside the
// provider without returning, as does every post to a rank whose lock the
// dead rank held. Nothing above the provider can interrupt such a call, so
// the only defence is not to make it, and to bound every wait on a proxy
// thread once the job failed (ProxyThread::run, ProxyThread::try_stop).
//
// Thread safety: trip() from any thread; tripped() from any thread, on every
// post (one acquire load); rank(), reason() and since_ns() only after
// tripped() returned true (they are written before the flag and never again).
#pragma once

#include <fmt/format.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>

namespace courier {

// The status of work refused or dropped because the job failed already: a
// consequence of that failure, never reported as a new one.
inline constexpr int kCancelledByFailure = -ECANCELED;

class JobFailure {
 public:
  JobFailure() = default;
  JobFailure(const JobFailure&) = delete;
  JobFailure& operator=(const JobFailure&) = delete;

  // Records the failure (`rank`: the dead or suspect rank, -1 if unknown).
  // The first call wins; returns whether this one did.
  bool trip(int rank, std::string reason) {
    std::lock_guard lock(mutex_);
    if (tripped_.load(std::memory_order_relaxed)) return false;
    rank_ = rank;
    reason_ = std::move(reason);
    since_ns_ = now_ns();
    tripped_.store(true, std::memory_order_release);
    return true;
  }

  bool tripped() const noexcept { return tripped_.load(std::memory_order_acquire); }
  int rank() const { return rank_; }
  const std::string& reason() const { return reason_; }
  // When it tripped, on now_ns()'s clock.
  uint64_t since_ns() const { return since_ns_; }

  // "the job failed (rank 2: <reason>)", for messages of refused work.
  std::string describe() const {
    if (!tripped()) return "the job has not failed";
    return rank_ >= 0 ? fmt::format("the job failed (rank {}: {})", rank_, reason_)
                      : fmt::format("the job failed ({})", reason_);
  }
  // "the job failed (rank 2)": for lines logged after the reason was.
  std::string summary() const {
    if (!tripped()) return "the job has not failed";
    return rank_ >= 0 ? fmt::format("the job failed (rank {})", rank_) : "the job failed";
  }

  // Monotonic nanoseconds: the clock since_ns() and bounded waits use.
  static uint64_t now_ns() {
    return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                     std::chrono::steady_clock::now().time_since_epoch())
                                     .count());
  }

 private:
  std::mutex mutex_;  // serialises trip()
  std::atomic<bool> tripped_{false};
  int rank_ = -1;
  std::string reason_;
  uint64_t since_ns_ = 0;
};

}  // namespace courier
