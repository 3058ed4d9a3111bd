// File descriptors the fake opens (sockets, eventfds), owned RAII-style and
// listed in a lock-free registry so that a forked child can drop its copies
// at once: the child must never answer on the parent's sockets, and a copy
// it kept would keep the parent's socket names alive after the parent dies.
#pragma once

#include <utility>

namespace courier::fake_verbs {

class OwnedFd {
 public:
  OwnedFd() = default;
  explicit OwnedFd(int fd);
  ~OwnedFd() { reset(); }
  OwnedFd(OwnedFd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  OwnedFd& operator=(OwnedFd&& other) noexcept;
  OwnedFd(const OwnedFd&) = delete;
  OwnedFd& operator=(const OwnedFd&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  void reset();

 private:
  int fd_ = -1;
};

// Installs (once per process) the fork handler that closes, in the child,
// every descriptor an OwnedFd holds. Closing a copy never disturbs the parent.
void install_fork_handler();

}  // namespace courier::fake_verbs
