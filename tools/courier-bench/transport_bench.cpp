#include "transport_bench.hpp"

#include <algorithm>
#include <chrono>
#include <thread>
#include <vector>

#include "core/check.hpp"
#include "gpu/fifo_push.hpp"

namespace courier::bench {

namespace {

struct KernelArgs {
  DeviceChannel channel;
  const std::vector<TransferCmd>* cmds;  // pushed in turn
  uint64_t iters;
  PushStatus status = PushStatus::ok;
};

// One "GPU thread" pushing `iters` commands, cycling through `cmds`, in
// batches of up to 8, then a DRAIN: the counterpart of the raw baseline's
// post loop.
void push_kernel(const courier_host_thread_v1*, void* raw) {
  auto& a = *static_cast<KernelArgs*>(raw);
  const std::vector<TransferCmd>& cmds = *a.cmds;
  TransferCmd batch[kMaxBatch];
  uint64_t sent = 0;
  size_t next = 0;
  while (sent < a.iters) {
    uint32_t n = static_cast<uint32_t>(
        std::min<uint64_t>({kMaxBatch, a.channel.max_inflight, a.iters - sent}));
    for (uint32_t i = 0; i < n; ++i) {
      batch[i] = cmds[next];
      next = next + 1 == cmds.size() ? 0 : next + 1;
    }
    PushStatus s = device::push_batch(a.channel, batch, n, nullptr);
    if (s != PushStatus::ok) {
      a.status = s;
      return;
    }
    sent += n;
  }
  a.status = device::drain(a.channel);
}

// A GPU backend without host kernels (cuda, hip): one device thread pushes
// the commands from a real kernel; run_device_commands returns once they
// completed.
double timed_device_push(Context& ctx, const std::vector<TransferCmd>& cmds, uint64_t iters) {
  std::vector<DeviceCommandList> lists(1);
  lists[0].channel = 0;
  lists[0].commands.reserve(iters);
  for (uint64_t i = 0; i < iters; ++i) lists[0].commands.push_back(cmds[i % cmds.size()]);
  auto start = std::chrono::steady_clock::now();
  ctx.run_device_commands(lists);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (lists[0].status != PushStatus::ok) {
    fail("transport benchmark: pushing {} commands from the device failed: {} ({})", iters,
         to_string(lists[0].status), ctx.channel_stats(0).first_error);
  }
  return seconds;
}

double timed_push(Context& ctx, const std::vector<TransferCmd>& cmds, uint64_t iters) {
  if (ctx.gpu_backend() != "host") return timed_device_push(ctx, cmds, iters);
  KernelArgs args{ctx.channel(0), &cmds, iters};
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

uint64_t warmup_for(uint64_t iters) { return std::max<uint64_t>(iters / 10, 16); }

CourierTransport::CourierTransport(Context& ctx, size_t largest, const TransportOptions& options)
    : ctx_(ctx), options_(options), buffer_(ctx.alloc(largest * options.run)) {
  if (ctx.world_size() != 1 && ctx.world_size() != 2) {
    fail("the transport benchmark needs 2 ranks, or 1 that writes to itself");
  }
  window_ = ctx.register_window(buffer_.data(), buffer_.size());
}

BenchResult CourierTransport::run(size_t size, uint64_t iters) {
  const bool imm = options_.op == "write_imm";
  BenchResult r;
  r.bench = "transport";
  r.path = "courier";
  r.op = options_.op;
  // The libfabric provider for nic-ofi; otherwise the backend actually used.
  r.provider = ctx_.nic_backend() == "ofi" ? options_.provider : ctx_.nic_backend();
  r.size = size;
  r.window = options_.window;
  r.fifo_inflight = options_.fifo_inflight;
  r.iters = iters;
  r.threads = 1;
  if (imm) expected_imm_ += warmup_for(iters) + iters;
  ctx_.barrier();
  if (ctx_.rank() == 0) {
    // `run` writes to consecutive pieces of the window, source and
    // destination alike (what the proxy may merge), then the next run
    // starts over at offset 0.
    std::vector<TransferCmd> cmds(options_.run);
    for (uint32_t i = 0; i < options_.run; ++i) {
      WriteCmdArgs a;
      a.dst_rank = static_cast<uint32_t>(ctx_.world_size() - 1);  // one rank: itself
      a.window = window_;
      a.src_offset = a.dst_offset = i * size;
      a.length = size;
      a.flags = imm ? kCmdFlagImm : 0;
      if (encode_write(a, &cmds[i]) != CmdStatus::ok) fail("size {} cannot be encoded", size);
    }
    timed_push(ctx_, cmds, warmup_for(iters));
    r.seconds = timed_push(ctx_, cmds, iters);
    r.msgs_per_s = static_cast<double>(iters) / r.seconds;
    r.gbytes_per_s = r.msgs_per_s * static_cast<double>(size) / 1e9;
  }
  ctx_.barrier();
  return r;
}

void CourierTransport::check_notifications() {
  if (options_.op == "write_imm" && ctx_.rank() == ctx_.world_size() - 1) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (ctx_.imm_received() < expected_imm_ && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (ctx_.imm_received() != expected_imm_) {
      fail("rank {} received {} immediate-data notifications, expected {}", ctx_.rank(),
           ctx_.imm_received(), expected_imm_);
    }
  }
  ctx_.barrier();
}

}  // namespace courier::bench
