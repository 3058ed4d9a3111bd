// The semantics a proxy thread restores on top of its transport
// (docs/semantics.md):
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
//    command completes when the answer arrives (a confirmed result);
//  - duplicated deliveries are applied once.
//
// One instance per proxy thread; only that thread calls it.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/log.hpp"
#include "core/proxy/proxy_transport.hpp"
#include "core/semantics/atomic_mailbox.hpp"
#include "core/semantics/barrier.hpp"
#include "core/semantics/imm_codec.hpp"
#include "core/semantics/receive_stream.hpp"
#include "courier/transfer_cmd.hpp"

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
};

// A FIFO command finished by the semantics layer rather than by a TX
// completion (emulated atomics complete when the answer arrives).
struct UserCompletion {
  uint64_t cookie;
  int status;         // COURIER_OK or negative
  std::string error;  // why, when status != COURIER_OK
};

struct SemanticsStats {
  uint64_t atomics_applied = 0;   // emulated atomics applied here for peers
  uint64_t atomics_rejected = 0;  // malformed requests refused here
  uint64_t duplicates = 0;        // duplicated deliveries dropped
  uint64_t held_back = 0;         // atomics that had to wait for earlier writes
  uint64_t fenced = 0;            // transport atomics that waited for earlier writes
};

class ProxySemantics {
 public:
  // Cookies with this value in bits 48-63 belong to the semantics layer.
  static constexpr uint64_t kInternalSlot = 0xffff;

  // `mailbox` may be null when no op uses the imm strategy.
  ProxySemantics(ProxyTransport& transport, const SemanticsOptions& options, AtomicMailbox* mailbox,
                 Logger& log);

  // Where user window `window` lives on this rank (for applying atomics).
  void set_local_window(uint32_t window, void* base, uint64_t bytes);

  // Post a FIFO command's data movement. Same returns as ProxyTransport,
  // plus -EAGAIN when ordering or mailbox slots make the command wait.
  // Inline: the proxy's per-command path.
  int post_write(uint32_t channel, const TransferCmd& cmd, uint64_t cookie, std::string* error) {
    const uint32_t peer = cmd.dst_rank();
    if (peer >= peer_count_) return refuse_rank("WRITE", peer, error);
    Peer& p = peers_[peer];
    WriteRequest write;
    write.peer = peer;
    write.dst_window = cmd.window();
    write.src_window = cmd.source() == 0 ? cmd.window() : kFirstSourceWindow + cmd.source() - 1;
    write.src_offset = cmd.src_offset();
    write.dst_offset = cmd.dst_offset();
    write.length = cmd.length();
    const bool notify = (cmd.flags() & kCmdFlagImm) != 0;
    const bool sequenced = notify || tag_writes_;
    if (sequenced) {
      write.with_imm = true;
      write.imm = encode_write_imm(notify, channel, p.next_seq);
    }
    const int rc = transport_.post_write(write, cookie, error);
    if (rc == COURIER_OK) {
      if (sequenced) ++p.next_seq;
      ++p.writes_in_flight;
    }
    return rc;
  }
  // *completes_later: the command completes through take_completions()
  // (emulated), not through a TX completion with `cookie`.
  int post_atomic(uint32_t channel, const TransferCmd& cmd, uint64_t cookie, bool* completes_later,
                  std::string* error);

  // Advances the BARRIER command of `channel` (all its earlier commands have
  // completed): COURIER_OK once every rank of its scope arrived, -EAGAIN
  // while waiting, another negative status with *error on failure.
  int advance_barrier(uint32_t channel, const TransferCmd& cmd, std::string* error);

  // The proxy hands over: TX completions of user commands (fence
  // accounting), internal TX completions and every RX_IMM completion.
  void on_user_tx(uint32_t peer, bool was_write) {  // per command: inline
    if (was_write && peer < peer_count_ && peers_[peer].writes_in_flight > 0) {
      --peers_[peer].writes_in_flight;
    }
  }
  void on_internal_tx(const courier_nic_completion_v1& c);
  // Returns true when the immediate data was a user notification.
  bool on_rx_imm(const courier_nic_completion_v1& c);

  // Retries answers the transport refused; true if something was posted.
  bool progress() { return !replies_.empty() && retry_replies(); }
  // Commands finished since the last call.
  std::vector<UserCompletion>& completions() { return done_; }
  // Internal operations in flight (the proxy must keep polling).
  bool busy() const;

  const SemanticsStats& stats() const { return stats_; }
  // For hang diagnostics: the stream state towards / from `peer`.
  uint16_t next_seq_to(uint32_t peer) const { return peers_[peer].next_seq; }
  uint16_t expected_from(uint32_t peer) const { return peers_[peer].in.expected(); }
  uint32_t writes_in_flight_to(uint32_t peer) const { return peers_[peer].writes_in_flight; }
  // Emulated atomics sent to `peer` whose answer is missing, and atomics
  // from it held back here.
  uint32_t atomics_awaiting_answer_from(uint32_t peer) const;
  uint32_t atomics_held_from(uint32_t peer) const {
    return static_cast<uint32_t>(peers_[peer].held.size());
  }
  uint32_t world_size() const { return static_cast<uint32_t>(peers_.size()); }

 private:
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
  struct PendingReply {
    uint32_t peer;
    uint32_t slot;
    uint16_t seq;
    ControlKind kind;
    uint64_t old;  // the word's value before the atomic (0 when rejected)
  };
  struct Peer {
    uint16_t next_seq = 0;          // next stream sequence number to send
    uint32_t writes_in_flight = 0;  // user writes posted, not completed
    ReceiveStream in;
    std::vector<HeldAtomic> held;  // emulated atomics waiting for earlier writes
    std::vector<SlotOwner> slots;  // request slots towards this peer
    uint32_t free_hint = 0;
  };

  int refuse_rank(const char* what, uint32_t peer, std::string* error) const;
  bool retry_replies();
  AtomicStrategyKind strategy_for(AtomicOp op) const;
  int post_hw_atomic(uint32_t op, const TransferCmd& cmd, uint64_t cookie, std::string* error);
  int post_imm_atomic(uint32_t channel, uint32_t op, const TransferCmd& cmd, uint64_t cookie,
                      std::string* error);
  void on_request(uint32_t peer, uint32_t slot, uint16_t seq);
  void on_reply(uint32_t peer, const DecodedImm& imm);
  void apply_ready(uint32_t peer);
  // Validates and applies one request; returns the reply kind and sets *old.
  ControlKind apply(uint32_t peer, uint16_t seq, const AtomicRecord& record, uint64_t* old);
  bool post_reply(const PendingReply& reply);
  // Writes must carry sequence numbers when emulated atomics may follow
  // them on an unordered transport.
  bool tag_writes() const { return tag_writes_; }

  ProxyTransport& transport_;
  SemanticsOptions options_;
  AtomicMailbox* mailbox_;
  Logger& log_;
  bool ordered_;
  bool tag_writes_;
  std::vector<Peer> peers_;
  uint32_t peer_count_;  // peers_.size(), for the per-command paths (no division by sizeof(Peer))
  struct LocalWindow {
    std::byte* base = nullptr;
    uint64_t bytes = 0;
  };
  std::vector<LocalWindow> windows_;
  std::deque<PendingReply> replies_;  // answers waiting for room on the transport
  uint64_t internal_in_flight_ = 0;
  uint64_t awaiting_replies_ = 0;
  std::vector<UserCompletion> done_;
  SemanticsStats stats_;
  std::unique_ptr<BarrierEngine> barrier_;
  std::mt19937_64 fault_rng_;
  uint64_t malformed_ = 0;
  uint64_t malform_decided_for_ = ~uint64_t{0};  // cookie of the last draw
  int malform_kind_ = -1;                        // its outcome: -1 intact, 0-2 how
};

}  // namespace courier
