// AF_UNIX stream sockets, the skeleton's stand-in for a NIC's queue pairs.
// Everything here is non-blocking once connected: the data path never waits.
#pragma once

#include <sys/types.h>
#include <sys/uio.h>

#include <cstddef>

#include "skeleton_wire.hpp"

namespace courier::skeleton {

// Owns one file descriptor.
class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  ~Socket();
  Socket(Socket&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  Socket& operator=(Socket&& other) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;

  int fd() const { return fd_; }
  explicit operator bool() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

// A listening socket under a fresh abstract name the kernel picks
// (autobind), so that endpoints never collide and nothing is left on disk.
// `buffer_bytes` > 0 sets the send and receive buffers of accepted sockets.
int listen_on_fresh_address(int buffer_bytes, Socket* out, EndpointAddress* address);

// Connects to `address` (blocking: an AF_UNIX connect completes as soon as
// the listener's backlog takes it, before any accept) and makes the socket
// non-blocking. `what` names the peer in errors.
int connect_to(const EndpointAddress& address, int buffer_bytes, const char* what, Socket* out);

// Accepts one pending connection without blocking: 1 and *out set, 0 when
// none is pending, or -errno.
int accept_one(const Socket& listener, Socket* out);

// Moves bytes without blocking. Both return the bytes moved (0: the socket
// would block) or -errno; receive_some returns -ECONNRESET when the peer
// closed the stream. Failures leave a last_error text naming `what`.
ssize_t send_some(const Socket& socket, const iovec* parts, int count, const char* what);
ssize_t receive_some(const Socket& socket, void* buffer, size_t bytes, const char* what);

}  // namespace courier::skeleton
