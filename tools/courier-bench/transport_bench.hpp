// courier-bench transport, Courier's side: two ranks; rank 0's host-GPU
// thread pushes WRITE (or WRITE with immediate data) commands of one size
// through one FIFO channel and one proxy thread, with `window` commands in
// flight, and times first push to DRAIN.
#pragma once

#include <string>
#include <vector>

#include "bench_result.hpp"

namespace courier {
class Context;
}

namespace courier::bench {

struct TransportOptions {
  std::string provider;  // for the table only; the Context already uses it
  std::vector<size_t> sizes;
  uint32_t window = 64;
  uint64_t iters = 20000;
  std::string op = "write";  // "write" or "write_imm"
};

// Iterations actually run for `size`: capped so that one size moves at most
// about 2 GiB.
uint64_t iterations_for(size_t size, uint64_t iters);

// The Context must have been created with one channel and one proxy thread
// and COURIER_MAX_INFLIGHT = window. Results are returned on rank 0.
std::vector<BenchResult> run_courier_transport(Context& ctx, const TransportOptions& options);

}  // namespace courier::bench
