// courier-info: what Courier finds on this machine, what it rejects and why,
// what it would pick, and how it is configured.
#include <cstdio>
#include <string>
#include <string_view>

#include "core/config.hpp"
#include "core/log.hpp"
#include "report.hpp"
#include "topology_view.hpp"

namespace {

constexpr std::string_view kUsage =
    R"(Usage: courier-info [--json] [--help]
       courier-info --topology [--json] [--dot FILE] [--svg FILE]

Lists what Courier finds on this machine:
  - the plugin directories searched (COURIER_BACKEND_PATH first, then the
    "courier" directory beside libcourier.so);
  - every plugin file found, usable or rejected, with the reason;
  - the order COURIER_GPU_BACKEND / COURIER_NIC_BACKEND would try backends in;
  - each usable backend initialized once: ok or why not, its properties
    (capabilities, memory kinds, immediate-data width, device) and its knobs;
  - the effective configuration (every COURIER_* knob, its value and source);
  - bad values and unknown COURIER_* variables (likely typos).

With --topology, instead: the machine (or COURIER_TOPOLOGY_XML's), one row
per GPU with its PCI address, NUMA node, the NIC(s) Courier pairs it with and
their PCIe distance, the NIC backend and the proxy CPUs; choices forced by
COURIER_NICS, COURIER_NIC_BACKEND or COURIER_PROXY_CPUS are marked.

Options:
  --json       print the same as one JSON object
  --topology   report the topology and the GPU-to-NIC pairing
  --dot FILE   with --topology: also write the machine and the pairs as a
               Graphviz graph (DOT) into FILE
  --svg FILE   with --topology: also draw that graph into FILE as SVG, with
               Graphviz's dot program (apt-get install graphviz)
  --help       print this text

A bad value is reported as an error line and everything else is still listed.
The exit status is 0 whenever the report was printed, 2 for a bad option;
with --topology, 1 when the machine, a knob or the picture cannot be made.
)";

}  // namespace

int main(int argc, char** argv) {
  bool json = false, topology = false;
  std::string dot, svg;
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg == "--json") {
      json = true;
    } else if (arg == "--topology") {
      topology = true;
    } else if (arg == "--dot" || arg == "--svg") {
      if (i + 1 >= argc || argv[i + 1][0] == '\0') {
        std::fprintf(stderr, "courier-info: %s needs a file name\n", argv[i]);
        return 2;
      }
      (arg == "--dot" ? dot : svg) = argv[++i];
    } else if (arg == "--help" || arg == "-h") {
      std::fwrite(kUsage.data(), 1, kUsage.size(), stdout);
      return 0;
    } else {
      std::fprintf(stderr, "courier-info: unknown option '%s'\n\n%.*s", argv[i],
                   static_cast<int>(kUsage.size()), kUsage.data());
      return 2;
    }
  }

  if ((!dot.empty() || !svg.empty()) && !topology) {
    std::fprintf(stderr, "courier-info: %s goes with --topology\n",
                 dot.empty() ? "--svg" : "--dot");
    return 2;
  }
  if (topology) return courier::info::run_topology({json, dot, svg});

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
