// What a proxy thread drives: data movement between registered windows,
// and the completions that come back. A stack of layers with one interface
// (docs/architecture.md, "One WRITE, end to end"): at the bottom NicEndpoint
// (a NIC backend's endpoint plus the window tables), decorators above it
// (fault injection, retries, doorbells, the job-failure watch), and on top
// the semantics layer (core/semantics/semantic_transport.hpp), which
// restores ordering and atomics and owns the immediate data. Benchmarks and
// tests plug in their own layers to measure or check the proxy alone.
#pragma once

#include <cerrno>
#include <cstdint>
#include <string>

#include "courier/abi/nic_v1.h"
#include "courier/transfer_cmd.hpp"

namespace courier {

// Window ids: 0..15 are the user's (TransferCmd's 4-bit field), the ids from
// kFirstInternalWindow up belong to Courier itself (atomic mailboxes,
// barriers), then this rank's WRITE sources (local only: Context::set_source).
inline constexpr uint32_t kUserWindows = 16;
inline constexpr uint32_t kFirstInternalWindow = kUserWindows;
inline constexpr uint32_t kFirstSourceWindow = kFirstInternalWindow + 6;
inline constexpr uint32_t kMaxWindowIds = kFirstSourceWindow + kCmdSources;

// [src_offset, +length) of local window src_window -> [dst_offset, +length)
// of the peer's window dst_window.
struct WriteRequest {
  uint32_t peer = 0;
  uint32_t src_window = 0;
  uint32_t dst_window = 0;
  uint64_t src_offset = 0;
  uint64_t dst_offset = 0;
  uint64_t length = 0;
  // For the semantics layer (the top of the stack): the FIFO channel the
  // command came from, and whether the peer's proxy reports a user
  // notification once the data landed (TransferCmd flag IMM).
  uint32_t channel = 0;
  bool notify = false;
  // For the layers below it: 32 bits of immediate data delivered to the
  // peer's poll() once the data landed (docs/wire-formats.md, "Immediate
  // data"); only the semantics layer sets them.
  bool with_imm = false;
  uint32_t imm = 0;
  // Set by a layer for traffic of its own, which has no caller to refuse
  // to (the semantics layer's answers): the retry layer keeps such a post
  // when the transport is full (-EAGAIN) and posts it when there is room,
  // in the peer's order (RetryingTransport). The one queue for refused
  // posts below the proxy; the proxy's own wait in their FIFO rings.
  bool keep_when_full = false;
};

// One transport atomic (COURIER_NIC_ATOMIC_* op) on the peer's window; the old
// value of fetching ops lands at result_offset of the local result_window.
struct AtomicRequest {
  uint32_t peer = 0;
  uint32_t window = 0;
  uint64_t offset = 0;
  uint32_t op = 0;
  uint64_t operand = 0;
  uint64_t compare = 0;
  uint32_t result_window = 0;
  uint64_t result_offset = 0;
  uint32_t channel = 0;  // the FIFO channel the command came from (diagnostics)
};

// A FIFO channel's BARRIER (docs/semantics.md, "BARRIER"): completes once
// every rank of the scope posted the same epoch on that channel.
struct BarrierRequest {
  enum class Scope : uint8_t { world = 0, rail = 1 };
  uint32_t channel = 0;
  Scope scope = Scope::world;
  uint64_t epoch = 0;
};

// What a layer knows about its traffic with one peer, for hang diagnostics
// (ProxyThread's stall report).
struct PeerActivity {
  uint32_t atomics_awaiting_answer = 0;  // emulated atomics sent to it, unanswered
  uint32_t atomics_held = 0;             // its atomics held back here (earlier writes missing)
  uint16_t next_seq_to = 0;              // next stream sequence number to send it
  uint16_t expected_from = 0;            // lowest sequence number not yet seen from it
};

class ProxyTransport {
 public:
  virtual ~ProxyTransport() = default;

  // COURIER_NIC_CAP_* of this endpoint (a decorator that reorders clears
  // COURIER_NIC_CAP_ORDERED_WRITES).
  virtual uint32_t caps() const = 0;
  // COURIER_NIC_ATOMIC_* that post_atomic carries out, and the natively
  // executed subset.
  virtual uint32_t atomic_ops() const { return 0; }
  virtual uint32_t atomic_native() const { return 0; }

  // Start one operation. Return COURIER_OK, -EAGAIN (transport full: poll,
  // then retry the same request), -EBUSY (a transient failure: retry later,
  // with back-off) or another negative status, in which case *error says
  // what was wrong. A TX completion with `cookie` follows every COURIER_OK
  // (an emulated atomic's once it was answered, a barrier's once every rank
  // arrived).
  virtual int post_write(const WriteRequest& write, uint64_t cookie, std::string* error) = 0;
  virtual int post_atomic(const AtomicRequest&, uint64_t, std::string* error) {
    *error = "this transport carries out no atomics";
    return -EOPNOTSUPP;
  }
  virtual int post_barrier(const BarrierRequest&, uint64_t, std::string* error) {
    *error = "BARRIER needs the barrier set-up of a Context";
    return -ENOTSUP;
  }

  // Reaps up to `max` completions (TX completions carry the cookie given to
  // the post; the caller keeps what else it needs to know about the post;
  // RX_IMM completions that reach the proxy are user notifications).
  // Returns the count or a negative status.
  virtual int poll(courier_nic_completion_v1* out, uint32_t max) = 0;

  // Text of the last failure reported by poll (for logs).
  virtual std::string last_error() const = 0;

  // Work of the layer's own in flight (answers, barrier messages, atomics
  // held for peers): the caller must keep polling.
  virtual bool busy() const { return false; }

  // Hang diagnostics: the traffic with `peer` (false when no layer keeps
  // such accounting).
  virtual bool peer_activity(uint32_t, PeerActivity*) const { return false; }
};

}  // namespace courier
