// What every rank must agree on before endpoints are paired: the NIC
// backend, its endpoint-name size, the proxy thread count and the atomic
// strategies. Collective; throws on every rank, naming the ranks and the
// variable to set, when they differ.
#pragma once

#include <cstdint>
#include <string>

#include "core/atomic_policy.hpp"
#include "courier/bootstrap.hpp"

namespace courier {

struct JobShape {
  std::string nic_backend;
  uint32_t ep_name_bytes = 0;
  uint32_t proxy_threads = 0;
  AtomicStrategies atomics;
};

void check_job_shape(Bootstrap& bootstrap, const JobShape& mine);

}  // namespace courier
