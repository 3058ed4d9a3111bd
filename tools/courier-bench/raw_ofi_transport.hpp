// courier-bench transport --raw: the baseline. The same pattern as Courier's
// transport benchmark (rank 0 writes to rank 1, `window` writes in flight),
// written as a plain libfabric program without Courier's plugin, FIFO or
// proxy, so the table shows what Courier's layers cost.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "bench_result.hpp"

namespace courier {
class Bootstrap;
}

namespace courier::bench {

struct RawTransportOptions {
  std::string provider;  // COURIER_OFI_PROVIDER value: "shm" or "tcp"
  std::vector<size_t> sizes;
  uint32_t window = 64;
  uint64_t iters = 20000;
  std::string op = "write";  // "write" or "write_imm"
  // CPUs to run on while measuring (empty: anywhere). The bench passes the
  // share Courier's Context pins its proxies and host kernels to, so both
  // paths get the same placement.
  std::vector<int32_t> cpus;
};

// Collective over exactly 2 ranks. Results are returned on rank 0 (rank 1
// returns an empty vector). Throws courier::Error on any failure.
std::vector<BenchResult> run_raw_transport(const RawTransportOptions& options,
                                           courier::Bootstrap& bootstrap);

}  // namespace courier::bench
