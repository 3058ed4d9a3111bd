// courier-bench fifo --gpu NAME: a GPU backend's producer kernel
// (run_fifo_producers: blocks x threads device threads, each pushing WRITE
// commands) into FIFO channels in mapped host memory, drained by Courier
// proxy threads whose transport completes every command at once; baseline
// ("ring"): the same kernel drained by bare consume-and-complete loops. With
// --check every command is verified: none lost, duplicated, reordered within
// its producer or torn. --round-trips N adds the GPU -> proxy -> GPU
// completion round trip of one command, next to a bare flag ping-pong
// through mapped host memory.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bench_result.hpp"

namespace courier::bench {

struct GpuFifoOptions {
  std::string gpu = "cuda";  // COURIER_GPU_BACKEND-style choice
  uint32_t blocks = 132;
  uint32_t threads = 32;  // producer threads per block
  bool warp_push = true;  // push_warp (false: every thread alone)
  uint32_t proxy_threads = 1;
  uint32_t channels = 0;  // 0: one per proxy thread
  uint32_t depth = 8192;
  uint32_t max_inflight = 8192;
  uint64_t commands = 100'000'000;  // in all, over every producer
  uint32_t repeats = 3;
  bool check = false;
  bool graph = false;        // launch the producers through a captured graph
  uint32_t round_trips = 0;  // iterations of the round-trip measurement (0: none)
};

struct LatencyRow {
  std::string path;  // "flag" (baseline) or "courier"
  uint32_t iters = 0;
  double median_us = 0;
  double p99_us = 0;
};

struct GpuFifoRun {
  std::vector<BenchResult> rows;
  std::vector<LatencyRow> latency;
  std::string device;           // the backend's device name
  uint64_t checked = 0;         // commands verified (with --check)
  uint64_t violations = 0;      // lost, duplicated, reordered or torn commands
  std::string first_violation;  // "" when none
};

// Throws courier::Error when the backend cannot be opened or fails.
GpuFifoRun run_gpu_fifo_bench(const GpuFifoOptions& options);

}  // namespace courier::bench
