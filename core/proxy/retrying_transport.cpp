#include "core/proxy/retrying_transport.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

namespace courier {

uint64_t steady_nanos() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

namespace {

std::string describe(const WriteRequest& w) {
  return fmt::format("write to rank {} ({} bytes, window {} offset {} -> window {} offset {})",
                     w.peer, w.length, w.src_window, w.src_offset, w.dst_window, w.dst_offset);
}

std::string describe(const AtomicRequest& a) {
  return fmt::format("atomic op {} on rank {} (window {} offset {})", a.op, a.peer, a.window,
                     a.offset);
}

}  // namespace

RetryingTransport::RetryingTransport(ProxyTransport& inner, const RetryPolicy& policy,
                                     NanoClock now)
    : TransportDecorator(inner), policy_(policy), now_(std::move(now)) {}

RetryingTransport::RetryingTransport(std::unique_ptr<ProxyTransport> inner,
                                     const RetryPolicy& policy, NanoClock now)
    : TransportDecorator(std::move(inner)), policy_(policy), now_(std::move(now)) {}

int RetryingTransport::post_write(const WriteRequest& write, uint64_t cookie, std::string* error) {
  if (held_ == 0) {
    // Nothing waits for a retry (the common case): straight through, without
    // copying the request or looking up the peer's queue.
    const int rc = inner_.post_write(write, cookie, error);
    if (rc == -EAGAIN && write.keep_when_full) [[unlikely]]
      return keep(Held{write, cookie, 0, 0}, write.peer);
    if (rc != -EBUSY) return rc;
    return hold(Held{write, cookie, 0, 0}, write.peer, error);
  }
  return post(write, write.peer, cookie, error);
}

int RetryingTransport::post_atomic(const AtomicRequest& atomic, uint64_t cookie,
                                   std::string* error) {
  return post(atomic, atomic.peer, cookie, error);
}

int RetryingTransport::post_inner(const Held& held, std::string* error) {
  if (const auto* w = std::get_if<WriteRequest>(&held.request)) {
    return inner_.post_write(*w, held.cookie, error);
  }
  return inner_.post_atomic(std::get<AtomicRequest>(held.request), held.cookie, error);
}

uint64_t RetryingTransport::delay_after(uint32_t attempts) const {
  uint64_t delay = static_cast<uint64_t>(policy_.first_delay.count());
  const uint64_t cap = static_cast<uint64_t>(policy_.max_delay.count());
  for (uint32_t i = 1; i < attempts && delay < cap; ++i) delay *= 2;
  return std::min(delay, cap);
}

int RetryingTransport::post(std::variant<WriteRequest, AtomicRequest> request, uint32_t peer,
                            uint64_t cookie, std::string* error) {
  const bool keep = kept_when_full(request);
  auto queue = waiting_.find(peer);
  if (queue != waiting_.end()) {
    // Behind a request that waits for its retry: keep the peer's post order.
    if (held_ >= policy_.max_held && !keep) return -EAGAIN;
    queue->second.push_back({std::move(request), cookie, 0, 0});
    ++held_;
    return COURIER_OK;
  }
  Held held{std::move(request), cookie, 0, 0};
  int rc = post_inner(held, error);
  if (rc == -EAGAIN && keep) return this->keep(std::move(held), peer);
  if (rc != -EBUSY) return rc;  // done, full (-EAGAIN) or a hard error: the caller handles it
  return hold(std::move(held), peer, error);
}

int RetryingTransport::keep(Held held, uint32_t peer) {
  // Full, for a poster that cannot take a refusal: kept, and posted from
  // poll() once there is room (not a transient failure: no attempt used).
  waiting_[peer].push_back(std::move(held));
  ++held_;
  return COURIER_OK;
}

int RetryingTransport::hold(Held held, uint32_t peer, std::string* error) {
  if (held_ >= policy_.max_held && !kept_when_full(held.request)) return -EAGAIN;
  held.attempts = 1;
  if (held.attempts > policy_.retries) {
    give_up(held, -EBUSY, *error);
  } else {
    held.due = now_() + delay_after(held.attempts);
    waiting_[peer].push_back(std::move(held));
    ++held_;
  }
  return COURIER_OK;
}

void RetryingTransport::give_up(const Held& held, int status, const std::string& why) {
  std::string what = std::visit([](const auto& r) { return describe(r); }, held.request);
  const char* plural = held.attempts == 1 ? "" : "s";
  std::string message = status == -EBUSY
                            ? fmt::format(
                                  "{} failed after {} attempt{}, each a transient failure "
                                  "(COURIER_RETRY_COUNT={}): {}",
                                  what, held.attempts, plural, policy_.retries, why)
                            : fmt::format("{} failed after {} transient failure{}: {}", what,
                                          held.attempts, plural, why);
  failed_.add(held.cookie, status == -EBUSY ? -EIO : status, std::move(message));
}

void RetryingTransport::cancel_all() {
  const std::string why = "not re-posted: " + failure_->describe();
  for (auto& [peer, queue] : waiting_) {
    for (const Held& held : queue) {
      std::string what = std::visit([](const auto& r) { return describe(r); }, held.request);
      failed_.add(held.cookie, kCancelledByFailure, fmt::format("{}: {}", what, why));
    }
  }
  waiting_.clear();
  held_ = 0;
}

void RetryingTransport::pump() {
  if (held_ == 0) return;
  if (failure_ != nullptr && failure_->tripped()) {
    cancel_all();
    return;
  }
  const uint64_t now = now_();
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    std::deque<Held>& queue = it->second;
    while (!queue.empty() && queue.front().due <= now) {
      Held& head = queue.front();
      std::string error;
      int rc = post_inner(head, &error);
      if (head.attempts > 0) ++retries_made_;
      if (rc == -EAGAIN) break;  // inner transport full: try again on a later poll
      if (rc == -EBUSY) {
        ++head.attempts;
        if (head.attempts <= policy_.retries) {
          head.due = now + delay_after(head.attempts);
          break;
        }
      }
      if (rc != COURIER_OK) give_up(head, rc, error);
      queue.pop_front();
      --held_;
    }
    it = queue.empty() ? waiting_.erase(it) : std::next(it);
  }
}

int RetryingTransport::poll(courier_nic_completion_v1* out, uint32_t max) {
  pump();
  if (failed_.take(out, max) != 0) return 1;
  return inner_.poll(out, max);
}

std::string RetryingTransport::last_error() const {
  return failed_.last_error().empty() ? inner_.last_error() : failed_.last_error();
}

}  // namespace courier
