// courier-conformance: runs the NIC conformance suite (tests/conformance,
// docs/conformance.md) against one backend plugin and says, case by case,
// what passed, failed or could not be checked.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <iostream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "nic_harness.hpp"
#include "summary_reporter.hpp"

namespace fs = std::filesystem;
namespace cc = courier::conformance;

namespace {

constexpr int kExitUsage = 2;

constexpr const char* kUsage = R"(usage: courier-conformance [options] [-- doctest options]

Runs the Courier NIC conformance suite against one backend plugin.

  --backend NAME|PATH  the plugin to test: a name (ofi finds libcourier-nic-ofi.so
                       in $COURIER_BACKEND_PATH, then in Courier's plugin
                       directory next to this program) or a plugin file
  --provider NAME      set the backend's provider knob (its COURIER_*_PROVIDER)
  --knob NAME=VALUE    set a backend knob (an environment variable) for every rank
  --case PATTERN       run only the cases whose names match; * and ? are
                       wildcards, ',' separates patterns
  --list               list the cases (those matching --case) and exit
  -h, --help           this text

Exit status: 0 when nothing failed (skips included), 1 when a case failed,
2 on a usage error, a plugin that cannot be loaded, or no matching case.
)";

[[noreturn]] void usage_error(const std::string& message) {
  std::fprintf(stderr, "courier-conformance: %s\n(--help for usage)\n", message.c_str());
  std::exit(kExitUsage);
}

struct Options {
  std::string backend;  // name or path; "" = $COURIER_CONFORMANCE_PLUGIN
  std::string provider;
  std::vector<std::pair<std::string, std::string>> knobs;
  std::string cases;
  bool list = false;
  std::vector<std::string> doctest_args;
};

Options parse(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage_error(std::string(arg) + " needs a value");
      return argv[++i];
    };
    if (arg == "-h" || arg == "--help") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else if (arg == "--backend") {
      options.backend = value();
    } else if (arg == "--provider") {
      options.provider = value();
    } else if (arg == "--knob") {
      const std::string knob = value();
      const size_t equals = knob.find('=');
      if (equals == 0 || equals == std::string::npos) usage_error("--knob wants NAME=VALUE");
      options.knobs.emplace_back(knob.substr(0, equals), knob.substr(equals + 1));
    } else if (arg == "--case") {
      options.cases = value();
    } else if (arg == "--list") {
      options.list = true;
    } else if (arg == "--") {
      options.doctest_args.assign(argv + i + 1, argv + argc);
      break;
    } else {
      usage_error("unknown option " + std::string(arg));
    }
  }
  return options;
}

// Where a plugin name is looked up, in order: $COURIER_BACKEND_PATH, then the
// plugin directory of the tree this program lives in (build/bin ->
// build/lib/courier; <prefix>/bin -> <prefix>/<libdir>/courier).
std::vector<fs::path> plugin_dirs() {
  std::vector<fs::path> dirs;
  if (const char* path = std::getenv("COURIER_BACKEND_PATH")) {
    std::string_view rest = path;
    while (!rest.empty()) {
      const size_t colon = rest.find(':');
      if (colon != 0) dirs.emplace_back(rest.substr(0, colon));
      if (colon == std::string_view::npos) break;
      rest.remove_prefix(colon + 1);
    }
  }
  std::error_code error;
  const fs::path exe = fs::read_symlink("/proc/self/exe", error);
  if (!error) {
    const fs::path prefix = exe.parent_path().parent_path();
    dirs.push_back(prefix / "lib" / "courier");
    if (fs::path(COURIER_CONFORMANCE_LIBDIR) != "lib") {
      dirs.push_back(prefix / COURIER_CONFORMANCE_LIBDIR / "courier");
    }
  }
  return dirs;
}

std::string found_plugins() {
  std::string text;
  std::error_code error;
  for (const fs::path& dir : plugin_dirs()) {
    for (const auto& entry : fs::directory_iterator(dir, error)) {
      const std::string file = entry.path().filename().string();
      if (file.starts_with("libcourier-nic-") && file.ends_with(".so")) {
        text += "\n  " + file.substr(15, file.size() - 18) + "  (" + entry.path().string() + ")";
      }
    }
  }
  return text.empty() ? " none" : text;
}

std::string resolve_backend(const std::string& backend) {
  if (backend.find('/') != std::string::npos || backend.ends_with(".so")) {
    if (!fs::exists(backend)) usage_error("no plugin file " + backend);
    return fs::absolute(backend).string();
  }
  std::string searched;
  for (const fs::path& dir : plugin_dirs()) {
    const fs::path file = dir / ("libcourier-nic-" + backend + ".so");
    if (fs::exists(file)) return file.string();
    searched += " " + dir.string();
  }
  usage_error("no backend '" + backend + "' in" + searched + "\nbackends found:" + found_plugins());
}

// --provider: the backend's own knob for it, so that the option means the
// same for every backend that has one.
std::string provider_knob(const courier_nic_plugin_v1& api) {
  for (uint32_t i = 0; i < api.num_knobs; ++i) {
    const std::string name = api.knobs[i].name ? api.knobs[i].name : "";
    if (name.starts_with("COURIER_") && name.ends_with("_PROVIDER")) return name;
  }
  usage_error(std::string("backend ") + api.header.name +
              " has no COURIER_*_PROVIDER knob; use --knob NAME=VALUE");
}

}  // namespace

int main(int argc, char** argv) {
  Options options = parse(argc, argv);

  // The harness loads the plugin named by this variable, in every rank.
  if (!options.backend.empty()) {
    setenv("COURIER_CONFORMANCE_PLUGIN", resolve_backend(options.backend).c_str(), 1);
  } else if (!std::getenv("COURIER_CONFORMANCE_PLUGIN") && !options.list) {
    usage_error("which backend? pass --backend NAME|PATH\nbackends found:" + found_plugins());
  }

  if (!options.list) {
    const courier_nic_plugin_v1* api = nullptr;
    try {
      api = &cc::plugin();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "courier-conformance: %s\n", e.what());
      return kExitUsage;
    }
    if (!options.provider.empty())
      options.knobs.emplace_back(provider_knob(*api), options.provider);
    // Knobs travel as environment variables: the backend reads them through
    // the host services, which fall back to the environment, in every rank.
    std::string settings;
    for (const auto& [name, value] : options.knobs) {
      setenv(name.c_str(), value.c_str(), 1);
      settings += "  " + name + "=" + value;
    }
    std::printf("courier-conformance: backend %s (%s)%s\n\n", api->header.name,
                cc::plugin_path().c_str(), settings.c_str());
    std::fflush(stdout);
  }

  std::vector<const char*> doctest_argv = {argv[0]};
  // doctest takes its query flags only from the command line.
  if (options.list) doctest_argv.push_back("--list-test-cases");
  for (const std::string& arg : options.doctest_args) doctest_argv.push_back(arg.c_str());
  doctest::Context context(static_cast<int>(doctest_argv.size()), doctest_argv.data());
  context.setOption("reporters", "courier");
  context.setOption("no-intro", true);
  context.setOption("no-version", true);
  if (!options.cases.empty()) context.setOption("test-case", options.cases.c_str());
  const int status = context.run();
  if (options.list || context.shouldExit()) return status;

  const cc::RunCounts& counts = cc::run_counts();
  if (counts.passed + counts.failed + counts.skipped == 0) {
    std::fprintf(stderr, "courier-conformance: no case matches '%s' (--list shows them)\n",
                 options.cases.c_str());
    return kExitUsage;
  }
  return counts.failed > 0 || status != 0 ? 1 : 0;
}
