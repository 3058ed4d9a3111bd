#include "tools/courier-run/launch_options.hpp"

#include <charconv>

#include "core/check.hpp"

namespace courier::run {

namespace {

int parse_positive(const std::string& option, const std::string& text, int max,
                   std::string_view what, int min = 1) {
  int value = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc() || ptr != end || value < min) {
    fail("courier-run: {} expects a {} integer ({}), got '{}'", option,
         min == 0 ? "non-negative" : "positive", what, text);
  }
  if (value > max) fail("courier-run: {} {} is more than the limit of {}", option, text, max);
  return value;
}

}  // namespace

std::string usage_text() {
  return "usage: courier-run -n N [--timeout SECONDS] [--grace SECONDS] [--] PROG [ARGS...]\n"
         "\n"
         "Starts N ranks of PROG on this machine, each with COURIER_RANK,\n"
         "COURIER_WORLD_SIZE, COURIER_LOCAL_RANK, COURIER_LOCAL_SIZE,\n"
         "COURIER_BOOTSTRAP=127.0.0.1:PORT and COURIER_JOB_TOKEN set, and prefixes\n"
         "each line they print with \"[RANK] \". When a rank fails, the others get a\n"
         "grace period to exit on their own (with their own errors), are then\n"
         "stopped, and courier-run exits with the first failed rank's status.\n"
         "\n"
         "  -n N               number of ranks (1 to 1024)\n"
         "  --timeout SECONDS  stop every rank after this long (exit status 124)\n"
         "  --grace SECONDS    after a rank fails, wait this long for the others\n"
         "                     before stopping them (default COURIER_TIMEOUT_S + 5;\n"
         "                     0 stops them at once)\n"
         "  -h, --help         show this text\n";
}

LaunchOptions parse_command_line(const std::vector<std::string>& args) {
  LaunchOptions options;
  bool have_ranks = false;
  size_t i = 0;
  // Takes the value of `option`, either glued ("-n4", "--timeout=9") or the
  // next argument.
  auto value_of = [&](const std::string& option, size_t glued_at) -> std::string {
    if (args[i].size() > glued_at) {
      std::string glued = args[i].substr(glued_at);
      if (glued[0] == '=') glued.erase(0, 1);
      return glued;
    }
    if (i + 1 >= args.size()) fail("courier-run: {} needs a value", option);
    return args[++i];
  };
  for (; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg == "-h" || arg == "--help") {
      options.show_help = true;
      return options;
    }
    if (arg.rfind("-n", 0) == 0) {
      options.ranks = parse_positive("-n", value_of("-n", 2), kMaxLocalRanks, "number of ranks");
      have_ranks = true;
    } else if (arg.rfind("--timeout", 0) == 0 && (arg.size() == 9 || arg[9] == '=')) {
      options.timeout_s =
          parse_positive("--timeout", value_of("--timeout", 9), 365 * 24 * 3600, "seconds");
    } else if (arg.rfind("--grace", 0) == 0 && (arg.size() == 7 || arg[7] == '=')) {
      options.grace_s =
          parse_positive("--grace", value_of("--grace", 7), 365 * 24 * 3600, "seconds", 0);
    } else if (!arg.empty() && arg[0] == '-') {
      fail(
          "courier-run: unknown option '{}' (put '--' before a program whose name starts with "
          "'-')",
          arg);
    } else {
      break;
    }
  }
  options.command.assign(args.begin() + static_cast<std::ptrdiff_t>(i), args.end());
  if (!have_ranks) fail("courier-run: -n N is required (the number of ranks to start)");
  if (options.command.empty()) fail("courier-run: no program given to run after the options");
  return options;
}

int grace_seconds(const LaunchOptions& options, const char* courier_timeout_s) {
  if (options.grace_s) return *options.grace_s;
  constexpr int kDefaultTimeout = 60;  // COURIER_TIMEOUT_S's default
  constexpr int kMargin = 5;
  int timeout = kDefaultTimeout;
  if (courier_timeout_s != nullptr) {
    std::string_view text(courier_timeout_s);
    int value = 0;
    auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (!text.empty() && ec == std::errc() && ptr == text.data() + text.size() && value > 0 &&
        value <= 365 * 24 * 3600) {
      timeout = value;
    }
  }
  return timeout + kMargin;
}

}  // namespace courier::run
