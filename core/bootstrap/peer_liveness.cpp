#include "core/bootstrap/peer_liveness.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/check.hpp"

namespace courier {

void PeerFailureNotifier::report(int rank, const std::string& reason) {
  std::lock_guard lock(mutex_);
  if (failure_) return;
  failure_.emplace(rank, reason);
  if (handler_) {
    delivered_ = true;
    handler_(rank, reason);
  }
}

PeerWatch PeerFailureNotifier::subscribe(const std::shared_ptr<PeerFailureNotifier>& self,
                                         PeerFailureHandler handler) {
  std::lock_guard lock(mutex_);
  handler_ = std::move(handler);
  if (failure_ && handler_ && !delivered_) {
    delivered_ = true;
    handler_(failure_->first, failure_->second);
  }
  // The subscription keeps the notifier alive, so it may outlive the
  // bootstrap that made it.
  return PeerWatch([self] {
    std::lock_guard cancel_lock(self->mutex_);
    self->handler_ = nullptr;
  });
}

ConnectionMonitor::ConnectionMonitor(Hooks hooks, std::chrono::milliseconds tick)
    : hooks_(std::move(hooks)), tick_(tick) {
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_NONBLOCK | O_CLOEXEC) != 0) {
    fail("bootstrap: cannot create the liveness monitor's wake-up pipe: {}", std::strerror(errno));
  }
  wake_read_.reset(pipe_fds[0]);
  wake_write_.reset(pipe_fds[1]);
  thread_ = std::thread([this] { run(); });
}

ConnectionMonitor::~ConnectionMonitor() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  const char byte = 1;
  (void)!::write(wake_write_.get(), &byte, 1);
  thread_.join();
}

void ConnectionMonitor::wake() {
  {
    std::lock_guard lock(mutex_);
    ++generation_;  // a dormant monitor looks again; a poll answer is stale
  }
  changed_.notify_all();
  const char byte = 1;
  (void)!::write(wake_write_.get(), &byte, 1);
}

ConnectionMonitor::Exclusive::Exclusive(ConnectionMonitor* monitor) : monitor_(monitor) {
  if (monitor_ == nullptr) return;
  // Taking the lock waits for a handler in progress; afterwards the monitor
  // only polls (which consumes nothing) until the collective ends.
  std::lock_guard lock(monitor_->mutex_);
  monitor_->busy_ = true;
}

ConnectionMonitor::Exclusive::~Exclusive() {
  if (monitor_ == nullptr) return;
  {
    std::lock_guard lock(monitor_->mutex_);
    monitor_->busy_ = false;
    ++monitor_->generation_;
  }
  monitor_->changed_.notify_all();
}

void ConnectionMonitor::run() {
  std::unique_lock lock(mutex_);
  for (;;) {
    changed_.wait(lock, [&] {
      return stopping_ || (!busy_ && (!dormant_since_ || *dormant_since_ != generation_));
    });
    if (stopping_) return;
    dormant_since_.reset();
    std::vector<pollfd> fds = hooks_.watch();
    if (fds.empty()) {
      dormant_since_ = generation_;
      continue;
    }
    const uint64_t generation = generation_;
    fds.push_back({wake_read_.get(), POLLIN, 0});
    lock.unlock();
    const int ready = ::poll(fds.data(), fds.size(), static_cast<int>(tick_.count()));
    const int poll_errno = errno;
    lock.lock();
    if (stopping_) return;
    char drained[64];
    while (::read(wake_read_.get(), drained, sizeof drained) > 0) {
    }
    if (ready < 0 && poll_errno != EINTR) {
      // Nothing sensible to retry; the collectives still see every failure.
      dormant_since_ = generation_;
      continue;
    }
    // A collective ran (or runs) meanwhile: what poll saw may be its traffic.
    if (busy_ || generation != generation_ || ready <= 0) continue;
    fds.pop_back();
    if (!hooks_.handle(fds)) dormant_since_ = generation_;
  }
}

}  // namespace courier
