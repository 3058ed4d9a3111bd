// FaultInjectingTransport: makes the transport it wraps misbehave the way
// real NICs may (COURIER_FAULTS, docs/faults.md): posts handed over out of
// order, completions held back or shuffled, incoming immediate data
// delivered twice, posts failing transiently. Deterministic for a given
// seed, thread index and call sequence.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <random>
#include <string>
#include <unordered_set>
#include <variant>
#include <vector>

#include "core/faults/fault_spec.hpp"
#include "core/log.hpp"
#include "core/proxy/failed_posts.hpp"
#include "core/proxy/proxy_transport.hpp"
#include "core/proxy/retrying_transport.hpp"
#include "core/proxy/transport_decorator.hpp"

namespace courier {

// What was injected so far.
struct FaultStats {
  uint64_t failed = 0;      // posts answered -EBUSY without reaching the inner transport
  uint64_t reordered = 0;   // posts held back and handed over after later ones
  uint64_t shuffled = 0;    // completion batches returned in shuffled order
  uint64_t delayed = 0;     // completions released after a non-zero delay
  uint64_t duplicated = 0;  // RX_IMM completions delivered twice
};

class FaultInjectingTransport final : public TransportDecorator {
 public:
  // A held-back post goes to the inner transport at the latest this long
  // after it was made, when no later post to its peer released it earlier.
  static constexpr uint64_t kMaxHoldNs = 200'000;
  // Posts held back at once; beyond it posts pass straight through.
  static constexpr size_t kMaxHeldPosts = 256;

  // `log` (may be null) receives a summary of the injected faults at
  // destruction.
  FaultInjectingTransport(ProxyTransport& inner, const FaultSpec& spec, uint32_t thread_index,
                          Logger* log = nullptr, NanoClock now = steady_nanos);
  FaultInjectingTransport(std::unique_ptr<ProxyTransport> inner, const FaultSpec& spec,
                          uint32_t thread_index, Logger* log = nullptr,
                          NanoClock now = steady_nanos);
  ~FaultInjectingTransport() override;
  FaultInjectingTransport(const FaultInjectingTransport&) = delete;
  FaultInjectingTransport& operator=(const FaultInjectingTransport&) = delete;

  // Without ORDERED_WRITES when posts are reordered: the core then orders at
  // the receiver, which is what makes the injected reordering legal.
  uint32_t caps() const override;
  int post_write(const WriteRequest& write, uint64_t cookie, std::string* error) override;
  int post_atomic(const AtomicRequest& atomic, uint64_t cookie, std::string* error) override;
  int poll(courier_nic_completion_v1* out, uint32_t max) override;
  std::string last_error() const override;

  const FaultStats& stats() const { return stats_; }
  const FaultSpec& spec() const { return spec_; }
  // Posts held back right now.
  size_t held_posts() const { return held_.size(); }

 private:
  using Request = std::variant<WriteRequest, AtomicRequest>;
  struct HeldPost {
    Request request;
    uint32_t peer;
    uint64_t cookie;
    uint64_t deadline;  // steady nanoseconds
  };
  struct Pending {
    courier_nic_completion_v1 completion;
    uint64_t release;  // steady nanoseconds
  };

  int post(const Request& request, uint32_t peer, uint64_t cookie, std::string* error);
  int post_inner(const Request& request, uint64_t cookie, std::string* error);
  // Hands held posts to the inner transport: those of `peer`, or (peer < 0)
  // those whose deadline passed by `now`.
  void release_held(int64_t peer, uint64_t now);
  bool chance(double probability);

  FaultSpec spec_;
  uint32_t thread_index_;
  Logger* log_;
  NanoClock now_;
  std::mt19937_64 rng_;
  FaultStats stats_;
  std::vector<HeldPost> held_;   // in post order
  std::deque<Pending> pending_;  // completions not yet released, in arrival order
  std::vector<courier_nic_completion_v1> scratch_;
  // Held posts the inner transport refused, reported as failed completions.
  FailedPosts failed_;  // made-up TX completions, one per poll
  // Cookies of posts the inner transport refused with -EAGAIN and that were
  // not offered again yet.
  std::unordered_set<uint64_t> refused_;
};

}  // namespace courier
