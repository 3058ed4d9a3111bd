#include "fake_fd.hpp"

#include <pthread.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cstdio>
#include <mutex>

namespace courier::fake_verbs {
namespace {

// Lock-free because the fork child handler may run while another thread of
// the parent held any lock at the moment of fork().
constexpr size_t kRegistrySlots = 4096;
struct Slot {
  std::atomic<int> fd{-1};
};
std::array<Slot, kRegistrySlots> registry;

void remember(int fd) {
  for (auto& slot : registry) {
    int expected = -1;
    if (slot.fd.compare_exchange_strong(expected, fd)) return;
  }
  std::fprintf(stderr,
               "fake verbs: more than %zu open descriptors; fd %d stays open in forked "
               "children\n",
               kRegistrySlots, fd);
}

void forget(int fd) {
  for (auto& slot : registry) {
    int expected = fd;
    if (slot.fd.compare_exchange_strong(expected, -1)) return;
  }
}

void close_all_in_child() {
  for (auto& slot : registry) {
    const int fd = slot.fd.exchange(-1);
    if (fd >= 0) ::close(fd);
  }
}

}  // namespace

OwnedFd::OwnedFd(int fd) : fd_(fd) {
  if (fd_ >= 0) remember(fd_);
}

OwnedFd& OwnedFd::operator=(OwnedFd&& other) noexcept {
  if (this != &other) {
    reset();
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

void OwnedFd::reset() {
  if (fd_ < 0) return;
  forget(fd_);
  ::close(fd_);
  fd_ = -1;
}

void install_fork_handler() {
  static std::once_flag once;
  std::call_once(once, [] { pthread_atfork(nullptr, nullptr, close_all_in_child); });
}

}  // namespace courier::fake_verbs
