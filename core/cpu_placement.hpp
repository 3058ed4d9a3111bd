// Default CPU placement of a rank's proxy threads and host kernels, until
// topology-aware pinning (NUMA, PCIe distance, COURIER_PROXY_CPUS) exists.
#pragma once

#include <cstdint>
#include <vector>

namespace courier {

// The CPUs this process may run on (its affinity mask: a batch scheduler's
// or cgroup's restriction is respected). Empty if it cannot be read.
std::vector<int32_t> allowed_cpus();

// Splits `allowed` evenly among the `local_size` ranks of a host and returns
// the share of `local_rank`, so that the ends of a transfer (and a rank's
// producers and its peer's proxy) do not share a core. With fewer CPUs than
// ranks, ranks share CPUs round-robin (one CPU each).
std::vector<int32_t> cpu_share(const std::vector<int32_t>& allowed, int local_rank, int local_size);

}  // namespace courier
