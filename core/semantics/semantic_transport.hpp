// The semantics layer: the top of a proxy thread's transport stack
// (docs/semantics.md), a ProxyTransport over the layers below it:
//
//  - write-then-atomic: an atomic never takes effect at the receiver before
//    the writes its sender issued earlier. On an ordered transport posting
//    in order is enough. On an unordered one, transport ("hw") atomics wait
//    at the sender until the earlier writes to that peer completed (their
//    completion means remote visibility), and emulated ("imm") atomics are
//    sequenced: every write to the peer carries a stream sequence number in
//    its immediate data and the receiver holds an atomic back until all
//    earlier numbers arrived (ReceiveStream);
//  - emulated atomics: request record + immediate data, applied by the
//    receiving proxy after validation, answered with the old value; the
//    command's TX completion comes when the answer arrives;
//  - BARRIER commands (BarrierEngine), completed once every rank arrived;
//  - duplicated deliveries are applied once;
//  - the immediate data of every write (imm_codec.hpp): only this layer
//    sets it, and only user notifications reach the caller's poll().
//
// It owns its cookie space towards the layers below (cookie_codec.hpp): a
// plain write on an ordered transport goes down with the caller's cookie
// and needs nothing more of this layer; the caller's other posts are kept
// in a table of operations in flight (with the per-peer count of writes
// that write-then-atomic waits for on unordered transports), and their TX
// completions go up with the caller's cookie. The peer of every post is
// checked here, once; the ranges by the endpoint (NicEndpoint).
//
// One instance per proxy thread; only that thread calls it.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/log.hpp"
#include "core/proxy/cookie_codec.hpp"
#include "core/proxy/job_failure.hpp"
#include "core/proxy/transport_decorator.hpp"
#include "core/semantics/atomic_mailbox.hpp"
#include "core/semantics/barrier.hpp"
#include "core/semantics/imm_codec.hpp"
#include "core/semantics/receive_stream.hpp"

namespace courier {

enum class AtomicStrategyKind : uint8_t { none, hw, imm };
const char* to_string(AtomicStrategyKind kind);

struct SemanticsOptions {
  uint32_t rank = 0;
  uint32_t world_size = 1;
  // Per TransferCmd atomic op (AtomicOp::add_u64, add_u32): how it is done.
  AtomicStrategyKind add_u64 = AtomicStrategyKind::none;
  AtomicStrategyKind add_u32 = AtomicStrategyKind::none;
  // BARRIER support (null: BARRIER commands fail): where this rank sits,
  // this thread's message slots, and the job's channel count.
  const BarrierTopology* barrier = nullptr;
  uint64_t* barrier_staging = nullptr;
  const uint64_t* barrier_landing = nullptr;
  uint32_t channels = 0;
  // Fault injection (COURIER_FAULTS=malform=p): send this share of emulated
  // atomic requests malformed, to exercise the receivers' checks.
  double malform = 0;
  uint64_t fault_seed = 0;
  // Once it tripped, barriers still waiting complete with
  // kCancelledByFailure (their messages will never come). May be null.
  const JobFailure* job_failure = nullptr;
};

struct SemanticsStats {
  uint64_t atomics_applied = 0;   // emulated atomics applied here for peers
  uint64_t atomics_rejected = 0;  // malformed requests refused here
  uint64_t duplicates = 0;        // duplicated deliveries dropped
  uint64_t held_back = 0;         // atomics that had to wait for earlier writes
  uint64_t fenced = 0;            // transport atomics that waited for earlier writes
};

class SemanticTransport final : public TransportDecorator {
 public:
  // `mailbox` may be null when no op uses the imm strategy.
  SemanticTransport(ProxyTransport& inner, const SemanticsOptions& options, AtomicMailbox* mailbox,
                    Logger& log);
  // Owns `inner` (the stack below, built for it).
  SemanticTransport(std::unique_ptr<ProxyTransport> inner, const SemanticsOptions& options,
                    AtomicMailbox* mailbox, Logger& log);

  // Where user window `window` lives on this rank (for applying atomics).
  void set_local_window(uint32_t window, void* base, uint64_t bytes);

  // Inline: the proxy's per-command path. A plain write on an ordered
  // transport needs nothing of this layer: it goes down with the caller's
  // cookie (cookie_codec.hpp), and its completion comes back up as it is.
  int post_write(const WriteRequest& in, uint64_t cookie, std::string* error) override {
    if (in.peer >= peer_count_) [[unlikely]]
      return refuse_rank("WRITE", in.peer, error);
    if (in.notify | in.with_imm | other_writes_ | !cookie::fits_write(cookie)) [[unlikely]]
      return post_other_write(in, cookie, error);
    return inner_.post_write(in, cookie, error);
  }
  // -EAGAIN also when ordering or mailbox slots make the atomic wait.
  int post_atomic(const AtomicRequest& atomic, uint64_t cookie, std::string* error) override;
  int post_barrier(const BarrierRequest& barrier, uint64_t cookie, std::string* error) override;
  // Progresses what this layer owes (answers, barriers), reaps the layers
  // below, applies what arrived for it, and hands up the completions of the
  // caller's posts and the user notifications. A failure of its own comes
  // alone, so that last_error() describes it.
  int poll(courier_nic_completion_v1* out, uint32_t max) override;
  std::string last_error() const override;
  bool busy() const override;
  bool peer_activity(uint32_t peer, PeerActivity* out) const override;

  const SemanticsStats& stats() const { return stats_; }

 private:
  void set_up();  // what both constructors do
  // Through the table: a write with immediate data (sequenced or a
  // notification), any write on an unordered transport (counted for
  // write-then-atomic), a caller's cookie with bit 63 set.
  int post_other_write(const WriteRequest& in, uint64_t cookie, std::string* error);

  struct Flight {  // a caller's post in flight
    uint64_t cookie = 0;
    uint32_t peer = 0;
    bool is_write = false;
    bool live = false;
  };
  static constexpr uint32_t kFirstFlights = 1024;
  struct SlotOwner {
    bool busy = false;
    uint16_t seq = 0;
    uint64_t cookie = 0;
    uint32_t op = 0;
  };
  struct HeldAtomic {
    uint16_t seq;
    uint32_t slot;
    AtomicRecord record;
  };
  struct PendingAnswer {
    uint32_t peer;
    uint32_t slot;
    uint16_t seq;
    ControlKind kind;
    uint64_t old;  // the word's value before the atomic (0 when rejected)
  };
  struct PendingBarrier {
    BarrierRequest request;
    uint64_t cookie;
  };
  struct Peer {
    uint16_t next_seq = 0;  // next stream sequence number to send
    ReceiveStream in;
    std::vector<HeldAtomic> held;  // emulated atomics waiting for earlier writes
    std::vector<SlotOwner> slots;  // request slots towards this peer
    uint32_t free_hint = 0;
  };

  // The table is a ring indexed by a running count: a slot is free again
  // long before the count comes round, unless completions lag far behind
  // (then the next free slot, or a table twice as large).
  uint32_t begin_flight(uint64_t cookie, uint32_t peer, bool is_write) {
    uint32_t index = next_flight_++ & flight_mask_;
    if (flights_[index].live) [[unlikely]]
      index = free_flight();
    flights_[index] = {cookie, peer, is_write, true};
    return index;
  }
  void end_flight(uint32_t index) { flights_[index].live = false; }
  uint32_t free_flight();
  // A TX completion of a caller's post: back to the caller's cookie.
  void finish_flight(courier_nic_completion_v1& c);
  [[noreturn]] void throw_unknown_cookie(uint64_t cookie) const;
  // A command finished here (an answered atomic, a barrier): handed up by
  // poll(); `why` says what failed when status is not COURIER_OK.
  void finish(uint64_t cookie, uint32_t peer, int status, std::string why);
  // Hands out finished commands: successes while they fit, a failure alone.
  int take_finished(courier_nic_completion_v1* out, uint32_t max, bool alone_allowed);

  int refuse_rank(const char* what, uint32_t peer, std::string* error) const;
  AtomicStrategyKind strategy_for(uint32_t nic_op) const;
  int post_hw_atomic(const AtomicRequest& atomic, uint64_t cookie, std::string* error);
  int post_imm_atomic(const AtomicRequest& atomic, uint64_t cookie, std::string* error);
  void advance_barriers();
  void on_internal_tx(const courier_nic_completion_v1& c);
  // Returns true when the immediate data was a user notification.
  bool on_rx_imm(const courier_nic_completion_v1& c);
  void on_request(uint32_t peer, uint32_t slot, uint16_t seq);
  void on_answer(uint32_t peer, const DecodedImm& imm);
  void apply_ready(uint32_t peer);
  // Validates and applies one request; returns the answer kind and sets *old.
  ControlKind apply(uint32_t peer, uint16_t seq, const AtomicRecord& record, uint64_t* old);
  // Posted with keep_when_full: the layer below keeps it while the
  // transport is full.
  void post_answer(const PendingAnswer& answer);
  uint32_t atomics_awaiting_answer_from(uint32_t peer) const;

  SemanticsOptions options_;
  AtomicMailbox* mailbox_;
  Logger& log_;
  bool ordered_ = false;
  bool tag_writes_ = false;
  // Every write goes through the table: unordered transports.
  bool other_writes_ = false;
  std::vector<Peer> peers_;
  // For the per-command paths: peers_.size(), and per peer the caller's
  // writes posted and not completed on an unordered transport (what its
  // atomics wait for; dense, apart from the larger Peer).
  uint32_t peer_count_ = 0;
  std::vector<uint32_t> writes_in_flight_;
  struct LocalWindow {
    std::byte* base = nullptr;
    uint64_t bytes = 0;
  };
  std::vector<LocalWindow> windows_;
  std::vector<Flight> flights_ = std::vector<Flight>(kFirstFlights);
  uint32_t flight_mask_ = kFirstFlights - 1;  // flights_.size() - 1
  uint32_t next_flight_ = 0;
  std::vector<PendingBarrier> barriers_;
  uint64_t internal_in_flight_ = 0;
  uint64_t awaiting_answers_ = 0;
  // Commands finished here, with why they failed (empty when they did not).
  std::deque<std::pair<courier_nic_completion_v1, std::string>> finished_;
  std::string last_;  // why the failure the last poll() handed out failed
  SemanticsStats stats_;
  std::unique_ptr<BarrierEngine> barrier_;
  std::mt19937_64 fault_rng_;
  uint64_t malformed_ = 0;
  uint64_t malform_decided_for_ = ~uint64_t{0};  // cookie of the last draw
  int malform_kind_ = -1;                        // its outcome: -1 intact, 0-2 how
};

}  // namespace courier
