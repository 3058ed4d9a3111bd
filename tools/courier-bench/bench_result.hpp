// One measured point of courier-bench, shared by every benchmark so that the
// table and the JSON look the same for Courier and for its baselines.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace courier::bench {

struct BenchResult {
  std::string bench;           // "fifo", "transport"
  std::string path;            // "courier" or "raw" (the baseline)
  std::string op;              // "write", "write_imm", "push"
  std::string provider;        // libfabric provider, or "" where none is involved
  size_t size = 0;             // bytes per message (16 for FIFO commands)
  uint32_t window = 0;         // messages in flight on the transport
  uint32_t fifo_inflight = 0;  // commands a producer may run ahead in the FIFO (courier only)
  uint64_t iters = 0;          // messages measured
  uint32_t threads = 0;        // producer threads
  uint32_t repeats = 1;        // runs this row is the median of
  double seconds = 0;
  double msgs_per_s = 0;
  double gbytes_per_s = 0;  // 1e9 bytes per second
};

}  // namespace courier::bench
