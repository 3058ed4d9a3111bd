#include "skeleton_socket.hpp"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "skeleton_error.hpp"

namespace courier::skeleton {
namespace {

int set_buffers(int fd, int buffer_bytes) {
  if (buffer_bytes <= 0) return 0;  // the system's default
  if (setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buffer_bytes, sizeof buffer_bytes) != 0 ||
      setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buffer_bytes, sizeof buffer_bytes) != 0) {
    const int error = errno;
    return fail(-error, "setting socket buffers to %d bytes: %s", buffer_bytes, errno_text(error));
  }
  return 0;
}

// The first byte of an abstract name is '\0'; show it as '@' like ss(8) does.
const char* printable(const EndpointAddress& address, char (&text)[sizeof address.path + 1]) {
  size_t length = address.length < sizeof address.path ? address.length : sizeof address.path;
  for (size_t i = 0; i < length; ++i) text[i] = address.path[i] == '\0' ? '@' : address.path[i];
  text[length] = '\0';
  return text;
}

}  // namespace

Socket::~Socket() {
  if (fd_ >= 0) ::close(fd_);
}

Socket& Socket::operator=(Socket&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

int listen_on_fresh_address(int buffer_bytes, Socket* out, EndpointAddress* address) {
  Socket listener(::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!listener) {
    const int error = errno;
    return fail(-error, "creating an AF_UNIX socket: %s", errno_text(error));
  }
  // Binding with nothing but the family asks the kernel for a unique
  // abstract name ("autobind", unix(7)).
  sockaddr_un bound{};
  bound.sun_family = AF_UNIX;
  if (::bind(listener.fd(), reinterpret_cast<const sockaddr*>(&bound), sizeof(sa_family_t)) != 0) {
    const int error = errno;
    return fail(-error, "binding an AF_UNIX socket to a fresh abstract name: %s",
                errno_text(error));
  }
  // Accepted sockets inherit the listener's buffer sizes.
  if (const int rc = set_buffers(listener.fd(), buffer_bytes); rc != 0) return rc;
  if (::listen(listener.fd(), SOMAXCONN) != 0) {
    const int error = errno;
    return fail(-error, "listen on an AF_UNIX socket: %s", errno_text(error));
  }
  socklen_t length = sizeof bound;
  if (::getsockname(listener.fd(), reinterpret_cast<sockaddr*>(&bound), &length) != 0) {
    const int error = errno;
    return fail(-error, "reading the name the kernel chose: %s", errno_text(error));
  }
  *address = EndpointAddress{};
  address->length = static_cast<uint32_t>(length - offsetof(sockaddr_un, sun_path));
  std::memcpy(address->path, bound.sun_path, address->length);
  *out = std::move(listener);
  return 0;
}

int connect_to(const EndpointAddress& address, int buffer_bytes, const char* what, Socket* out) {
  char text[sizeof address.path + 1];
  if (address.length == 0 || address.length > sizeof address.path) {
    return fail(-EINVAL, "%s: malformed endpoint name (length %u)", what, address.length);
  }
  Socket socket(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!socket) {
    const int error = errno;
    return fail(-error, "%s: creating an AF_UNIX socket: %s", what, errno_text(error));
  }
  if (const int rc = set_buffers(socket.fd(), buffer_bytes); rc != 0) return rc;
  sockaddr_un target{};
  target.sun_family = AF_UNIX;
  std::memcpy(target.sun_path, address.path, address.length);
  const auto length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + address.length);
  int rc;
  do {
    rc = ::connect(socket.fd(), reinterpret_cast<const sockaddr*>(&target), length);
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) {
    const int error = errno;
    return fail(-error, "%s: connecting to %s: %s", what, printable(address, text),
                errno_text(error));
  }
  if (::fcntl(socket.fd(), F_SETFL, O_NONBLOCK) != 0) {
    const int error = errno;
    return fail(-error, "%s: making the socket non-blocking: %s", what, errno_text(error));
  }
  *out = std::move(socket);
  return 0;
}

int accept_one(const Socket& listener, Socket* out) {
  const int fd = ::accept4(listener.fd(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
  if (fd < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return 0;
    const int error = errno;
    return fail(-error, "accepting a connection: %s", errno_text(error));
  }
  *out = Socket(fd);
  return 1;
}

ssize_t send_some(const Socket& socket, const iovec* parts, int count, const char* what) {
  msghdr message{};
  message.msg_iov = const_cast<iovec*>(parts);
  message.msg_iovlen = static_cast<size_t>(count);
  // MSG_NOSIGNAL: a peer that went away is an error status, not SIGPIPE.
  const ssize_t sent = ::sendmsg(socket.fd(), &message, MSG_NOSIGNAL | MSG_DONTWAIT);
  if (sent >= 0) return sent;
  if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return 0;
  const int error = errno;
  return fail(-error, "%s: send: %s", what, errno_text(error));
}

ssize_t receive_some(const Socket& socket, void* buffer, size_t bytes, const char* what) {
  const ssize_t got = ::recv(socket.fd(), buffer, bytes, MSG_DONTWAIT);
  if (got > 0) return got;
  if (got == 0) return fail(-ECONNRESET, "%s: the peer closed the connection", what);
  if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return 0;
  const int error = errno;
  return fail(-error, "%s: recv: %s", what, errno_text(error));
}

}  // namespace courier::skeleton
