// courier-bench barrier: BARRIER latency from a host-GPU thread, against the
// job's out-of-band (bootstrap, TCP) barrier measured in the same run. With
// --check, every rank records when it entered and left each barrier
// (CLOCK_MONOTONIC, one clock per host) and the job verifies that nobody left
// barrier i before everybody entered it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "courier/context.hpp"

namespace courier::bench {

struct BarrierOptions {
  std::string provider = "shm";
  uint32_t iters = 2000;
  bool rail = false;
  bool check = false;
};

struct BarrierRow {
  std::string path;  // "courier" or "bootstrap"
  double median_us = 0;
  double p99_us = 0;
  uint32_t iters = 0;
};

struct BarrierRun {
  std::vector<BarrierRow> rows;  // rank 0
  uint64_t violations = 0;       // summed over ranks
};

BarrierRun run_barrier_bench(Context& ctx, const BarrierOptions& options);

}  // namespace courier::bench
