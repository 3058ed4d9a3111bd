// Leveled logging. A Logger is owned by whoever owns the component (the
// Context, a tool, a test) and passed down by reference: no global state.
#pragma once

#include <fmt/format.h>

#include <atomic>
#include <cstdio>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

namespace courier {

enum class LogLevel { error = 0, warn = 1, info = 2, debug = 3, trace = 4 };

std::optional<LogLevel> parse_log_level(std::string_view text);
std::string_view to_string(LogLevel level);

class Logger {
 public:
  explicit Logger(LogLevel level = LogLevel::warn, std::FILE* sink = stderr)
      : level_(static_cast<int>(level)), sink_(sink) {}

  void set_level(LogLevel level) { level_.store(static_cast<int>(level)); }
  // Prefixes every line with "rank N" once the rank is known.
  void set_rank(int rank) { rank_.store(rank); }
  LogLevel level() const { return static_cast<LogLevel>(level_.load()); }
  bool enabled(LogLevel level) const { return static_cast<int>(level) <= level_.load(); }

  void write(LogLevel level, std::string_view component, std::string_view message);

  template <class... Args>
  void log(LogLevel level, std::string_view component, fmt::format_string<Args...> format,
           Args&&... args) {
    if (enabled(level)) write(level, component, fmt::format(format, std::forward<Args>(args)...));
  }
  template <class... Args>
  void error(std::string_view c, fmt::format_string<Args...> f, Args&&... a) {
    log(LogLevel::error, c, f, std::forward<Args>(a)...);
  }
  template <class... Args>
  void warn(std::string_view c, fmt::format_string<Args...> f, Args&&... a) {
    log(LogLevel::warn, c, f, std::forward<Args>(a)...);
  }
  template <class... Args>
  void info(std::string_view c, fmt::format_string<Args...> f, Args&&... a) {
    log(LogLevel::info, c, f, std::forward<Args>(a)...);
  }
  template <class... Args>
  void debug(std::string_view c, fmt::format_string<Args...> f, Args&&... a) {
    log(LogLevel::debug, c, f, std::forward<Args>(a)...);
  }

 private:
  std::atomic<int> level_;
  std::FILE* sink_;
  std::atomic<int> rank_{-1};
  std::mutex mutex_;
};

}  // namespace courier
