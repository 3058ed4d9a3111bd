// partition_check: the long job of the two-host test bed's partition cases
// (two_hosts.sh). Every rank sends to every other rank until something
// fails, so that every rank depends on both hosts all the time:
//
//   --traffic writes (default): WRITEs, each batch of each channel spread
//     over all peers (as MoE dispatch sends tokens everywhere). The first
//     failed push or DRAIN stops the rank's traffic; the rank says what
//     Courier told it (the status, each channel's first error, the failed
//     peer) and exits 1 with no further collective: one failed wait, then
//     the end, so its exit time shows how long Courier took to give up.
//   --traffic ep: EP low-latency dispatch and combine over the proxy path
//     in a loop; the first call that throws ends it (its error says why),
//     then the Buffer and the Context are destroyed as any program would.
//
//   partition_check [--traffic writes|ep] [--give-up-s S]
//
// Lines the script reads:
//   partition_check: rank R traffic started
//   partition_check: rank R: traffic stopped: <status or error>
//   partition_check: rank R: channel C: <first error>
//   partition_check: rank R: rank P failed: <reason>
// Exit status: 1 when traffic failed (the expected end once the link is
// down), 3 when it ran --give-up-s seconds without failing, 2 for a bad
// command line, 4 for an error outside the traffic (e.g. joining the job).
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "courier/context.hpp"
#include "courier/ep.hpp"
#include "gpu/fifo_push.hpp"

namespace {

void say(const std::string& line) {
  std::fputs(("partition_check: " + line + "\n").c_str(), stdout);
  std::fflush(stdout);
}

constexpr uint32_t kSlice = 4096;  // bytes per WRITE; each rank owns one slice of every window

struct KernelArgs {
  std::vector<courier::DeviceChannel> channels;
  int rank = 0;
  int world = 0;
  uint32_t window = 0;
  std::chrono::steady_clock::time_point give_up_at;
  std::atomic<bool> stop{false};
  std::atomic<int> stopped_by{-1};  // the first failed PushStatus; -1 while none
};

// One "GPU thread": batches of WRITEs to all peers in turn, a DRAIN every few
// batches, until a push or DRAIN fails here or in another thread.
void traffic_kernel(const courier_host_thread_v1* t, void* raw) {
  auto& args = *static_cast<KernelArgs*>(raw);
  const courier::DeviceChannel& ch = args.channels[t->block_idx % args.channels.size()];
  const uint64_t peers = static_cast<uint64_t>(args.world - 1);
  uint64_t round = 0;
  while (!args.stop.load(std::memory_order_relaxed) &&
         std::chrono::steady_clock::now() < args.give_up_at) {
    courier::TransferCmd batch[courier::kMaxBatch];
    const uint32_t n = std::min(courier::kMaxBatch, ch.max_inflight);
    for (uint32_t i = 0; i < n; ++i) {
      int peer = static_cast<int>((round * n + i) % peers);
      if (peer >= args.rank) ++peer;  // every rank but this one
      courier::WriteCmdArgs a;
      a.dst_rank = static_cast<uint64_t>(peer);
      a.window = args.window;
      a.src_offset = 0;
      a.dst_offset = static_cast<uint64_t>(args.rank) * kSlice;
      a.length = kSlice;
      (void)courier::encode_write(a, &batch[i]);
    }
    courier::PushStatus status = courier::device::push_batch(ch, batch, n, nullptr);
    if (status == courier::PushStatus::ok && ++round % 4 == 0) {
      status = courier::device::drain(ch);
    }
    if (status != courier::PushStatus::ok) {
      int none = -1;
      args.stopped_by.compare_exchange_strong(none, static_cast<int>(status));
      args.stop.store(true);
      return;
    }
  }
}

void report_failed_peer(const courier::Context& ctx) {
  if (std::optional<courier::PeerFailure> failed = ctx.failed_peer()) {
    say(fmt::format("rank {}: rank {} failed: {}", ctx.rank(), failed->rank, failed->reason));
  }
}

// Low-latency dispatch and combine until a call throws (returns 1) or
// `give_up_s` passes (returns 3).
int ep_traffic(courier::Context& ctx, int give_up_s) {
  const int ranks = ctx.world_size(), rank = ctx.rank();
  const int64_t tokens = 16, hidden = 256, topk = 2;
  courier::ep::BufferOptions options;
  options.low_latency_mode = true;
  options.max_tokens_per_rank = static_cast<uint32_t>(tokens);
  options.hidden = static_cast<uint32_t>(hidden);
  options.element_bytes = 2;
  options.max_topk = static_cast<uint32_t>(topk);
  options.num_experts = static_cast<uint32_t>(2 * ranks);
  courier::ep::Buffer buffer(ctx, options);
  const DLDevice device = buffer.device();
  courier::DeviceBuffer x = ctx.alloc(static_cast<size_t>(tokens * hidden * 2));
  courier::DeviceBuffer idx = ctx.alloc(static_cast<size_t>(tokens * topk * 8));
  courier::DeviceBuffer weights = ctx.alloc(static_cast<size_t>(tokens * topk * 4));
  // Token t goes to experts t and t + 1 (mod 2 * ranks): every rank gets rows.
  std::vector<int64_t> experts(static_cast<size_t>(tokens * topk));
  for (size_t i = 0; i < experts.size(); ++i) {
    experts[i] = static_cast<int64_t>((i / topk + i % topk) % (2 * ranks));
  }
  ctx.copy(idx.data(), experts.data(), experts.size() * 8);
  int64_t x_shape[2] = {tokens, hidden}, k_shape[2] = {tokens, topk};
  DLTensor x_view{x.data(), device, 2, DLDataType{kDLBfloat, 16, 1}, x_shape, nullptr, 0};
  DLTensor idx_view{idx.data(), device, 2, DLDataType{kDLInt, 64, 1}, k_shape, nullptr, 0};
  DLTensor w_view{weights.data(), device, 2, DLDataType{kDLFloat, 32, 1}, k_shape, nullptr, 0};
  ctx.barrier();
  say(fmt::format("rank {} traffic started", rank));
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(give_up_s);
  try {
    while (std::chrono::steady_clock::now() < give_up) {
      courier::ep::LowLatencyDispatchArgs args;
      args.x = &x_view;
      args.topk_idx = &idx_view;
      courier::ep::LowLatencyDispatchResult got = buffer.low_latency_dispatch(args);
      buffer.low_latency_combine(got.packed_recv_x.tensor(), idx_view, w_view, got.handle);
    }
  } catch (const courier::Error& error) {
    say(fmt::format("rank {}: traffic stopped: {}", rank, error.what()));
    report_failed_peer(ctx);
    return 1;
  }
  say(fmt::format("rank {}: traffic ran {} s without any failure", rank, give_up_s));
  return 3;
}

int run(bool ep, int give_up_s) {
  courier::Context ctx;
  const int rank = ctx.rank();
  if (ctx.world_size() < 2) {
    say("needs at least 2 ranks");
    return 2;
  }
  if (ep) return ep_traffic(ctx, give_up_s);
  courier::DeviceBuffer buffer = ctx.alloc(kSlice * static_cast<size_t>(ctx.world_size()));
  const uint32_t window = ctx.register_window(buffer.data(), buffer.size());
  ctx.barrier();  // every window is registered: traffic may start
  say(fmt::format("rank {} traffic started", rank));

  KernelArgs args;
  for (uint32_t c = 0; c < ctx.num_channels(); ++c) args.channels.push_back(ctx.channel(c));
  args.rank = rank;
  args.world = ctx.world_size();
  args.window = window;
  args.give_up_at = std::chrono::steady_clock::now() + std::chrono::seconds(give_up_s);
  ctx.launch_host_kernel(ctx.num_channels(), 1, traffic_kernel, &args);

  const int stopped_by = args.stopped_by.load();
  if (stopped_by < 0) {
    say(fmt::format("rank {}: traffic ran {} s without any failure", rank, give_up_s));
    return 3;
  }
  say(fmt::format("rank {}: traffic stopped: {}", rank,
                  courier::to_string(static_cast<courier::PushStatus>(stopped_by))));
  for (uint32_t c = 0; c < ctx.num_channels(); ++c) {
    const std::string first_error = ctx.channel_stats(c).first_error;
    if (!first_error.empty()) say(fmt::format("rank {}: channel {}: {}", rank, c, first_error));
  }
  report_failed_peer(ctx);
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  int give_up_s = 300;
  bool ep = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const std::string value = i + 1 < argc ? argv[i + 1] : "";
    if (arg == "--give-up-s" && !value.empty()) {
      give_up_s = std::max(1, std::atoi(value.c_str()));
      ++i;
    } else if (arg == "--traffic" && (value == "writes" || value == "ep")) {
      ep = value == "ep";
      ++i;
    } else {
      std::fprintf(stderr, "usage: partition_check [--traffic writes|ep] [--give-up-s S]\n");
      return 2;
    }
  }
  try {
    return run(ep, give_up_s);
  } catch (const std::exception& error) {
    say(fmt::format("error: {}", error.what()));
    return 4;
  }
}
