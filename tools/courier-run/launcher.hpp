// courier-run's supervisor: starts the ranks, relays their output, and stops
// the job as a whole when one rank fails, the timeout expires or courier-run
// is told to stop.
#pragma once

#include "tools/courier-run/launch_options.hpp"

namespace courier::run {

// Runs the job to its end and returns courier-run's exit status: 0 when every
// rank exited 0; the first failed rank's status (128 + signal for a signal);
// 124 after --timeout; 128 + signal when courier-run was interrupted.
// Throws courier::Error when the job cannot start (for example PROG cannot be
// executed).
int run_job(const LaunchOptions& options);

}  // namespace courier::run
