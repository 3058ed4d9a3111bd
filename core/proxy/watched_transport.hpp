// WatchedTransport: the transport as a proxy thread and its semantics layer
// call it. Two jobs, both about failures that stop a proxy thread from
// coming back to its loop:
//   - once the job failed (JobFailure), it refuses every post with
//     kCancelledByFailure instead of handing it on: a post to a dead rank
//     may never return (job_failure.hpp says why);
//   - it records which call the thread is inside (which post to which rank,
//     or a poll), so that a thread that stopped answering can be described
//     from another thread ("inside post_write to rank 2").
// Cost per call: one acquire load and two relaxed stores to a word only this
// thread writes.
#pragma once

#include <fmt/format.h>

#include <atomic>
#include <cstdint>
#include <string>

#include "core/proxy/job_failure.hpp"
#include "core/proxy/transport_decorator.hpp"

namespace courier {

class WatchedTransport final : public TransportDecorator {
 public:
  enum class Call : uint32_t { none = 0, post_write = 1, post_atomic = 2, poll = 3 };
  struct Activity {
    Call call = Call::none;
    uint32_t peer = 0;  // for the posts
  };

  // `failure` may be null: nothing is ever refused then.
  WatchedTransport(ProxyTransport& inner, const JobFailure* failure)
      : TransportDecorator(inner), failure_(failure) {}

  int post_write(const WriteRequest& write, uint64_t cookie, std::string* error) override {
    if (failed()) return refuse(write.peer, error);
    Inside inside(*this, Call::post_write, write.peer);
    return inner_.post_write(write, cookie, error);
  }
  int post_atomic(const AtomicRequest& atomic, uint64_t cookie, std::string* error) override {
    if (failed()) return refuse(atomic.peer, error);
    Inside inside(*this, Call::post_atomic, atomic.peer);
    return inner_.post_atomic(atomic, cookie, error);
  }
  // Polls go on after a failure: completions still arrive, and a poll is
  // where the provider progresses (a thread that stopped polling could not
  // take tasks either, so nothing is gained by stopping).
  int poll(courier_nic_completion_v1* out, uint32_t max) override {
    Inside inside(*this, Call::poll, 0);
    return inner_.poll(out, max);
  }

  bool failed() const { return failure_ != nullptr && failure_->tripped(); }

  // The call the owning thread is inside now (any thread may ask).
  Activity activity() const {
    const uint64_t word = call_.load(std::memory_order_relaxed);
    return {static_cast<Call>(word >> 32), static_cast<uint32_t>(word)};
  }
  static std::string describe(Activity a) {
    switch (a.call) {
      case Call::none:
        break;
      case Call::post_write:
        return fmt::format("inside the transport's post_write to rank {}", a.peer);
      case Call::post_atomic:
        return fmt::format("inside the transport's post_atomic to rank {}", a.peer);
      case Call::poll:
        return "inside the transport's poll";
    }
    return "not inside a transport call";
  }

 private:
  // Marks the call for its duration. Only the owning thread writes call_.
  class Inside {
   public:
    Inside(WatchedTransport& t, Call call, uint32_t peer) : t_(t) {
      t_.call_.store((uint64_t{static_cast<uint32_t>(call)} << 32) | peer,
                     std::memory_order_relaxed);
    }
    ~Inside() { t_.call_.store(0, std::memory_order_relaxed); }
    Inside(const Inside&) = delete;
    Inside& operator=(const Inside&) = delete;

   private:
    WatchedTransport& t_;
  };

  int refuse(uint32_t peer, std::string* error) const {
    *error = fmt::format("not posted to rank {}: {}", peer, failure_->describe());
    return kCancelledByFailure;
  }

  const JobFailure* failure_;
  std::atomic<uint64_t> call_{0};
};

}  // namespace courier
