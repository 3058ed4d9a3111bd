// Copies a rank's output to courier-run's own stdout or stderr, one whole
// line at a time, each prefixed with the rank ("[3] "). courier-run is the
// only writer of its stdout and stderr and writes only whole lines, so lines
// of different ranks never interleave, however the ranks split their writes.
#pragma once

#include <span>
#include <string>

namespace courier::run {

// A line longer than this is passed on in pieces of this size (each with the
// prefix and a newline) rather than buffered without bound.
inline constexpr size_t kMaxLineBytes = 64 * 1024;

class LineRelay {
 public:
  LineRelay(int sink_fd, int rank)
      : sink_fd_(sink_fd), prefix_("[" + std::to_string(rank) + "] ") {}

  // Passes on every line completed by `bytes`; keeps a trailing partial line.
  void feed(std::span<const char> bytes);
  // Passes on a trailing partial line, adding the missing newline.
  void finish();

 private:
  void emit(std::string_view line);

  int sink_fd_;
  std::string prefix_;
  std::string partial_;
  std::string outgoing_;
};

// Writes all of `text` to fd, retrying short writes. Errors (a closed
// terminal, a reader that went away) are ignored: the ranks keep running.
void write_whole(int fd, std::string_view text);

}  // namespace courier::run
