#include "core/faults/transport_chain.hpp"

#include "core/faults/fault_injecting_transport.hpp"
#include "core/proxy/retrying_transport.hpp"

namespace courier {

std::unique_ptr<ProxyTransport> make_transport_chain(ProxyTransport& endpoint, const Config& config,
                                                     uint32_t thread_index, Logger& log,
                                                     const JobFailure* failure) {
  RetryPolicy policy;
  policy.retries = config.retry_count;
  std::unique_ptr<RetryingTransport> retrying;
  if (!config.faults.active()) {
    retrying = std::make_unique<RetryingTransport>(endpoint, policy);
  } else {
    if (thread_index == 0) {
      log.warn("faults", "COURIER_FAULTS={}: injecting transport faults (for testing only)",
               config.faults.describe());
    }
    auto faults =
        std::make_unique<FaultInjectingTransport>(endpoint, config.faults, thread_index, &log);
    retrying = std::make_unique<RetryingTransport>(std::move(faults), policy);
  }
  retrying->watch_failure(failure);
  return retrying;
}

}  // namespace courier
