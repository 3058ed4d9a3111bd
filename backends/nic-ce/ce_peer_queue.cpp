// poll(): the operations to each peer form a queue, moved on in post order.
// A copy or atomic starts only when no earlier message to that peer is
// undelivered; a message is sent only when every earlier operation landed.
// Copies wait and gather while enough is on the peer's stream or while
// writes keep arriving (ce_copy_batch.cpp starts them).
#include <cerrno>

#include "ce_atomic_kernel.hpp"
#include "ce_clock.hpp"
#include "ce_current_device.hpp"
#include "ce_endpoint.hpp"
#include "ce_error.hpp"

namespace courier::nic_ce {

namespace {
// Copies per batch: enough for a kernel's burst (a block's piece of each
// destination region), few enough to start the first copies early.
constexpr size_t kMaxBatchCopies = 256;
// Batches on a peer's stream before new copies wait: one runs, the next is
// queued behind it, so the copy engine never waits for the proxy.
constexpr uint32_t kMaxLaunchedBatches = 2;
constexpr uint64_t kMaxLingers = 8;  // COURIER_CE_LINGER_US: the longest a copy waits
}  // namespace

int Endpoint::poll(courier_nic_completion_v1* out, uint32_t max) {
  if (out == nullptr && max > 0) return set_error(-EINVAL, "poll: NULL output");
  uint32_t n = 0;
  for (Peer& peer : peers_) {
    if (peer.ops.empty()) continue;
    if (int rc = use_device(options_.device); rc != 0) return rc;
    advance(peer);
    while (n < max && !peer.ops.empty() && peer.ops.front().state == State::done) {
      const Op& op = peer.ops.front();
      if (op.report) {
        courier_nic_completion_v1& c = out[n++];
        c = {};
        c.kind = COURIER_NIC_COMP_TX;
        c.status = op.status;
        c.cookie = op.cookie;
        --in_flight_;
      }
      peer.ops.pop_front();
    }
  }
  if (rank_ >= 0) n += drain_inbox(out + n, max - n);
  return static_cast<int>(n);
}

void Endpoint::advance(Peer& peer) {
  TraceTimer timer(options_.trace, trace_.advancing());
  complete_launched(peer);
  deliver_messages(peer);
  launch_deferred(peer);
}

// The peer's stream runs its operations in launch order: once one has not
// finished, none after it has, and their events need no query (a query
// costs about a microsecond, and a dispatch keeps a thousand in flight).
void Endpoint::complete_launched(Peer& peer) {
  waiting_.clear();
  for (Op& op : peer.ops) {
    if (op.state == State::deferred) break;
    if (op.state != State::running) continue;
    if (op.event == nullptr) {  // completes with its batch's last copy
      waiting_.push_back(&op);
      continue;
    }
    const cudaError_t rc = cudaEventQuery(op.event);
    if (rc == cudaErrorNotReady) break;
    free_events_.push_back(op.event);
    op.event = nullptr;
    --peer.launched;
    trace_.completed(op.trace_slot);
    const int status = rc == cudaSuccess
                           ? 0
                           : set_cuda_error(rc, op.atomic          ? "an atomic kernel"
                                                : waiting_.empty() ? "a peer copy"
                                                                   : "a batch of peer copies");
    for (Op* earlier : waiting_) finish_launched(*earlier, status);
    waiting_.clear();
    finish_launched(op, status);
  }
}

void Endpoint::deliver_messages(Peer& peer) {
  bool earlier_landed = true;  // every earlier operation landed (or its message is queued)
  for (Op& op : peer.ops) {
    // Nothing after an operation not yet started can have a message out.
    if (op.state == State::deferred) break;
    if (op.state == State::message_ready && earlier_landed) {
      const int64_t position = enqueue(*peer.layout, op.message);
      if (position >= 0) {
        op.position = position;
        op.state = State::message_sent;
      }
    }
    if (op.state == State::message_sent && peer.layout->consumed.load(std::memory_order_acquire) >
                                               static_cast<uint64_t>(op.position)) {
      op.state = State::done;
    }
    if (op.state != State::done && op.state != State::message_sent) earlier_landed = false;
  }
}

void Endpoint::launch_deferred(Peer& peer) {
  bool message_pending = false;  // an earlier message is not yet delivered
  // Copies queued moments ago wait for the ones that follow them, but for
  // at most kMaxLingers lingers: a steady stream of writes must not hold
  // its first copies back until the transmit queue is full.
  const uint64_t now = options_.linger_ns != 0 ? monotonic_ns() : 0;
  const bool lingering =
      options_.batch_copies && options_.linger_ns != 0 && now - last_post_ns_ < options_.linger_ns;
  for (Op& op : peer.ops) {
    if (op.state != State::deferred) {
      message_pending |= op.state == State::message_ready || op.state == State::message_sent;
      continue;
    }
    if (message_pending) break;  // nothing may overtake an undelivered message
    // Batching: while enough is on the stream, the rest waits and gathers.
    if (options_.batch_copies && batch_.empty() && peer.launched >= kMaxLaunchedBatches) break;
    const bool batchable = options_.batch_copies && !op.atomic && op.device_source;
    if (batchable && lingering && batch_.empty() &&
        now - op.posted_ns < kMaxLingers * options_.linger_ns) {
      break;
    }
    if (!batchable) {
      flush_batch(peer);
      if (int rc = launch(peer, op); rc != 0) {
        finish_launched(op, rc);
      } else {
        op.state = State::running;
      }
      continue;
    }
    batch_.push_back(&op);
    // A write with immediate data needs its own event (its message follows
    // it).
    if (op.has_message || batch_.size() == kMaxBatchCopies) flush_batch(peer);
  }
  flush_batch(peer);
}

// One operation on its own: an atomic, or a copy that joins no batch.
int Endpoint::launch(Peer& peer, Op& op) {
  const uint64_t submit_ns = options_.trace ? monotonic_ns() : 0;
  if (int rc = ensure_stream(peer); rc != 0) return rc;
  cudaError_t rc = cudaSuccess;
  if (op.atomic) {
    rc = launch_atomic(peer.stream, op.atomic_op, op.dst, op.operand, op.compare,
                       staging_ + op.staging);
  } else {
    rc = cudaMemcpyAsync(op.dst, op.src, op.bytes, cudaMemcpyDefault, peer.stream);
  }
  if (rc != cudaSuccess)
    return set_cuda_error(rc, op.atomic ? "launching an atomic" : "cudaMemcpyAsync");
  if (int status = record_event(peer, op); status != 0) return status;
  if (options_.trace) {
    op.trace_slot =
        trace_.launched(1, op.atomic ? 0 : 1, op.bytes, op.posted_ns, op.posted_ns, submit_ns);
  }
  return 0;
}

int Endpoint::record_event(Peer& peer, Op& op) {
  cudaError_t rc = cudaSuccess;
  if (free_events_.empty()) {
    cudaEvent_t event = nullptr;
    rc = cudaEventCreateWithFlags(&event, cudaEventDisableTiming);
    if (rc != cudaSuccess) return set_cuda_error(rc, "cudaEventCreate");
    free_events_.push_back(event);
  }
  op.event = free_events_.back();
  free_events_.pop_back();
  rc = cudaEventRecord(op.event, peer.stream);
  if (rc != cudaSuccess) return set_cuda_error(rc, "cudaEventRecord");
  ++peer.launched;
  return 0;
}

void Endpoint::finish_launched(Op& op, int status) {
  if (status != 0) {
    op.status = status;
    op.state = State::done;
    if (op.staging >= 0) {
      free_staging_.push_back(op.staging);
      op.staging = -1;
    }
    return;
  }
  if (op.atomic) finish_atomic(op);
  op.state = op.has_message ? State::message_ready : State::done;
}

}  // namespace courier::nic_ce
