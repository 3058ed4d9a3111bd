// courier-bench atomic: every rank streams WRITEs of payload blocks and
// ATOMIC adds to every peer, the pattern of MoE dispatch (tokens, then a
// per-expert count). With --check, a checker thread on every rank watches
// the counters its peers add to and proves write-then-atomic: whenever it
// reads counter value k from a sender, that sender's first k blocks are
// complete in memory. At the end every counter must equal the expected sum.
#pragma once

#include <cstdint>
#include <string>

#include "bench_result.hpp"
#include "courier/context.hpp"

namespace courier::bench {

struct AtomicOptions {
  std::string provider = "shm";
  uint64_t ops = 1'000'000;        // WRITE + ATOMIC commands issued by each rank
  uint32_t block = 64;             // payload bytes per WRITE (>= 16)
  uint32_t writes_per_atomic = 3;  // WRITEs before each ATOMIC add (1..7)
  uint32_t slots = 256;            // payload blocks per sender at each receiver
  bool check = false;
};

struct AtomicRun {
  BenchResult result;          // rank 0: the job's aggregate rates
  uint64_t violations = 0;     // summed over all ranks
  Context::AtomicStats stats;  // this rank's
};

// Collective: one run over `ctx` (its COURIER_ATOMICS decides the strategy).
AtomicRun run_atomic_bench(Context& ctx, const AtomicOptions& options);

}  // namespace courier::bench
