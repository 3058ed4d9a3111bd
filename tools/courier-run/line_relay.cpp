#include "tools/courier-run/line_relay.hpp"

#include <poll.h>
#include <unistd.h>

#include <cerrno>

namespace courier::run {

void write_whole(int fd, std::string_view text) {
  while (!text.empty()) {
    ssize_t written = ::write(fd, text.data(), text.size());
    if (written > 0) {
      text.remove_prefix(static_cast<size_t>(written));
    } else if (written < 0 && errno == EINTR) {
      continue;
    } else if (written < 0 && errno == EAGAIN) {
      // A non-blocking stdout inherited from our parent: wait for room.
      pollfd watch{fd, POLLOUT, 0};
      ::poll(&watch, 1, -1);
    } else {
      return;
    }
  }
}

void LineRelay::emit(std::string_view line) {
  outgoing_ += prefix_;
  outgoing_ += line;
  outgoing_ += '\n';
}

void LineRelay::feed(std::span<const char> bytes) {
  std::string_view data(bytes.data(), bytes.size());
  while (!data.empty()) {
    size_t newline = data.find('\n');
    if (newline == std::string_view::npos) {
      partial_ += data;
      // An endless line is cut rather than buffered without bound.
      while (partial_.size() >= kMaxLineBytes) {
        emit(std::string_view(partial_).substr(0, kMaxLineBytes));
        partial_.erase(0, kMaxLineBytes);
      }
      break;
    }
    if (partial_.empty()) {
      emit(data.substr(0, newline));
    } else {
      partial_ += data.substr(0, newline);
      emit(partial_);
      partial_.clear();
    }
    data.remove_prefix(newline + 1);
  }
  // Every complete line of this chunk in one write.
  write_whole(sink_fd_, outgoing_);
  outgoing_.clear();
}

void LineRelay::finish() {
  if (!partial_.empty()) {
    emit(partial_);
    partial_.clear();
    write_whole(sink_fd_, outgoing_);
    outgoing_.clear();
  }
}

}  // namespace courier::run
