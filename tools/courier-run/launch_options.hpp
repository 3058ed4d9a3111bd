// courier-run's command line: `courier-run -n N [--timeout S] [--] PROG ARGS...`.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace courier::run {

// More local ranks than this is almost certainly a typo (and would run the
// launcher out of file descriptors: it holds two pipes per rank).
inline constexpr int kMaxLocalRanks = 1024;

struct LaunchOptions {
  int ranks = 0;
  std::optional<int> timeout_s;
  std::vector<std::string> command;  // PROG and its arguments
  bool show_help = false;
};

// Parses argv (without argv[0]). Throws courier::Error naming the bad
// argument.
LaunchOptions parse_command_line(const std::vector<std::string>& args);

std::string usage_text();

}  // namespace courier::run
