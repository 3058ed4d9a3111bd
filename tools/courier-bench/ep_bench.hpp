// courier-bench ep: expert-parallel dispatch and combine (courier::ep,
// docs/ep.md) in high-throughput (ht) or low-latency (ll) mode, per token
// count: latency (median, p99 over the timed iterations) and GB/s of the
// bfloat16 token rows this rank sends to other ranks, measured on rank 0.
//
// Baseline, in the same run and iteration by iteration: path "raw-write"
// moves the same bytes as the EP call with Courier's raw transport path:
// per destination rank, one WRITE (split only at TransferCmd::kMaxLength)
// of the bytes that call sends there, pushed with Context::run_device_commands
// and waited for. No packing, signals, metadata or receive-side wait: what is
// left of the EP path's time above it is the cost of dispatch/combine itself.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "courier/context.hpp"

namespace courier::bench {

struct EpOptions {
  std::string mode = "ht";                       // "ht" or "ll"
  std::vector<uint32_t> tokens = {32, 64, 128};  // per rank, one row set each
  uint32_t hidden = 1024;
  uint32_t topk = 4;
  uint32_t experts = 16;
  uint32_t iters = 20;
  uint32_t warmup = 2;
  bool fp8 = false;  // ll: dispatch FP8 (use_fp8), combine bfloat16
  // ll: combine sends LogFMT (LowLatencyCombineOptions::use_logfmt). The
  // raw-write baseline still moves the bfloat16 rows: what LogFMT saves on
  // the wire shows as the combine's time against it.
  bool logfmt = false;
  // Routing: top-k distinct random experts per token, one choice in eight
  // masked (-1) unless unmasked (the reference benchmarks' routing).
  bool unmasked = false;
  // Where the Buffer's kernels run: its own stream (calls wait for their
  // work) or, with caller_stream, the GPU runtime's default stream
  // (Buffer::set_stream(nullptr)): low-latency calls then return once their
  // work is queued, and the timing waits for it after the call
  // (Buffer::synchronize), as a framework does before reading the results.
  bool caller_stream = false;
};

struct EpRow {
  std::string mode, phase, path;  // path: "courier-direct", "courier-proxy" or "raw-write"
  uint32_t tokens = 0;
  uint32_t iters = 0;
  double bytes = 0;  // row bytes this rank sends to other ranks per call
  double median_us = 0;
  double p99_us = 0;
  double gbytes_per_s = 0;  // bytes / median
  // Per call: synchronous host copies (Context::copy) and their bytes.
  double host_copies = 0, host_bytes = 0;
  // Courier's calls, where the GPU plugin counts (GPU ABI 1.12; `counted`):
  // per call the kernels launched and the host's waits for the device; and
  // (`gpu_timed`) the median GPU time from a stamp on the Buffer's stream
  // before the call to one after it (gaps between kernels included), over
  // the calls that did not wait on the host (the stamps around one that
  // does time the host too).
  bool counted = false, gpu_timed = false;
  double gpu_median_us = 0;
  // With held GPU times (`floor_timed`): the median GPU time of an empty
  // kernel (one thread) between the same stamps, about what any call's GPU
  // time includes besides its own kernels' time.
  bool floor_timed = false;
  double gpu_floor_us = 0;
  // Courier's calls on the caller's stream (`host_timed`): the median time
  // until the call returned, before the synchronize that ends its wall
  // time (what the host spends queueing it).
  bool host_timed = false;
  double host_median_us = 0;
  double launches = 0, host_waits = 0;
};

// Collective; every rank returns its own rows (rank 0's are the ones printed).
std::vector<EpRow> run_ep_bench(Context& ctx, const EpOptions& options);

}  // namespace courier::bench
