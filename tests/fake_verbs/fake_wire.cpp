#include "fake_wire.hpp"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace courier::fake_verbs {
namespace {

socklen_t abstract_address(uint32_t number, sockaddr_un& address) {
  std::memset(&address, 0, sizeof(address));
  address.sun_family = AF_UNIX;
  // sun_path[0] == '\0' selects the abstract namespace.
  const int written = std::snprintf(address.sun_path + 1, sizeof(address.sun_path) - 1,
                                    "courier-fake-verbs-%u", number);
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + written);
}

OwnedFd new_socket() {
  return OwnedFd(::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
}

}  // namespace

std::optional<BoundSocket> bind_number(uint32_t number) {
  OwnedFd fd = new_socket();
  if (!fd.valid()) return std::nullopt;
  sockaddr_un address;
  const socklen_t length = abstract_address(number, address);
  if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&address), length) != 0) {
    return std::nullopt;
  }
  return BoundSocket{std::move(fd), number};
}

std::optional<BoundSocket> bind_free_number(uint32_t start) {
  for (uint32_t attempt = 0; attempt < kMaxHcaNumber; ++attempt) {
    const uint32_t number = (start - 1 + attempt) % kMaxHcaNumber + 1;
    if (auto bound = bind_number(number)) return bound;
  }
  return std::nullopt;
}

DialResult dial(uint32_t number, OwnedFd& connected) {
  OwnedFd fd = new_socket();
  if (!fd.valid()) return DialResult::TryLater;
  sockaddr_un address;
  const socklen_t length = abstract_address(number, address);
  if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&address), length) == 0) {
    connected = std::move(fd);
    return DialResult::Connected;
  }
  // A full backlog (EAGAIN) is a busy peer; no name or no listener is a
  // missing one.
  if (errno == EAGAIN || errno == EINTR) return DialResult::TryLater;
  return DialResult::Refused;
}

void Connection::send(const FrameHeader& header, const std::byte* payload, size_t payload_length) {
  std::vector<std::byte> bytes(sizeof(FrameHeader) + payload_length);
  FrameHeader stamped = header;
  stamped.magic = kFrameMagic;
  stamped.payload_length = payload_length;
  std::memcpy(bytes.data(), &stamped, sizeof(stamped));
  if (payload_length) std::memcpy(bytes.data() + sizeof(stamped), payload, payload_length);
  outgoing_.push_back(std::move(bytes));
}

void Connection::flush() {
  while (!closed_ && !outgoing_.empty()) {
    const std::vector<std::byte>& front = outgoing_.front();
    const ssize_t written = ::send(fd_.get(), front.data() + outgoing_offset_,
                                   front.size() - outgoing_offset_, MSG_NOSIGNAL);
    if (written < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) return;
      closed_ = true;
      return;
    }
    outgoing_offset_ += static_cast<size_t>(written);
    if (outgoing_offset_ == front.size()) {
      outgoing_.pop_front();
      outgoing_offset_ = 0;
    }
  }
}

void Connection::receive(std::vector<Frame>& frames) {
  std::byte chunk[65536];
  while (!closed_) {
    const ssize_t got = ::recv(fd_.get(), chunk, sizeof(chunk), 0);
    if (got < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN) closed_ = true;
      break;
    }
    if (got == 0) {
      closed_ = true;
      break;
    }
    incoming_.insert(incoming_.end(), chunk, chunk + got);
  }
  size_t consumed = 0;
  while (incoming_.size() - consumed >= sizeof(FrameHeader)) {
    Frame frame;
    std::memcpy(&frame.header, incoming_.data() + consumed, sizeof(FrameHeader));
    if (frame.header.magic != kFrameMagic) {
      std::fprintf(stderr, "fake verbs: malformed frame on connection %llu; closing it\n",
                   static_cast<unsigned long long>(id_));
      closed_ = true;
      break;
    }
    const size_t total = sizeof(FrameHeader) + frame.header.payload_length;
    if (incoming_.size() - consumed < total) break;
    const std::byte* payload = incoming_.data() + consumed + sizeof(FrameHeader);
    frame.payload.assign(payload, payload + frame.header.payload_length);
    frames.push_back(std::move(frame));
    consumed += total;
  }
  incoming_.erase(incoming_.begin(), incoming_.begin() + static_cast<ptrdiff_t>(consumed));
}

}  // namespace courier::fake_verbs
