#include "core/ep/ep_status.hpp"

#include <cstring>
#include <string>

#include "core/check.hpp"
#include "core/context_internals.hpp"

namespace courier::ep {

EpStatus::EpStatus(Context& ctx, const GpuBackend& gpu, uint64_t timeout_ns)
    : ctx_(ctx), gpu_(gpu), timeout_ns_(timeout_ns), status_(ctx.alloc(16)) {
  if (gpu_.runtime().host_alloc_mapped(gpu_.handle(), 64, &mirror_host_, &mirror_device_) != 0) {
    fail("ep::Buffer: mapping the EP status mirror: {}", gpu_.last_error());
  }
  std::memset(mirror_host_, 0, 64);
  const uint64_t zeros[2] = {0, 0};
  ctx_.copy(status_.data(), zeros, sizeof zeros);
}

EpStatus::~EpStatus() { gpu_.runtime().host_free_mapped(gpu_.handle(), mirror_host_); }

void EpStatus::zero() {
  const uint64_t zeros[2] = {0, 0};
  ctx_.copy(status_.data(), zeros, sizeof zeros);
  *static_cast<volatile uint32_t*>(mirror_host_) = 0;
  dirty_ = false;
}

void EpStatus::throw_if_broken() const {
  if (!broken_.empty()) throw Error(broken_);
}

void EpStatus::break_with(const std::string& why) {
  if (!broken_.empty()) throw Error(broken_);  // the first failure says why
  broken_ = broken_by(why);
  throw Error(broken_);
}

std::string EpStatus::broken_by(const std::string& why) {
  return fmt::format(
      "{} (this Buffer's calls do not wait on the host, so its ranks cannot agree to go on after "
      "a failure: every later call fails too; make a new Buffer)",
      why);
}

void EpStatus::settle_pending() {
  const char* what = pending_;
  pending_ = nullptr;
  if (what == nullptr || mirror() == 0) return;
  try {
    // The call's topk_idx may be gone: the error names the index only.
    raise_if_failed(what);
  } catch (const Error& e) {
    if (broken_.empty())
      broken_ = broken_by(fmt::format("{} [found after the call returned]", e.what()));
  }
}

void EpStatus::settle_pending_as(bool earlier_failed) {
  if (!earlier_failed) {
    pending_ = nullptr;
    return;
  }
  raise_deferred();
}

void EpStatus::raise_deferred() {
  settle_pending();
  throw_if_broken();
}

void EpStatus::set_refused(uint32_t rank) {
  // An earlier call that did not wait has run by now (the caller settled):
  // its outcome is found here, so the next call does not take this
  // refusal for that call's failure. Not thrown: the refusal still goes to
  // the peers, then the refusing call throws it (throw_if_broken).
  settle_pending();
  const uint32_t refused = COURIER_GPU_EP_STATUS_REFUSED_BY | rank;
  ctx_.copy(status_.data(), &refused, 4);
  dirty_ = true;
}

uint64_t EpStatus::bad_index() const {
  uint64_t at = 0;
  ctx_.copy(&at, static_cast<const std::byte*>(status_.data()) + 8, 8);
  return at;
}

void EpStatus::raise_if_failed(const char* what, const EpIndices& indices) {
  const uint32_t s = *static_cast<const volatile uint32_t*>(mirror_host_);
  if (s == 0) return;
  dirty_ = true;
  if ((s & COURIER_GPU_EP_STATUS_BAD_INDEX) != 0) {
    const uint64_t at = bad_index();
    const uint64_t t = (at >> 32) - 1, k = at & 0xFFFFFFFFu;
    // The kernel that found it told the peers (a refused record or flag).
    if (indices.topk_idx != nullptr && k < indices.topk) {
      int64_t value = 0;
      ctx_.copy(&value, indices.topk_idx + t * indices.topk + k, sizeof value);
      refuse_call("ep::Buffer::{}: topk_idx[{}][{}] = {} is outside [-1, {})", what, t, k, value,
                  indices.num_experts);
    }
    refuse_call("ep::Buffer::{}: topk_idx[{}][{}] is outside [-1, num_experts)", what, t, k);
  }
  // The rank or channel the code names: the bits below every flag
  // (COURIER_GPU_EP_STATUS_RANK_MASK also covers the CHANNEL and OVERFLOW
  // flags, which came later).
  const uint32_t r = s & (COURIER_GPU_EP_STATUS_CHANNEL - 1u);
  if ((s & COURIER_GPU_EP_STATUS_TIMEOUT) != 0 || (s & COURIER_GPU_EP_STATUS_CHANNEL) != 0) {
    if (auto failure = ctx_.failed_peer()) {
      fail("ep::Buffer::{}: rank {} is gone: {}", what, failure->rank, failure->reason);
    }
  }
  if ((s & COURIER_GPU_EP_STATUS_TIMEOUT) != 0) {
    const std::string message = fmt::format(
        "ep::Buffer::{}: no data from rank {} after {} s (it did not call {} or is "
        "stuck)",
        what, r, timeout_ns_ / 1000000000ull, what);
    // A hang is the job's failure, as a proxy thread's stall is: every rank
    // learns it now (instead of timing out on its own), and this rank's
    // teardown skips the collectives that would wait for the missing rank.
    ContextInternals::report_failure(ctx_, static_cast<int>(r), message);
    throw Error(message);
  }
  if ((s & COURIER_GPU_EP_STATUS_CHANNEL) != 0) {
    const std::string error = ctx_.channel_stats(r).first_error;
    fail("ep::Buffer::{}: FIFO channel {} failed: {}", what, r,
         error.empty() ? "no error recorded on it (a push or a wait on it timed out after "
                         "COURIER_TIMEOUT_S, or a command could not be encoded)"
                       : error);
  }
  if ((s & COURIER_GPU_EP_STATUS_OVERFLOW) != 0) {
    fail(
        "ep::Buffer::{}: rank {} announced more rows than the outputs hold (max_tokens_per_rank, "
        "or num_worst_tokens when given)",
        what, r);
  }
  refuse_call("ep::Buffer::{}: rank {} refused its arguments (its error says why)", what, r);
}

}  // namespace courier::ep
