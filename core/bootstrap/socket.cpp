#include "core/bootstrap/socket.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <memory>

#include "core/check.hpp"

namespace courier::net {

int milliseconds_until(Deadline deadline) {
  auto left = deadline - Clock::now();
  if (left <= Clock::duration::zero()) return 0;
  auto ms = std::chrono::ceil<std::chrono::milliseconds>(left).count();
  return ms > INT_MAX ? INT_MAX : static_cast<int>(ms);
}

Deadline deadline_after(std::chrono::milliseconds duration) { return Clock::now() + duration; }

void Fd::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

std::string IoResult::describe() const {
  switch (status) {
    case IoStatus::ok:
      return "ok";
    case IoStatus::closed:
      return "connection closed by peer";
    case IoStatus::timed_out:
      return "timed out";
    case IoStatus::failed:
      break;
  }
  return std::strerror(error);
}

namespace {

// getaddrinfo's result list, freed on scope exit.
struct AddrInfoDeleter {
  void operator()(addrinfo* info) const { freeaddrinfo(info); }
};
using AddrInfoList = std::unique_ptr<addrinfo, AddrInfoDeleter>;

void set_nonblocking(int fd) {
  int flags = fcntl(fd, F_GETFL);
  if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) {
    fail("bootstrap: cannot make socket {} non-blocking: {}", fd, std::strerror(errno));
  }
}

// Bootstrap messages are small request/response exchanges: send them now
// rather than waiting to coalesce.
void set_nodelay(int fd) {
  int one = 1;
  (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

std::string format_sockaddr(const sockaddr* address) {
  char host[INET6_ADDRSTRLEN] = {};
  if (address->sa_family == AF_INET) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(address);
    inet_ntop(AF_INET, &v4->sin_addr, host, sizeof host);
    return format_address(host, ntohs(v4->sin_port));
  }
  if (address->sa_family == AF_INET6) {
    const auto* v6 = reinterpret_cast<const sockaddr_in6*>(address);
    inet_ntop(AF_INET6, &v6->sin6_addr, host, sizeof host);
    return format_address(host, ntohs(v6->sin6_port));
  }
  return "(unknown address family)";
}

AddrInfoList resolve(const std::string& host, uint16_t port, bool passive, int* status) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  std::string service = std::to_string(port);
  addrinfo* list = nullptr;
  *status = getaddrinfo(host.c_str(), service.c_str(), &hints, &list);
  return AddrInfoList(*status == 0 ? list : nullptr);
}

// Binds and listens on one address; returns the errno on failure.
int try_listen(const sockaddr* address, socklen_t length, int backlog, Fd* out) {
  Fd fd(::socket(address->sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) return errno;
  // A job restarted on the same port must not wait for TIME_WAIT to expire.
  int one = 1;
  (void)setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (::bind(fd.get(), address, length) != 0) return errno;
  if (::listen(fd.get(), backlog) != 0) return errno;
  set_nonblocking(fd.get());
  *out = std::move(fd);
  return 0;
}

}  // namespace

std::string format_address(const std::string& host, uint16_t port) {
  if (host.find(':') != std::string::npos) return "[" + host + "]:" + std::to_string(port);
  return host + ":" + std::to_string(port);
}

std::string host_of(std::string_view address) {
  const size_t colon = address.rfind(':');
  if (colon == std::string_view::npos || address.find(']', colon) != std::string_view::npos) {
    return std::string(address);
  }
  return std::string(address.substr(0, colon));
}

Fd listen_tcp(const std::string& host, uint16_t port, int backlog, bool* fell_back,
              std::string_view who) {
  *fell_back = false;
  sockaddr_in any{};
  any.sin_family = AF_INET;
  any.sin_addr.s_addr = htonl(INADDR_ANY);
  any.sin_port = htons(port);
  Fd fd;
  if (host.empty()) {
    int error = try_listen(reinterpret_cast<sockaddr*>(&any), sizeof any, backlog, &fd);
    if (error != 0) {
      fail("bootstrap: {} cannot listen on {}: {}", who, format_address("0.0.0.0", port),
           std::strerror(error));
    }
    return fd;
  }
  int status = 0;
  AddrInfoList list = resolve(host, port, /*passive=*/true, &status);
  if (!list) {
    fail("bootstrap: {} cannot resolve its listening address '{}': {}", who, host,
         gai_strerror(status));
  }
  int last_error = 0;
  bool only_unavailable = true;
  for (addrinfo* entry = list.get(); entry != nullptr; entry = entry->ai_next) {
    last_error = try_listen(entry->ai_addr, entry->ai_addrlen, backlog, &fd);
    if (last_error == 0) return fd;
    if (last_error != EADDRNOTAVAIL) only_unavailable = false;
  }
  // The rendezvous host may be a name that reaches this machine without being
  // one of its interface addresses (a NAT or a load-balancer name).
  if (only_unavailable) {
    int error = try_listen(reinterpret_cast<sockaddr*>(&any), sizeof any, backlog, &fd);
    if (error == 0) {
      *fell_back = true;
      return fd;
    }
    last_error = error;
  }
  fail("bootstrap: {} cannot listen on {}: {}", who, format_address(host, port),
       std::strerror(last_error));
}

Fd accept_tcp(const Fd& listener, std::string* peer) {
  sockaddr_storage address{};
  socklen_t length = sizeof address;
  for (;;) {
    int fd = ::accept4(listener.get(), reinterpret_cast<sockaddr*>(&address), &length,
                       SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) {
      set_nodelay(fd);
      *peer = format_sockaddr(reinterpret_cast<sockaddr*>(&address));
      return Fd(fd);
    }
    if (errno == EINTR) continue;
    // EAGAIN: nothing pending. Anything else (a connection reset before we
    // accepted it, fd exhaustion) is not this job's business: report "none".
    return Fd();
  }
}

ConnectAttempt connect_tcp_once(const std::string& host, uint16_t port, Deadline deadline) {
  ConnectAttempt attempt;
  int status = 0;
  AddrInfoList list = resolve(host, port, /*passive=*/false, &status);
  if (!list) {
    attempt.error = fmt::format("cannot resolve '{}': {}", host, gai_strerror(status));
    // A temporary DNS failure may clear; a name that does not exist will not.
    attempt.retryable = status == EAI_AGAIN;
    return attempt;
  }
  for (addrinfo* entry = list.get(); entry != nullptr; entry = entry->ai_next) {
    Fd fd(::socket(entry->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!fd) {
      attempt.error = std::strerror(errno);
      continue;
    }
    int rc = ::connect(fd.get(), entry->ai_addr, entry->ai_addrlen);
    int error = rc == 0 ? 0 : errno;
    if (error == EINPROGRESS) {
      pollfd watch{fd.get(), POLLOUT, 0};
      int ready = ::poll(&watch, 1, milliseconds_until(deadline));
      if (ready <= 0) {
        attempt.error = ready == 0 ? "connection attempt timed out" : std::strerror(errno);
        continue;
      }
      socklen_t length = sizeof error;
      getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &error, &length);
    }
    if (error != 0) {
      attempt.error = std::strerror(error);
      continue;
    }
    set_nodelay(fd.get());
    attempt.fd = std::move(fd);
    attempt.error.clear();
    return attempt;
  }
  return attempt;
}

uint16_t local_port(const Fd& fd) {
  sockaddr_storage address{};
  socklen_t length = sizeof address;
  if (getsockname(fd.get(), reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    fail("bootstrap: getsockname on socket {} failed: {}", fd.get(), std::strerror(errno));
  }
  if (address.ss_family == AF_INET6) {
    return ntohs(reinterpret_cast<sockaddr_in6*>(&address)->sin6_port);
  }
  return ntohs(reinterpret_cast<sockaddr_in*>(&address)->sin_port);
}

std::string local_host(const Fd& fd) {
  sockaddr_storage address{};
  socklen_t length = sizeof address;
  if (getsockname(fd.get(), reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    fail("bootstrap: getsockname on socket {} failed: {}", fd.get(), std::strerror(errno));
  }
  return unbracketed(host_of(format_sockaddr(reinterpret_cast<sockaddr*>(&address))));
}

std::string unbracketed(std::string_view host) {
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  return std::string(host);
}

uint16_t pick_free_tcp_port(const std::string& host) {
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = 0;
  if (inet_pton(AF_INET, host.c_str(), &address.sin_addr) != 1) {
    fail("pick_free_tcp_port: host '{}' is not an IPv4 address", host);
  }
  Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) fail("pick_free_tcp_port: socket() failed: {}", std::strerror(errno));
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
    fail("pick_free_tcp_port: cannot bind {}: {}", format_address(host, 0), std::strerror(errno));
  }
  return local_port(fd);
}

IoResult send_all(int fd, std::span<const std::byte> bytes, Deadline deadline) {
  while (!bytes.empty()) {
    ssize_t sent = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (sent > 0) {
      bytes = bytes.subspan(static_cast<size_t>(sent));
      continue;
    }
    if (sent < 0 && errno == EINTR) continue;
    if (sent < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
      if (errno == EPIPE || errno == ECONNRESET) return {IoStatus::closed, errno};
      return {IoStatus::failed, errno};
    }
    pollfd watch{fd, POLLOUT, 0};
    int ready = ::poll(&watch, 1, milliseconds_until(deadline));
    if (ready < 0 && errno != EINTR) return {IoStatus::failed, errno};
    if (ready == 0) return {IoStatus::timed_out, 0};
  }
  return {};
}

IoResult receive_some(int fd, std::span<std::byte> buffer, size_t* received) {
  *received = 0;
  for (;;) {
    ssize_t got = ::recv(fd, buffer.data(), buffer.size(), 0);
    if (got > 0) {
      *received = static_cast<size_t>(got);
      return {};
    }
    if (got == 0) return {IoStatus::closed, 0};
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return {};
    if (errno == ECONNRESET) return {IoStatus::closed, errno};
    return {IoStatus::failed, errno};
  }
}

IoResult wait_readable(int fd, Deadline deadline) {
  for (;;) {
    pollfd watch{fd, POLLIN, 0};
    int ready = ::poll(&watch, 1, milliseconds_until(deadline));
    if (ready > 0) return {};
    if (ready == 0) return {IoStatus::timed_out, 0};
    if (errno != EINTR) return {IoStatus::failed, errno};
  }
}

}  // namespace courier::net
