#include "barrier_bench.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "bench_clock.hpp"
#include "core/bootstrap/bootstrap.hpp"
#include "core/check.hpp"
#include "gpu/fifo_push.hpp"

namespace courier::bench {

namespace {

struct KernelArgs {
  DeviceChannel channel;
  uint8_t scope;
  std::vector<uint64_t> enter, leave;
  PushStatus status = PushStatus::ok;
};

void barrier_kernel(const courier_host_thread_v1*, void* raw) {
  auto& a = *static_cast<KernelArgs*>(raw);
  for (size_t i = 0; i < a.enter.size(); ++i) {
    a.enter[i] = steady_now_ns();
    a.status = device::barrier(a.channel, i, a.scope);
    a.leave[i] = steady_now_ns();
    if (a.status != PushStatus::ok) return;
  }
}

BarrierRow summarize(std::string path, const std::vector<uint64_t>& enter,
                     const std::vector<uint64_t>& leave) {
  std::vector<double> us;
  for (size_t i = 0; i < enter.size(); ++i) us.push_back((leave[i] - enter[i]) / 1e3);
  std::sort(us.begin(), us.end());
  BarrierRow row;
  row.path = std::move(path);
  row.iters = static_cast<uint32_t>(us.size());
  row.median_us = us[us.size() / 2];
  row.p99_us = us[std::min(us.size() - 1, us.size() * 99 / 100)];
  return row;
}

}  // namespace

BarrierRun run_barrier_bench(Context& ctx, const BarrierOptions& o) {
  const int world = ctx.world_size();
  BarrierRun run;
  KernelArgs args;
  args.channel = ctx.channel(0);
  args.scope = o.rail ? kBarrierRail : kBarrierWorld;
  args.enter.assign(o.iters, 0);
  args.leave.assign(o.iters, 0);
  ctx.barrier();
  ctx.launch_host_kernel(1, 1, barrier_kernel, &args);
  if (args.status != PushStatus::ok) {
    fail("rank {}: BARRIER failed: {} ({})", ctx.rank(), to_string(args.status),
         ctx.channel_stats(0).first_error);
  }

  // The baseline: the same number of out-of-band barriers.
  std::vector<uint64_t> enter(o.iters), leave(o.iters);
  for (uint32_t i = 0; i < o.iters; ++i) {
    enter[i] = steady_now_ns();
    ctx.barrier();
    leave[i] = steady_now_ns();
  }

  // Nobody leaves barrier i before everybody entered it (world scope; one
  // clock per host, so only meaningful within a host).
  std::vector<uint64_t> mine(2 * o.iters);
  std::copy(args.enter.begin(), args.enter.end(), mine.begin());
  std::copy(args.leave.begin(), args.leave.end(), mine.begin() + o.iters);
  std::vector<std::byte> all =
      ctx.bootstrap().allgather(std::as_bytes(std::span<const uint64_t>(mine)));
  if (o.check && !o.rail) {
    const auto* t = reinterpret_cast<const uint64_t*>(all.data());
    for (uint32_t i = 0; i < o.iters; ++i) {
      uint64_t last_enter = 0, first_leave = UINT64_MAX;
      for (int r = 0; r < world; ++r) {
        last_enter = std::max(last_enter, t[size_t(r) * 2 * o.iters + i]);
        first_leave = std::min(first_leave, t[size_t(r) * 2 * o.iters + o.iters + i]);
      }
      if (first_leave < last_enter) {
        if (run.violations == 0) {
          fmt::print(stderr, "barrier {}: a rank left {} ns before the last one entered\n", i,
                     last_enter - first_leave);
        }
        ++run.violations;
      }
    }
  }
  run.rows.push_back(summarize(o.rail ? "courier-rail" : "courier", args.enter, args.leave));
  run.rows.push_back(summarize("bootstrap", enter, leave));
  return run;
}

}  // namespace courier::bench
