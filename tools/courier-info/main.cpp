// courier-info: what Courier finds on this machine, what it rejects and why,
// what it would pick, and how it is configured.
#include <cstdio>
#include <string_view>

#include "core/config.hpp"
#include "core/log.hpp"
#include "report.hpp"

namespace {

constexpr std::string_view kUsage =
    R"(Usage: courier-info [--json] [--help]

Lists what Courier finds on this machine:
  - the plugin directories searched (COURIER_BACKEND_PATH first, then the
    "courier" directory beside libcourier.so);
  - every plugin file found, usable or rejected, with the reason;
  - the order COURIER_GPU_BACKEND / COURIER_NIC_BACKEND would try backends in;
  - each usable backend initialized once: ok or why not, its properties
    (capabilities, memory kinds, immediate-data width, device) and its knobs;
  - the effective configuration (every COURIER_* knob, its value and source);
  - bad values and unknown COURIER_* variables (likely typos).

Options:
  --json   print the same as one JSON object
  --help   print this text

A bad value is reported as an error line and everything else is still listed.
The exit status is 0 whenever the report was printed, 2 for a bad option.
)";

}  // namespace

int main(int argc, char** argv) {
  bool json = false;
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg == "--json") {
      json = true;
    } else if (arg == "--help" || arg == "-h") {
      std::fwrite(kUsage.data(), 1, kUsage.size(), stdout);
      return 0;
    } else {
      std::fprintf(stderr, "courier-info: unknown option '%s'\n\n%.*s", argv[i],
                   static_cast<int>(kUsage.size()), kUsage.data());
      return 2;
    }
  }

  // The tool's own log level: COURIER_LOG_LEVEL when valid (a bad value is
  // reported in the Configuration section, not here).
  courier::LogLevel level = courier::LogLevel::warn;
  if (auto text = courier::process_env()("COURIER_LOG_LEVEL")) {
    level = courier::parse_log_level(*text).value_or(level);
  }
  courier::Logger log(level);

  courier::info::Report report = courier::info::gather_report(log);
  std::string out = json ? courier::info::render_json(report) : courier::info::render_text(report);
  std::fwrite(out.data(), 1, out.size(), stdout);
  return std::fflush(stdout) == 0 ? 0 : 1;
}
