#include "idle_bench.hpp"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "core/context_internals.hpp"

namespace courier::bench {

namespace {

double cpu_seconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);  // every thread of the process
  auto seconds = [](const timeval& t) { return t.tv_sec + t.tv_usec / 1e6; };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

// Median over `windows` windows of this process's CPU time per wall second,
// in percent of one core.
double measure(const IdleOptions& o) {
  std::vector<double> shares;
  for (uint32_t w = 0; w < o.windows; ++w) {
    const auto start = std::chrono::steady_clock::now();
    const double cpu_start = cpu_seconds();
    std::this_thread::sleep_for(std::chrono::duration<double>(o.window_s));
    const double wall =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    shares.push_back(100.0 * (cpu_seconds() - cpu_start) / wall);
  }
  std::sort(shares.begin(), shares.end());
  return shares[shares.size() / 2];
}

IdleRow gather(Bootstrap& bootstrap, std::string path, double mine, uint32_t proxy_threads) {
  std::vector<std::byte> all = bootstrap.allgather(
      std::span<const std::byte>(reinterpret_cast<const std::byte*>(&mine), sizeof mine));
  IdleRow row;
  row.path = std::move(path);
  row.proxy_threads = proxy_threads;
  for (int r = 0; r < bootstrap.size(); ++r) {
    double share = 0;
    std::memcpy(&share, all.data() + r * sizeof share, sizeof share);
    row.core_percent.push_back(share);
    row.max_percent = std::max(row.max_percent, share);
  }
  return row;
}

}  // namespace

std::vector<IdleRow> run_idle_bench(const std::shared_ptr<Bootstrap>& bootstrap,
                                    const IdleOptions& o) {
  std::vector<IdleRow> rows;
  bootstrap->barrier();
  rows.push_back(gather(*bootstrap, "bootstrap", measure(o), 0));
  ContextOptions options;
  options.env = {{"COURIER_OFI_PROVIDER", o.provider}};
  options.bootstrap = bootstrap;
  Context ctx(options);
  ctx.barrier();
  std::this_thread::sleep_for(std::chrono::duration<double>(o.grace_s));
  const double mine = measure(o);
  rows.push_back(gather(*bootstrap, "courier", mine, ContextInternals::config(ctx).proxy_threads));
  return rows;
}

}  // namespace courier::bench
