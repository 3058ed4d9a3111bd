// RetryingTransport: absorbs transient post failures (-EBUSY, see
// docs/plugin-abi.md section 4) of the transport it wraps. A refused request
// is accepted, kept, and re-posted from poll() with exponential back-off; once
// the retries are spent it completes with an error. Requests to a peer that
// has one waiting queue behind it, so each peer still sees post order. Once
// the job failed (watch_failure) nothing is re-posted: what is kept
// completes with kCancelledByFailure. docs/faults.md describes the policy.
// It is also where a layer's own posts wait when the transport is full
// (WriteRequest::keep_when_full): the one queue of refused posts below the
// proxy, whose own commands wait in their FIFO rings.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <variant>

#include "core/proxy/failed_posts.hpp"
#include "core/proxy/job_failure.hpp"
#include "core/proxy/proxy_transport.hpp"
#include "core/proxy/transport_decorator.hpp"

namespace courier {

// Monotonic nanoseconds; decorators take one so tests can drive time.
using NanoClock = std::function<uint64_t()>;
uint64_t steady_nanos();

struct RetryPolicy {
  uint32_t retries = 7;                           // COURIER_RETRY_COUNT
  std::chrono::nanoseconds first_delay{4'000};    // before the first re-post
  std::chrono::nanoseconds max_delay{1'000'000};  // the doubling stops here
  // Requests kept at once (waiting or queued behind one); more are refused
  // with -EAGAIN and stay in their FIFO ring (keep_when_full ones are kept
  // all the same: they are bounded by the mailbox slots).
  uint32_t max_held = 4096;
};

class RetryingTransport final : public TransportDecorator {
 public:
  RetryingTransport(ProxyTransport& inner, const RetryPolicy& policy, NanoClock now = steady_nanos);
  // Owns `inner` (a decorator built for it).
  RetryingTransport(std::unique_ptr<ProxyTransport> inner, const RetryPolicy& policy,
                    NanoClock now = steady_nanos);

  int post_write(const WriteRequest& write, uint64_t cookie, std::string* error) override;
  int post_atomic(const AtomicRequest& atomic, uint64_t cookie, std::string* error) override;
  // Re-posts what is due, then returns one failed request (alone, so that
  // last_error() describes it) or the inner transport's completions.
  int poll(courier_nic_completion_v1* out, uint32_t max) override;
  std::string last_error() const override;

  // Once `failure` (which must outlive this) tripped, held requests are no
  // longer re-posted: a dead rank can keep a post from ever returning
  // (job_failure.hpp). Each completes with kCancelledByFailure instead.
  void watch_failure(const JobFailure* failure) { failure_ = failure; }

  // Requests accepted but not yet handed to the inner transport.
  size_t held() const { return held_; }
  // Re-posts made so far (tests and diagnostics).
  uint64_t retries_made() const { return retries_made_; }

 private:
  struct Held {
    std::variant<WriteRequest, AtomicRequest> request;
    uint64_t cookie = 0;
    uint32_t attempts = 0;  // posts that failed transiently
    uint64_t due = 0;       // earliest re-post, steady nanoseconds
  };

  int post(std::variant<WriteRequest, AtomicRequest> request, uint32_t peer, uint64_t cookie,
           std::string* error);
  int post_inner(const Held& held, std::string* error);
  // A fresh post failed transiently (-EBUSY): keep it for a retry (or give
  // up at once when no retries are allowed).
  int hold(Held held, uint32_t peer, std::string* error);
  // A keep_when_full post refused for room (-EAGAIN): kept until there is.
  int keep(Held held, uint32_t peer);
  static bool kept_when_full(const std::variant<WriteRequest, AtomicRequest>& request) {
    const auto* write = std::get_if<WriteRequest>(&request);
    return write != nullptr && write->keep_when_full;
  }
  // Posts the due heads of the peer queues and what waits behind them.
  void pump();
  void give_up(const Held& held, int status, const std::string& why);
  // Completes every held request with kCancelledByFailure.
  void cancel_all();
  uint64_t delay_after(uint32_t attempts) const;

  RetryPolicy policy_;
  NanoClock now_;
  const JobFailure* failure_ = nullptr;
  std::unordered_map<uint32_t, std::deque<Held>> waiting_;  // by peer; head is being retried
  size_t held_ = 0;
  uint64_t retries_made_ = 0;
  // Requests whose retries ran out, with the message last_error() reports.
  FailedPosts failed_;  // made-up TX completions, one per poll
};

}  // namespace courier
