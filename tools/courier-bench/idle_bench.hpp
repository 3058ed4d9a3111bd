// courier-bench idle: the CPU an idle rank burns. Every rank measures its own
// process (all threads: proxies, the bootstrap's monitor, the caller) with
// getrusage over a few windows of wall time, first with the job's bootstrap
// alone (the floor: no Context yet), then with a Context that carries no
// traffic, after a grace period. The result is a share of one core.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/bootstrap/bootstrap.hpp"
#include "courier/context.hpp"

namespace courier::bench {

struct IdleOptions {
  std::string provider = "shm";
  uint32_t windows = 3;  // measurement windows per path
  double window_s = 10;  // wall seconds per window
  double grace_s = 1;    // after the Context is made, before measuring
};

struct IdleRow {
  std::string path;                  // "bootstrap" (no Context) or "courier" (idle Context)
  std::vector<double> core_percent;  // per rank: median over the windows, % of one core
  double max_percent = 0;            // the busiest rank's
  uint32_t proxy_threads = 0;        // per rank (0 for "bootstrap")
};

// Measures path "bootstrap" with `bootstrap` alone, then builds a Context
// over it (the job's environment, the provider from `options`) and measures
// "courier". Every rank gets every rank's numbers.
std::vector<IdleRow> run_idle_bench(const std::shared_ptr<Bootstrap>& bootstrap,
                                    const IdleOptions& options);

}  // namespace courier::bench
