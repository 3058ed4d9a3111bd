// courier-bench fifo: host-GPU producer threads pushing 16-byte commands into
// one channel drained by one proxy thread whose transport completes every
// command at once, so the number is the FIFO + proxy cost alone. The
// baseline ("ring") drains the same ring with a bare loop, no proxy.
#pragma once

#include <vector>

#include "bench_result.hpp"

namespace courier::bench {

struct FifoBenchOptions {
  uint32_t producers = 1;
  uint64_t commands = 20'000'000;
  uint32_t batch = 8;
  uint32_t depth = 1024;
  uint32_t max_inflight = 256;
  uint32_t repeats = 5;  // rows report the median run
};

std::vector<BenchResult> run_fifo_bench(const FifoBenchOptions& options);

}  // namespace courier::bench
