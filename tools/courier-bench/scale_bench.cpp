#include "scale_bench.hpp"

#include <dirent.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <span>

#include "barrier_bench.hpp"
#include "bench_clock.hpp"
#include "core/check.hpp"
#include "courier/bootstrap.hpp"
#include "ep_bench.hpp"
#include "gpu/fifo_push.hpp"

namespace courier::bench {

namespace {

// A "Key:   value kB" line of /proc/self/status, as a number (0 if absent).
uint64_t proc_status_value(const char* key) {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (f == nullptr) return 0;
  char line[256];
  uint64_t value = 0;
  const size_t n = std::strlen(key);
  while (std::fgets(line, sizeof line, f) != nullptr) {
    if (std::strncmp(line, key, n) == 0 && line[n] == ':') {
      value = std::strtoull(line + n + 1, nullptr, 10);
      break;
    }
  }
  std::fclose(f);
  return value;
}

uint32_t open_fds() {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return 0;
  uint32_t n = 0;
  while (const dirent* entry = readdir(dir)) {
    if (entry->d_name[0] != '.') ++n;
  }
  closedir(dir);
  return n > 0 ? n - 1 : 0;  // less the directory's own descriptor
}

// What each rank reports (all-gathered as plain bytes).
struct RankNumbers {
  double join_ms, backends_ms, context_setup_ms, connect_ms, windows_ms, context_ms, context_cpu_ms;
  double connect_cpu_ms, windows_cpu_ms;
  double first_write_ms, first_write_us;
  double rss_mib, peak_rss_mib, registered_mib;
  double fds, threads, proxy_threads, connections_per_thread;
  double bootstrap_sent_kib, bootstrap_received_kib;
};

struct FirstWrite {
  DeviceChannel channel;
  TransferCmd cmd;
  PushStatus status = PushStatus::ok;
  uint64_t took_ns = 0;
};

void first_write_kernel(const courier_host_thread_v1*, void* raw) {
  auto& w = *static_cast<FirstWrite*>(raw);
  const uint64_t t0 = steady_now_ns();
  w.status = device::push_and_wait(w.channel, w.cmd);
  w.took_ns = steady_now_ns() - t0;
}

ScaleRow over_ranks(const std::vector<RankNumbers>& all, std::string quantity, std::string unit,
                    double RankNumbers::*field) {
  std::vector<double> v;
  for (const RankNumbers& r : all) v.push_back(r.*field);
  std::sort(v.begin(), v.end());
  return {std::move(quantity), std::move(unit), v.front(), v[v.size() / 2], v.back()};
}

// The bootstrap's allgather of 64 bytes per rank (a Context's exchanges
// are such), median of `iters` after a barrier: the result's path (rank 0
// to every rank, or down the result tree) is in it.
double bootstrap_allgather_us(Bootstrap& bootstrap, uint32_t iters) {
  std::vector<std::byte> mine(64, std::byte{1});
  std::vector<double> us;
  bootstrap.barrier();
  for (uint32_t i = 0; i < std::max<uint32_t>(iters, 1); ++i) {
    const uint64_t t0 = steady_now_ns();
    (void)bootstrap.allgather(mine);
    us.push_back(static_cast<double>(steady_now_ns() - t0) / 1e3);
  }
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

ScaleRow job_row(std::string quantity, std::string unit, double value) {
  return {std::move(quantity), std::move(unit), value, value, value};
}

}  // namespace

ScaleRun run_scale_bench(Context& ctx, const ScaleOptions& o, double joined_ms, uint64_t started_ns,
                         double context_cpu_ms) {
  const int world = ctx.world_size();
  const int me = ctx.rank();
  RankNumbers mine{};
  const Context::Footprint startup = ctx.footprint();
  mine.join_ms = joined_ms;
  mine.backends_ms = startup.backends_ms;
  mine.context_setup_ms = startup.join_ms + startup.setup_ms;
  mine.connect_ms = startup.connect_ms;
  mine.windows_ms = startup.windows_ms;
  mine.connect_cpu_ms = startup.connect_cpu_ms;
  mine.windows_cpu_ms = startup.windows_cpu_ms;
  mine.context_ms = startup.total_ms;
  mine.context_cpu_ms = context_cpu_ms;

  // The first command: a WRITE to the next rank, pushed and completed.
  DeviceBuffer window_memory = ctx.alloc(4096);
  const uint32_t window = ctx.register_window(window_memory.data(), window_memory.size());
  FirstWrite w;
  w.channel = ctx.channel(0);
  WriteCmdArgs args;
  args.dst_rank = static_cast<uint64_t>((me + 1) % world);
  args.window = window;
  args.length = 64;
  if (encode_write(args, &w.cmd) != CmdStatus::ok) fail("scale: encoding the first WRITE failed");
  ctx.launch_host_kernel(1, 1, first_write_kernel, &w);
  if (w.status != PushStatus::ok) {
    fail("rank {}: the first WRITE to rank {} failed: {} ({})", me, args.dst_rank,
         to_string(w.status), ctx.channel_stats(0).first_error);
  }
  mine.first_write_ms = static_cast<double>(steady_now_ns() - started_ns) / 1e6;
  mine.first_write_us = static_cast<double>(w.took_ns) / 1e3;
  ctx.barrier();  // every rank's write landed before the window goes
  ctx.deregister_window(window);

  ScaleRun run;
  BarrierOptions barrier;
  barrier.provider = o.provider;
  barrier.iters = o.barrier_iters;
  const Bootstrap::Traffic before_timing = ctx.bootstrap().traffic();
  const BarrierRun barriers = run_barrier_bench(ctx, barrier);
  const double allgather_us = bootstrap_allgather_us(ctx.bootstrap(), o.barrier_iters);
  const Bootstrap::Traffic after_timing = ctx.bootstrap().traffic();

  EpOptions ep;
  ep.mode = "ll";
  ep.tokens = {o.tokens};
  ep.hidden = o.hidden;
  ep.topk = std::min<uint32_t>(o.topk, static_cast<uint32_t>(world));
  ep.experts = static_cast<uint32_t>(world);
  ep.iters = o.ep_iters;
  ep.unmasked = true;
  const std::vector<EpRow> ep_rows = run_ep_bench(ctx, ep);

  // What the rank holds, after the EP Buffer came and went: the peak
  // figures include it.
  const Context::Footprint now = ctx.footprint();
  mine.rss_mib = static_cast<double>(proc_status_value("VmRSS")) / 1024.0;
  mine.peak_rss_mib = static_cast<double>(proc_status_value("VmHWM")) / 1024.0;
  mine.registered_mib = static_cast<double>(now.registered_bytes_peak) / (1024.0 * 1024.0);
  mine.fds = open_fds();
  mine.threads = static_cast<double>(proc_status_value("Threads"));
  mine.proxy_threads = now.proxy_threads;
  mine.connections_per_thread = now.peers_per_endpoint;
  // The bootstrap's collectives of the Context and the EP Buffer (not the
  // timing loops, whose count is a flag): rank 0's share is where a relay
  // would grow.
  const Bootstrap::Traffic traffic = ctx.bootstrap().traffic();
  const uint64_t sent = traffic.bytes_sent - (after_timing.bytes_sent - before_timing.bytes_sent);
  const uint64_t received =
      traffic.bytes_received - (after_timing.bytes_received - before_timing.bytes_received);
  mine.bootstrap_sent_kib = static_cast<double>(sent) / 1024.0;
  mine.bootstrap_received_kib = static_cast<double>(received) / 1024.0;

  const std::vector<std::byte> gathered =
      ctx.bootstrap().allgather(std::as_bytes(std::span<const RankNumbers>(&mine, 1)));
  if (me != 0) return run;
  std::vector<RankNumbers> all(static_cast<size_t>(world));
  std::memcpy(all.data(), gathered.data(), all.size() * sizeof(RankNumbers));
  using R = RankNumbers;
  run.per_rank = {
      over_ranks(all, "join", "ms", &R::join_ms),
      over_ranks(all, "backends", "ms", &R::backends_ms),
      over_ranks(all, "context_setup", "ms", &R::context_setup_ms),
      over_ranks(all, "connect", "ms", &R::connect_ms),
      over_ranks(all, "windows", "ms", &R::windows_ms),
      over_ranks(all, "connect_cpu", "ms", &R::connect_cpu_ms),
      over_ranks(all, "windows_cpu", "ms", &R::windows_cpu_ms),
      over_ranks(all, "context", "ms", &R::context_ms),
      over_ranks(all, "context_cpu", "ms", &R::context_cpu_ms),
      over_ranks(all, "to_first_write", "ms", &R::first_write_ms),
      over_ranks(all, "first_write", "us", &R::first_write_us),
      over_ranks(all, "rss", "MiB", &R::rss_mib),
      over_ranks(all, "peak_rss", "MiB", &R::peak_rss_mib),
      over_ranks(all, "registered_peak", "MiB", &R::registered_mib),
      over_ranks(all, "fds", "count", &R::fds),
      over_ranks(all, "threads", "count", &R::threads),
      over_ranks(all, "proxy_threads", "count", &R::proxy_threads),
      over_ranks(all, "connections_per_thread", "count", &R::connections_per_thread),
      over_ranks(all, "bootstrap_sent", "KiB", &R::bootstrap_sent_kib),
      over_ranks(all, "bootstrap_received", "KiB", &R::bootstrap_received_kib),
  };
  for (const BarrierRow& row : barriers.rows) {
    run.job.push_back(job_row("barrier_" + row.path, "us", row.median_us));
  }
  run.job.push_back(job_row("allgather_64B_bootstrap", "us", allgather_us));
  for (const EpRow& row : ep_rows) {
    const std::string path = row.path == "raw-write" ? "_raw" : "";
    run.job.push_back(job_row("ll_" + row.phase + path, "us", row.median_us));
  }
  return run;
}

}  // namespace courier::bench
