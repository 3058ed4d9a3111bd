// courier-bench transport, Courier's side: two ranks; rank 0's host-GPU
// thread pushes WRITE (or WRITE with immediate data) commands of one size
// through one FIFO channel and one proxy thread, with `window` writes in
// flight on the transport, and times first push to DRAIN.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "bench_result.hpp"
#include "courier/context.hpp"

namespace courier::bench {

struct TransportOptions {
  std::string provider;        // for the table only; the Context already uses it
  uint32_t window = 64;        // writes in flight on the transport
  uint32_t fifo_inflight = 0;  // commands the producer may run ahead; 0 = max(1024, window)
  std::string op = "write";    // "write" or "write_imm"
  // Consecutive commands writing contiguous pieces (source and destination)
  // before starting over at offset 0; 1 = every write to offset 0.
  uint32_t run = 1;
};

// Iterations actually run for `size`: capped so that one run moves at most
// about 2 GiB.
uint64_t iterations_for(size_t size, uint64_t iters);

// Warm-up iterations before each measured run (both paths use the same).
uint64_t warmup_for(uint64_t iters);

class CourierTransport {
 public:
  // Collective. The Context must have one channel, one proxy thread and
  // COURIER_NIC_WINDOW = window. Registers one window of `largest` x `run`
  // bytes.
  CourierTransport(Context& ctx, size_t largest, const TransportOptions& options);

  // Collective: one warm-up and one measured run of `iters` writes of `size`
  // bytes. The result is meaningful on rank 0.
  BenchResult run(size_t size, uint64_t iters);

  // Collective: on rank 1, checks every immediate-data notification of every
  // run arrived (write_imm only).
  void check_notifications();

 private:
  Context& ctx_;
  TransportOptions options_;
  DeviceBuffer buffer_;
  uint32_t window_ = 0;
  uint64_t expected_imm_ = 0;
};

}  // namespace courier::bench
