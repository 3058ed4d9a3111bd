// Endpoint::poll: completion queue entries -> courier_nic_completion_v1.
//
// Three kinds of entries arrive on the endpoint's single queue:
//   - our writes completing (op_context is one of the write contexts);
//   - peers' writes with immediate data landing here (FI_REMOTE_CQ_DATA);
//   - errors (fi_cq_read answers -FI_EAVAIL), read one at a time with
//     fi_cq_readerr and turned into completions with a negative status.
// Reading the queue is also what drives progress for providers with manual
// data progress (shm, tcp;ofi_rxm), so poll() reads even when max == 0.
//
// When the queue is empty, the write watchdog scans the writes in flight (at
// most every watchdog_interval_ms_) and reports those found in flight by
// more than timeout/interval scans as failed with -ETIMEDOUT. Their contexts
// stay "abandoned" (the provider may still own them) until a late completion
// returns them; that completion is swallowed, so the caller never sees a
// write complete twice.
#include <rdma/fi_errno.h>

#include <algorithm>
#include <cerrno>

#include "ofi_ep.hpp"
#include "ofi_error.hpp"

namespace courier::ofi {
namespace {

// Entries read per fi_cq_read call; the buffers live on the stack.
constexpr uint32_t kReadBatch = 32;

}  // namespace

int Endpoint::poll(courier_nic_completion_v1* out, uint32_t max) {
  if (!out && max > 0) return set_error(-EINVAL, "poll: NULL output array");
  if (rx_cq_data_ && receives_.in_use() < receives_.size()) {
    const int rc = replenish_receives();
    if (rc != 0) return rc;
  }
  if (max == 0) {
    fi_cq_data_entry unused;
    (void)fi_cq_read(stack_.cq.get(), &unused, 0);  // progress only
    return 0;
  }

  uint32_t produced = 0;
  bool drained = false;  // the queue was seen empty
  while (produced < max) {
    fi_cq_data_entry entries[kReadBatch];
    fi_addr_t sources[kReadBatch];
    const size_t want = std::min(kReadBatch, max - produced);
    const ssize_t got = source_ ? fi_cq_readfrom(stack_.cq.get(), entries, want, sources)
                                : fi_cq_read(stack_.cq.get(), entries, want);
    if (got == -FI_EAGAIN) {
      drained = true;
      break;
    }
    if (got == -FI_EAVAIL) {
      // At most one failed completion per call, and last: last_error()
      // describes it (a second error would overwrite the text).
      const uint32_t failed = translate_error(&out[produced]);
      produced += failed;
      if (failed > 0 && out[produced - 1].status != COURIER_OK) return static_cast<int>(produced);
      continue;
    }
    if (got < 0) {
      if (produced > 0) break;  // report what we have; the error repeats next time
      return set_error(to_errno(got), "poll: %s", describe_fi_error("fi_cq_read", got).c_str());
    }
    for (ssize_t i = 0; i < got; ++i) {
      produced += translate(entries[i], source_ ? sources[i] : FI_ADDR_NOTAVAIL, &out[produced]);
    }
    if (static_cast<size_t>(got) < want) {
      drained = true;
      break;
    }
  }
  if (drained && write_timeout_ms_ != 0 && writes_.in_use() > 0 && produced < max) {
    produced += expire_writes(&out[produced], max - produced);
  }
  return static_cast<int>(produced);
}

uint32_t Endpoint::expire_writes(courier_nic_completion_v1* out, uint32_t max) {
  if (max == 0) return 0;
  if (watchdog_resume_ == 0) {  // a new scan, when one is due
    const uint64_t now = coarse_now_ms();
    if (now - last_watchdog_scan_ms_ < watchdog_interval_ms_) return 0;
    last_watchdog_scan_ms_ = now;
  }
  // One expired write per call, so that last_error() describes it; the scan
  // goes on from the next write at the next call.
  for (uint32_t i = watchdog_resume_; i < writes_.size(); ++i) {
    OpContext& context = writes_.at(i);
    if (!context.in_flight || context.abandoned) continue;
    if (++context.watchdog_scans <= watchdog_scan_limit_) continue;
    context.abandoned = true;
    watchdog_resume_ = i + 1;
    out[0] = courier_nic_completion_v1{};
    out[0].kind = COURIER_NIC_COMP_TX;
    out[0].status = -ETIMEDOUT;
    out[0].peer = context.peer;
    out[0].cookie = context.cookie;
    set_error(-ETIMEDOUT,
              "%s to peer %u (cookie %llu) got no completion within %u ms: provider %s lost "
              "it (shm does so when the target rejects it, e.g. for a bad key or a range "
              "outside the region)",
              context.kind == OpContext::Kind::kAtomic ? "atomic" : "write", context.peer,
              static_cast<unsigned long long>(context.cookie), write_timeout_ms_,
              provider_name_.c_str());
    return 1;
  }
  watchdog_resume_ = 0;
  return 0;
}

uint32_t Endpoint::translate(const fi_cq_data_entry& entry, fi_addr_t source,
                             courier_nic_completion_v1* out) {
  // Decide by the flags first: an incoming write's op_context is the
  // provider's business (NULL, or one of our posted receives under
  // FI_RX_CQ_DATA), never one of our writes.
  if (entry.flags & FI_REMOTE_CQ_DATA) {
    if (receives_.owns(entry.op_context)) {
      // A posted receive was consumed; it is re-posted on the next poll.
      receives_.release(static_cast<OpContext*>(entry.op_context));
    }
    *out = courier_nic_completion_v1{};
    out->kind = COURIER_NIC_COMP_RX_IMM;
    out->status = COURIER_OK;
    out->peer = rank_of(source);
    if (length_in_data_) {  // see Endpoint::post_write
      out->imm = entry.data & 0xFFFFFFFFu;
      const uint64_t sender = entry.data >> 48;
      out->peer = sender < peers_.size() ? static_cast<uint32_t>(sender) : UINT32_MAX;
      const uint64_t length = (entry.data >> 32) & 0xffff;
      out->length = length == 0xffff ? 0 : length;
    } else {
      out->imm = entry.data & imm_mask_;
      out->length = entry.len;
    }
    return 1;
  }
  if (writes_.owns(entry.op_context)) {
    auto* context = static_cast<OpContext*>(entry.op_context);
    if (context->abandoned) {  // already reported as timed out
      writes_.release(context);
      return 0;
    }
    *out = courier_nic_completion_v1{};
    out->kind = COURIER_NIC_COMP_TX;
    out->status = COURIER_OK;
    out->peer = context->peer;
    out->cookie = context->cookie;
    writes_.release(context);
    return 1;
  }
  if (receives_.owns(entry.op_context)) {
    // A posted receive consumed by something else (a plain message).
    receives_.release(static_cast<OpContext*>(entry.op_context));
  }
  return 0;  // nothing Courier asked for
}

uint32_t Endpoint::translate_error(courier_nic_completion_v1* out) {
  fi_cq_err_entry error{};
  const ssize_t rc = fi_cq_readerr(stack_.cq.get(), &error, 0);
  if (rc != 1) return 0;  // another reader took it, or nothing there after all

  char detail[256] = "";
  const char* provider_text =
      fi_cq_strerror(stack_.cq.get(), error.prov_errno, error.err_data, detail, sizeof detail);
  const int status = error.err > 0 ? to_errno(-static_cast<long>(error.err)) : -EIO;

  *out = courier_nic_completion_v1{};
  out->status = status;
  if (writes_.owns(error.op_context)) {
    auto* context = static_cast<OpContext*>(error.op_context);
    if (context->abandoned) {  // already reported as timed out
      writes_.release(context);
      return 0;
    }
    out->kind = COURIER_NIC_COMP_TX;
    out->peer = context->peer;
    out->cookie = context->cookie;
    set_error(status, "%s to peer %u (cookie %llu) failed: %s (provider: %s)",
              context->kind == OpContext::Kind::kAtomic ? "atomic" : "write", context->peer,
              static_cast<unsigned long long>(context->cookie), fi_strerror(error.err),
              provider_text ? provider_text : "no detail");
    writes_.release(context);
    return 1;
  }
  // Not one of our writes: an incoming operation failed here (for example a
  // peer's write with immediate data that could not be delivered). Report
  // it as a failed RX_IMM so the failure is seen rather than swallowed.
  if (receives_.owns(error.op_context))
    receives_.release(static_cast<OpContext*>(error.op_context));
  out->kind = COURIER_NIC_COMP_RX_IMM;
  // Error entries carry a source address only with FI_SOURCE_ERR, which is
  // not requested: the sender is unknown.
  out->peer = UINT32_MAX;
  out->length = error.len;
  set_error(status, "incoming operation failed: %s (provider: %s)", fi_strerror(error.err),
            provider_text ? provider_text : "no detail");
  return 1;
}

uint32_t Endpoint::rank_of(fi_addr_t address) const {
  if (address == FI_ADDR_NOTAVAIL) return UINT32_MAX;
  if (peers_are_ranks_)
    return address < peers_.size() ? static_cast<uint32_t>(address) : UINT32_MAX;
  for (size_t rank = 0; rank < peers_.size(); ++rank) {
    if (peers_[rank] == address) return static_cast<uint32_t>(rank);
  }
  return UINT32_MAX;
}

}  // namespace courier::ofi
