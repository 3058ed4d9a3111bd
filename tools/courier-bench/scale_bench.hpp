// courier-bench scale: what one rank of a job costs as the job grows. Every
// rank measures its start-up (joining the job, each phase of the Context's
// constructor, its first WRITE to the next rank completed), what it holds
// (resident memory, registered bytes, open file descriptors, threads,
// connections per proxy endpoint, bytes its bootstrap collectives sent and
// received), and the job measures its BARRIER latency
// and one small low-latency EP dispatch/combine next to raw writes of the
// same bytes. tools/courier-bench/scale_sweep.sh runs it at 2..64 ranks and
// fits how each quantity grows (docs/scaling.md).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "courier/context.hpp"

namespace courier::bench {

struct ScaleOptions {
  std::string provider = "shm";
  uint32_t barrier_iters = 200;
  uint32_t ep_iters = 20;
  uint32_t tokens = 8;  // EP: tokens per rank, hidden 128, top-2, an expert per rank
  uint32_t hidden = 128;
  uint32_t topk = 2;
};

// One quantity over the job's ranks.
struct ScaleRow {
  std::string quantity;  // e.g. "context_ms", "rss_mib"
  std::string unit;
  double min = 0, median = 0, max = 0;
};

struct ScaleRun {
  std::vector<ScaleRow> per_rank;  // rank 0 only: min / median / max over ranks
  std::vector<ScaleRow> job;       // the job's own: barrier and EP medians (min = median = max)
};

// `joined_ms`: how long this rank took to join the job (before ctx existed);
// `started_ns`: the steady clock when the process began its work (main);
// `context_cpu_ms`: the CPU time the Context's constructor took on its thread.
ScaleRun run_scale_bench(Context& ctx, const ScaleOptions& options, double joined_ms,
                         uint64_t started_ns, double context_cpu_ms);

}  // namespace courier::bench
