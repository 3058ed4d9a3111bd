// Small POSIX socket helpers for the TCP bootstrap (and courier-run): an
// owning file descriptor, deadlines, and send/receive loops that never block
// past a deadline. All sockets made here are non-blocking; waiting is done
// with poll() so that every wait can be bounded.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace courier::net {

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;

// Milliseconds from now until `deadline`, clamped to [0, INT_MAX], rounded up
// so that poll() does not wake a little early and spin.
int milliseconds_until(Deadline deadline);
Deadline deadline_after(std::chrono::milliseconds duration);

// Owns one file descriptor and closes it exactly once.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(Fd&& other) noexcept : fd_(other.release()) {}
  Fd& operator=(Fd&& other) noexcept {
    if (this != &other) reset(other.release());
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  explicit operator bool() const { return valid(); }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

// Outcome of a bounded socket operation. `error` is an errno value when
// status is `failed`.
enum class IoStatus { ok, closed, timed_out, failed };
struct IoResult {
  IoStatus status = IoStatus::ok;
  int error = 0;
  bool ok() const { return status == IoStatus::ok; }
  // "connection closed by peer", "timed out", or strerror(error).
  std::string describe() const;
};

// Listens on host:port (all IPv4 addresses when host is empty). When host
// names an address this machine does not have (EADDRNOTAVAIL), falls back to
// all addresses and sets *fell_back. Throws courier::Error naming host:port
// and `who` listens ("rank 0").
Fd listen_tcp(const std::string& host, uint16_t port, int backlog, bool* fell_back,
              std::string_view who = "rank 0");

// Accepts one pending connection without blocking; returns an invalid Fd when
// none is pending. The accepted socket is non-blocking with TCP_NODELAY, and
// *peer receives its "address:port".
Fd accept_tcp(const Fd& listener, std::string* peer);

// Result of one connection attempt.
struct ConnectAttempt {
  Fd fd;              // valid on success
  std::string error;  // why it failed otherwise
  bool retryable = true;
};

// One attempt to connect to host:port, bounded by `deadline`. Name
// resolution failures are not retryable.
ConnectAttempt connect_tcp_once(const std::string& host, uint16_t port, Deadline deadline);

// The local port a bound socket got (for port 0 listeners).
uint16_t local_port(const Fd& fd);
// The local address of a connected socket, numeric and without brackets
// ("10.0.0.2", "fe80::1"): where the peer reached this machine.
std::string local_host(const Fd& fd);
// A host as host_of() gives it, without an IPv6 address's brackets.
std::string unbracketed(std::string_view host);

// "a.b.c.d:port" or "[v6]:port" for host and port.
std::string format_address(const std::string& host, uint16_t port);
// The host part of such an address ("a.b.c.d", "[v6]"); the whole text when
// it has no port.
std::string host_of(std::string_view address);

// A TCP port on `host` that nothing listens on right now. The port is only
// free at the time of the call: whoever uses it must bind it soon.
uint16_t pick_free_tcp_port(const std::string& host = "127.0.0.1");

// Sends all of `bytes`, waiting with poll() when the socket is full, until the
// deadline. Never raises SIGPIPE.
IoResult send_all(int fd, std::span<const std::byte> bytes, Deadline deadline);

// Receives whatever is available right now into `buffer` (non-blocking).
// Sets *received to the byte count; returns ok with 0 bytes when nothing is
// pending, `closed` on end of stream.
IoResult receive_some(int fd, std::span<std::byte> buffer, size_t* received);

// Waits until fd is readable (or has hung up). Returns timed_out at the
// deadline.
IoResult wait_readable(int fd, Deadline deadline);

}  // namespace courier::net
