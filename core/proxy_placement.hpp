// Where a rank's proxy threads (and host kernels) run (docs/topology.md,
// "Proxy CPUs"): COURIER_PROXY_CPUS; else the CPUs topology/ gives this
// rank's GPU (its NUMA node's allowed CPUs, shared with the node's other
// GPUs); else the default split of the allowed CPUs among the host's ranks
// (core/cpu_placement.hpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/config.hpp"

namespace courier {

struct ProxyPlacement {
  std::vector<int32_t> cpus;  // empty: leave placement to the kernel
  std::string why;            // for the log
};

// `device` is this rank's GPU index (PCI bus-id order), `device_memory`
// whether the GPU backend has real devices (not host memory). Throws
// courier::Error when COURIER_PROXY_CPUS leaves no CPU this process may use.
ProxyPlacement place_proxies(const Config& config, int device, bool device_memory);

}  // namespace courier
