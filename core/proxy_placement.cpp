#include "core/proxy_placement.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <iterator>

#include "core/check.hpp"
#include "core/cpu_placement.hpp"
#include "topology/discovery.hpp"
#include "topology/pairing.hpp"

namespace courier {

namespace {

std::vector<int32_t> intersect(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  std::vector<int32_t> both;
  std::set_intersection(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(both));
  return both;
}

}  // namespace

ProxyPlacement place_proxies(const Config& config, int device, bool device_memory) {
  const std::vector<int32_t> allowed = allowed_cpus();
  if (!config.proxy_cpus.empty()) {
    std::vector<int32_t> cpus = intersect(config.proxy_cpus, allowed);
    if (cpus.empty()) {
      fail("COURIER_PROXY_CPUS={} names no CPU this process may use (it may use {})",
           fmt::join(config.proxy_cpus, ","), fmt::join(allowed, ","));
    }
    return {cpus, "COURIER_PROXY_CPUS"};
  }
  // One rank per GPU of a machine topology/ knows: that GPU's share of its
  // NUMA node. (Ranks sharing a GPU, or GPUs topology cannot see, keep the
  // default split.)
  if (device_memory && config.job.local_size >= 1) {
    try {
      const topology::Machine m = topology::discover(config.topology_xml);
      if (device >= 0 && static_cast<size_t>(device) < m.gpus.size() &&
          static_cast<size_t>(config.job.local_size) <= m.gpus.size()) {
        topology::Policy policy;
        const topology::Plan plan = topology::plan(m, policy);
        const std::vector<int32_t> cpus =
            intersect(plan.gpus[static_cast<size_t>(device)].proxy_cpus, allowed);
        if (!cpus.empty()) {
          return {cpus, fmt::format("GPU {} ({}) on NUMA node {} ({})", device,
                                    m.gpus[static_cast<size_t>(device)].pci.text(),
                                    m.gpus[static_cast<size_t>(device)].numa, m.source)};
        }
      }
    } catch (const Error&) {
      // No usable topology: the default below. (courier-info --topology says why.)
    }
  }
  return {default_rank_cpus(allowed, static_cast<size_t>(sysconf(_SC_NPROCESSORS_ONLN)),
                            config.job.local_rank, config.job.local_size),
          "the default split among the host's ranks"};
}

}  // namespace courier
