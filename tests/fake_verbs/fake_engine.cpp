#include "fake_engine.hpp"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "fake_hca.hpp"
#include "fake_protocol.hpp"

namespace courier::fake_verbs {
namespace {

// The engine wakes at least this often even with no timer pending: a
// safety net, not a poll loop.
constexpr int kMaxSleepMs = 1000;

int sleep_ms(std::optional<Clock::time_point> wake, Clock::time_point now) {
  if (!wake) return kMaxSleepMs;
  if (*wake <= now) return 0;
  const auto ms = std::chrono::ceil<std::chrono::milliseconds>(*wake - now).count();
  return static_cast<int>(std::min<int64_t>(ms, kMaxSleepMs));
}

}  // namespace

void Engine::start(OwnedFd listening) {
  listening_ = std::move(listening);
  doorbell_ = OwnedFd(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!doorbell_.valid()) {
    std::fprintf(stderr, "fake verbs: eventfd for HCA %u failed: %s\n", hca_.number(),
                 std::strerror(errno));
  }
  thread_ = std::thread([this] { run(); });
}

void Engine::stop() {
  if (!thread_.joinable()) return;
  stopping_.store(true);
  ring();
  thread_.join();
  dialled_.clear();
  connections_.clear();
  listening_.reset();
  doorbell_.reset();
}

void Engine::ring() {
  const uint64_t one = 1;
  [[maybe_unused]] const ssize_t written = ::write(doorbell_.get(), &one, sizeof(one));
}

Connection* Engine::connection_to(uint32_t number, bool& refused) {
  refused = false;
  if (const auto found = dialled_.find(number); found != dialled_.end()) {
    if (!found->second->closed()) return found->second;
    return nullptr;  // being dropped; the loser WRs were failed already
  }
  OwnedFd fd;
  switch (dial(number, fd)) {
    case DialResult::Connected:
      break;
    case DialResult::Refused:
      refused = true;
      return nullptr;
    case DialResult::TryLater:
      return nullptr;
  }
  connections_.push_back(
      std::make_unique<Connection>(std::move(fd), next_connection_id_++, number));
  dialled_[number] = connections_.back().get();
  return connections_.back().get();
}

void Engine::accept_connections() {
  for (;;) {
    const int fd = ::accept4(listening_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;
    connections_.push_back(
        std::make_unique<Connection>(OwnedFd(fd), next_connection_id_++, std::nullopt));
  }
}

void Engine::drop_closed_connections() {
  for (auto it = connections_.begin(); it != connections_.end();) {
    Connection& connection = **it;
    if (!connection.closed()) {
      ++it;
      continue;
    }
    {
      std::lock_guard lock(hca_.mutex);
      on_connection_lost(hca_, connection.id());
    }
    if (connection.peer()) {
      const auto found = dialled_.find(*connection.peer());
      if (found != dialled_.end() && found->second == &connection) dialled_.erase(found);
    }
    it = connections_.erase(it);
  }
}

void Engine::run() {
  std::vector<pollfd> fds;
  std::vector<Frame> frames;
  while (!stopping_.load()) {
    std::optional<Clock::time_point> wake;
    {
      std::lock_guard lock(hca_.mutex);
      wake = pump_send_queues(hca_, *this, Clock::now());
    }
    for (auto& connection : connections_) connection->flush();
    drop_closed_connections();

    fds.clear();
    fds.push_back({doorbell_.get(), POLLIN, 0});
    fds.push_back({listening_.get(), POLLIN, 0});
    for (auto& connection : connections_) {
      const short events = POLLIN | (connection->wants_write() ? POLLOUT : 0);
      fds.push_back({connection->fd(), events, 0});
    }
    const int ready = ::poll(fds.data(), fds.size(), sleep_ms(wake, Clock::now()));
    if (stopping_.load()) break;
    if (ready < 0) continue;  // EINTR: look again

    if (fds[0].revents) {
      uint64_t count = 0;
      [[maybe_unused]] const ssize_t got = ::read(doorbell_.get(), &count, sizeof(count));
    }
    if (fds[1].revents) accept_connections();
    // connections_ may have grown by accepting; only the polled ones have events.
    for (size_t i = 2; i < fds.size(); ++i) {
      if (!fds[i].revents) continue;
      Connection& connection = *connections_[i - 2];
      if (fds[i].revents & POLLOUT) connection.flush();
      if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      frames.clear();
      connection.receive(frames);
      if (frames.empty()) continue;
      std::lock_guard lock(hca_.mutex);
      const Clock::time_point now = Clock::now();
      for (const Frame& frame : frames) {
        if (frame.header.kind == FrameKind::Request) {
          on_request(hca_, frame, connection);
        } else {
          on_response(hca_, frame.header, now);
        }
      }
    }
  }
}

}  // namespace courier::fake_verbs
