#include "core/faults/fault_injecting_transport.hpp"

#include <fmt/format.h>

#include <cstddef>
#include <utility>

namespace courier {

namespace {

std::string describe(const WriteRequest& w) {
  return fmt::format("write to rank {} ({} bytes at window {} offset {})", w.peer, w.length,
                     w.dst_window, w.dst_offset);
}

std::string describe(const AtomicRequest& a) {
  return fmt::format("atomic op {} on rank {} (window {} offset {})", a.op, a.peer, a.window,
                     a.offset);
}

}  // namespace

FaultInjectingTransport::FaultInjectingTransport(ProxyTransport& inner, const FaultSpec& spec,
                                                 uint32_t thread_index, Logger* log, NanoClock now)
    : TransportDecorator(inner),
      spec_(spec),
      thread_index_(thread_index),
      log_(log),
      now_(std::move(now)),
      rng_(spec.seed ^ thread_index) {}

FaultInjectingTransport::FaultInjectingTransport(std::unique_ptr<ProxyTransport> inner,
                                                 const FaultSpec& spec, uint32_t thread_index,
                                                 Logger* log, NanoClock now)
    : TransportDecorator(std::move(inner)),
      spec_(spec),
      thread_index_(thread_index),
      log_(log),
      now_(std::move(now)),
      rng_(spec.seed ^ thread_index) {}

FaultInjectingTransport::~FaultInjectingTransport() {
  if (log_ != nullptr) {
    log_->info("faults",
               "proxy thread {} ({}): injected {} transient failures, {} reordered posts, {} "
               "shuffled batches, {} delayed completions, {} duplicated RX_IMM",
               thread_index_, spec_.describe(), stats_.failed, stats_.reordered, stats_.shuffled,
               stats_.delayed, stats_.duplicated);
  }
}

uint32_t FaultInjectingTransport::caps() const {
  uint32_t caps = inner_.caps();
  if (spec_.reorder > 0) caps &= ~static_cast<uint32_t>(COURIER_NIC_CAP_ORDERED_WRITES);
  return caps;
}

bool FaultInjectingTransport::chance(double probability) {
  if (probability <= 0) return false;
  // 53 random bits as a double in [0, 1): the same on every standard library,
  // unlike the std distributions, so a seed reproduces everywhere.
  double u = static_cast<double>(rng_() >> 11) * 0x1.0p-53;
  return u < probability;
}

int FaultInjectingTransport::post_write(const WriteRequest& write, uint64_t cookie,
                                        std::string* error) {
  return post(write, write.peer, cookie, error);
}

int FaultInjectingTransport::post_atomic(const AtomicRequest& atomic, uint64_t cookie,
                                         std::string* error) {
  return post(atomic, atomic.peer, cookie, error);
}

int FaultInjectingTransport::post_inner(const Request& request, uint64_t cookie,
                                        std::string* error) {
  if (const auto* w = std::get_if<WriteRequest>(&request)) {
    return inner_.post_write(*w, cookie, error);
  }
  return inner_.post_atomic(std::get<AtomicRequest>(request), cookie, error);
}

int FaultInjectingTransport::post(const Request& request, uint32_t peer, uint64_t cookie,
                                  std::string* error) {
  // A post the transport refused as full (-EAGAIN) comes back unchanged once
  // there is room; its faults were drawn the first time. Drawing again on
  // every offer would multiply the rates under back-pressure (and turn a
  // full transport into a string of transient failures).
  const bool offered_again = refused_.erase(cookie) > 0;
  if (!offered_again && chance(spec_.fail)) {
    ++stats_.failed;
    *error = "injected transient failure (COURIER_FAULTS) of the " +
             std::visit([](const auto& r) { return describe(r); }, request);
    return -EBUSY;
  }
  if (!offered_again && held_.size() < kMaxHeldPosts && chance(spec_.reorder)) {
    ++stats_.reordered;
    held_.push_back({request, peer, cookie, now_() + kMaxHoldNs});
    return COURIER_OK;
  }
  int rc = post_inner(request, cookie, error);
  if (rc == -EAGAIN) refused_.insert(cookie);
  // This post overtook the ones held for its peer: now they may follow.
  if (rc == COURIER_OK && !held_.empty()) release_held(peer, 0);
  return rc;
}

void FaultInjectingTransport::release_held(int64_t peer, uint64_t now) {
  size_t kept = 0;
  bool full = false;
  for (size_t i = 0; i < held_.size(); ++i) {
    HeldPost& h = held_[i];
    bool due = peer >= 0 ? h.peer == static_cast<uint32_t>(peer) : h.deadline <= now;
    if (due && !full) {
      std::string error;
      int rc = post_inner(h.request, h.cookie, &error);
      if (rc == COURIER_OK) continue;
      if (rc == -EAGAIN) {
        full = true;  // keep this and the rest; a later poll tries again
      } else {
        // Accepted long ago: the proxy learns of the failure through a completion.
        failed_.add(h.cookie, rc,
                    "held-back " +
                        std::visit([](const auto& r) { return describe(r); }, h.request) +
                        " failed: " + error);
        continue;
      }
    }
    if (kept != i) held_[kept] = std::move(h);
    ++kept;
  }
  held_.erase(held_.begin() + static_cast<std::ptrdiff_t>(kept), held_.end());
}

int FaultInjectingTransport::poll(courier_nic_completion_v1* out, uint32_t max) {
  const uint64_t now = now_();
  if (!held_.empty()) release_held(-1, now);
  if (failed_.take(out, max) != 0) return 1;

  scratch_.resize(max);
  int n = inner_.poll(scratch_.data(), max);
  if (n < 0) return n;
  for (int i = 0; i < n; ++i) {
    const courier_nic_completion_v1& c = scratch_[static_cast<size_t>(i)];
    int copies = 1;
    if (c.kind == COURIER_NIC_COMP_RX_IMM && chance(spec_.dup)) {
      ++stats_.duplicated;
      copies = 2;
    }
    for (int k = 0; k < copies; ++k) {
      uint64_t delay_ns = 0;
      if (spec_.delay_us > 0) delay_ns = (rng_() % (uint64_t{spec_.delay_us} + 1)) * 1000;
      if (delay_ns > 0) ++stats_.delayed;
      pending_.push_back({c, now + delay_ns});
    }
  }

  // Release what is due, keeping arrival order among the released.
  uint32_t count = 0;
  for (auto it = pending_.begin(); it != pending_.end() && count < max;) {
    if (it->release <= now) {
      out[count++] = it->completion;
      it = pending_.erase(it);
    } else {
      ++it;
    }
  }
  if (count > 1 && chance(spec_.reorder)) {
    ++stats_.shuffled;
    // Fisher-Yates on the raw generator: reproducible on every standard library.
    for (uint32_t i = count - 1; i > 0; --i) std::swap(out[i], out[rng_() % (uint64_t{i} + 1)]);
  }
  return static_cast<int>(count);
}

std::string FaultInjectingTransport::last_error() const {
  return failed_.last_error().empty() ? inner_.last_error() : failed_.last_error();
}

}  // namespace courier
