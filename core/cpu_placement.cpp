#include "core/cpu_placement.hpp"

#include <sched.h>

namespace courier {

std::vector<int32_t> allowed_cpus() {
  cpu_set_t set;
  std::vector<int32_t> cpus;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  }
  return cpus;
}

std::vector<int32_t> default_rank_cpus(const std::vector<int32_t>& allowed, size_t online,
                                       int local_rank, int local_size) {
  if (local_size <= 1 || allowed.size() != online ||
      allowed.size() < static_cast<size_t>(local_size)) {
    return {};
  }
  return cpu_share(allowed, local_rank, local_size);
}

std::vector<int32_t> cpu_share(const std::vector<int32_t>& allowed, int local_rank,
                               int local_size) {
  if (allowed.empty() || local_size <= 0 || local_rank < 0) return allowed;
  const size_t n = allowed.size();
  const size_t ranks = static_cast<size_t>(local_size);
  const size_t rank = static_cast<size_t>(local_rank);
  if (n < ranks) return {allowed[rank % n]};
  const size_t share = n / ranks;
  return {allowed.begin() + static_cast<std::ptrdiff_t>(rank * share),
          allowed.begin() + static_cast<std::ptrdiff_t>((rank + 1) * share)};
}

}  // namespace courier
