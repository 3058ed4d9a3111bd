// courier-bench fifo: host-GPU producer threads pushing 16-byte commands into
// one channel drained by one proxy thread whose transport completes every
// command at once, so the number is the FIFO + proxy cost alone. The
// baseline ("ring") drains the same ring with a bare loop, no proxy.
// --prefilled times draining a full ring instead, without a producer running.
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
  // The ring is filled (`depth` commands, pushed by this thread) while
  // nothing consumes it, then drained; only the drains are timed. No
  // producer competes with the consumer for a core, and under
  // `valgrind --tool=callgrind` the consumer's instructions per command are
  // the same from run to run.
  bool prefilled = false;
};

std::vector<BenchResult> run_fifo_bench(const FifoBenchOptions& options);

}  // namespace courier::bench
