// Default CPU placement of a rank's proxy threads and host kernels, when
// neither COURIER_PROXY_CPUS nor the topology (core/proxy_placement.hpp)
// decides.
#pragma once

#include <cstddef>
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

// The CPUs to pin this rank's proxies and host kernels to, or none (leave
// placement to the kernel). Pins only when it is safe to assume Courier owns
// the partitioning: several ranks share the host, the process may use every
// online CPU (no launcher binding or cpuset already placed it), and there
// are at least as many CPUs as ranks. `online` is the number of online CPUs.
std::vector<int32_t> default_rank_cpus(const std::vector<int32_t>& allowed, size_t online,
                                       int local_rank, int local_size);

}  // namespace courier
