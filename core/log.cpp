#include "log.hpp"

#include <array>

namespace courier {

namespace {
constexpr std::array<std::string_view, 5> kLevelNames = {"error", "warn", "info", "debug", "trace"};
}

std::optional<LogLevel> parse_log_level(std::string_view text) {
  for (size_t i = 0; i < kLevelNames.size(); ++i) {
    if (text == kLevelNames[i]) return static_cast<LogLevel>(i);
  }
  return std::nullopt;
}

std::string_view to_string(LogLevel level) { return kLevelNames.at(static_cast<size_t>(level)); }

void Logger::write(LogLevel level, std::string_view component, std::string_view message) {
  std::string line = rank_.load() >= 0
                         ? fmt::format("courier[rank {}] {} {}: {}\n", rank_.load(),
                                       to_string(level), component, message)
                         : fmt::format("courier {} {}: {}\n", to_string(level), component, message);
  std::lock_guard lock(mutex_);
  std::fwrite(line.data(), 1, line.size(), sink_);
  std::fflush(sink_);
}

}  // namespace courier
