// courier-run's command line:
// `courier-run -n N [--timeout S] [--grace S] [--] PROG ARGS...`.
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
  // After a rank fails, how long the others get to exit on their own before
  // they are stopped; unset: COURIER_TIMEOUT_S + 5 s (docs/launching.md).
  std::optional<int> grace_s;
  std::vector<std::string> command;  // PROG and its arguments
  bool show_help = false;
};

// Parses argv (without argv[0]). Throws courier::Error naming the bad
// argument.
LaunchOptions parse_command_line(const std::vector<std::string>& args);

std::string usage_text();

// The grace period: `grace_s` when given, else COURIER_TIMEOUT_S (from
// `courier_timeout_s`, the variable's value or nullptr; 60 when unset or not
// a positive integer, which the ranks themselves will report) + 5 s, long
// enough for the survivors' own peer-death errors.
int grace_seconds(const LaunchOptions& options, const char* courier_timeout_s);

}  // namespace courier::run
