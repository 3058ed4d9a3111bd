// courier-run: starts N local ranks of a program with everything Courier's
// bootstrap needs in their environment. See docs/launching.md.
#include <csignal>
#include <cstdio>
#include <string>
#include <vector>

#include "courier/error.hpp"
#include "tools/courier-run/launch_options.hpp"
#include "tools/courier-run/launcher.hpp"

namespace {

// Exit statuses of courier-run itself (a rank's failure passes on the rank's).
constexpr int kUsageError = 2;
constexpr int kCannotRun = 127;

}  // namespace

int main(int argc, char** argv) {
  // A reader of courier-run's output that goes away must not kill courier-run
  // before it has stopped the ranks; writes then simply fail.
  std::signal(SIGPIPE, SIG_IGN);

  courier::run::LaunchOptions options;
  try {
    options = courier::run::parse_command_line(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const courier::Error& error) {
    std::fprintf(stderr, "%s\n%s", error.what(), courier::run::usage_text().c_str());
    return kUsageError;
  }
  if (options.show_help) {
    std::fputs(courier::run::usage_text().c_str(), stdout);
    return 0;
  }
  try {
    return courier::run::run_job(options);
  } catch (const courier::Error& error) {
    std::fprintf(stderr, "%s\n", error.what());
    return kCannotRun;
  }
}
