#include "transport_bench.hpp"

#include <algorithm>
#include <chrono>
#include <thread>

#include "core/check.hpp"
#include "courier/context.hpp"
#include "gpu/fifo_push.hpp"

namespace courier::bench {

namespace {

struct KernelArgs {
  DeviceChannel channel;
  TransferCmd cmd;
  uint64_t iters;
  PushStatus status = PushStatus::ok;
};

// One "GPU thread" pushing `iters` copies of `cmd` in batches of 8, then a
// DRAIN: the same pattern as the raw baseline's post loop.
void push_kernel(const courier_host_thread_v1*, void* raw) {
  auto& a = *static_cast<KernelArgs*>(raw);
  TransferCmd batch[kMaxBatch];
  std::fill(std::begin(batch), std::end(batch), a.cmd);
  uint64_t sent = 0;
  while (sent < a.iters) {
    uint32_t n = static_cast<uint32_t>(
        std::min<uint64_t>({kMaxBatch, a.channel.max_inflight, a.iters - sent}));
    PushStatus s = device::push_batch(a.channel, batch, n, nullptr);
    if (s != PushStatus::ok) {
      a.status = s;
      return;
    }
    sent += n;
  }
  a.status = device::drain(a.channel);
}

double run_one(Context& ctx, const TransferCmd& cmd, uint64_t iters) {
  KernelArgs args{ctx.channel(0), cmd, iters};
  auto start = std::chrono::steady_clock::now();
  ctx.launch_host_kernel(1, 1, push_kernel, &args);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (args.status != PushStatus::ok) {
    fail("transport benchmark: pushing {} commands failed: {} ({})", iters, to_string(args.status),
         ctx.channel_stats(0).first_error);
  }
  return seconds;
}

}  // namespace

uint64_t iterations_for(size_t size, uint64_t iters) {
  const uint64_t budget = uint64_t{2} << 30;
  return std::max<uint64_t>(64, std::min<uint64_t>(iters, budget / std::max<size_t>(size, 1)));
}

std::vector<BenchResult> run_courier_transport(Context& ctx, const TransportOptions& o) {
  if (ctx.world_size() != 2) fail("the transport benchmark needs exactly 2 ranks");
  size_t largest = *std::max_element(o.sizes.begin(), o.sizes.end());
  DeviceBuffer buffer = ctx.alloc(largest);
  uint32_t window = ctx.register_window(buffer.data(), buffer.size());
  const bool imm = o.op == "write_imm";
  std::vector<BenchResult> results;
  for (size_t size : o.sizes) {
    const uint64_t iters = iterations_for(size, o.iters);
    ctx.barrier();
    if (ctx.rank() == 0) {
      WriteCmdArgs a;
      a.dst_rank = 1;
      a.window = window;
      a.length = size;
      a.flags = imm ? kCmdFlagImm : 0;
      TransferCmd cmd;
      if (encode_write(a, &cmd) != CmdStatus::ok) fail("size {} cannot be encoded", size);
      run_one(ctx, cmd, std::max<uint64_t>(iters / 10, 16));  // warm-up
      double seconds = run_one(ctx, cmd, iters);
      BenchResult r;
      r.bench = "transport";
      r.path = "courier";
      r.op = o.op;
      r.provider = o.provider;
      r.size = size;
      r.window = o.window;
      r.iters = iters;
      r.threads = 1;
      r.seconds = seconds;
      r.msgs_per_s = static_cast<double>(iters) / seconds;
      r.gbytes_per_s = r.msgs_per_s * static_cast<double>(size) / 1e9;
      results.push_back(r);
    }
    ctx.barrier();
  }
  if (imm && ctx.rank() == 1) {
    // Every notification of warm-up and measured rounds must arrive.
    uint64_t expected = 0;
    for (size_t size : o.sizes) {
      uint64_t iters = iterations_for(size, o.iters);
      expected += iters + std::max<uint64_t>(iters / 10, 16);
    }
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (ctx.imm_received() < expected && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (ctx.imm_received() != expected) {
      fail("rank 1 received {} immediate-data notifications, expected {}", ctx.imm_received(),
           expected);
    }
  }
  ctx.barrier();
  return results;
}

}  // namespace courier::bench
