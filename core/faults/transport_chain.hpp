// The transport a proxy thread drives:
//   ProxyThread -> RetryingTransport -> [FaultInjectingTransport] -> endpoint
// The fault decorator is there only when COURIER_FAULTS asks for a fault, and
// sits below the retries so that injected transient failures are retried
// like real ones.
#pragma once

#include <cstdint>
#include <memory>

#include "core/config.hpp"
#include "core/log.hpp"
#include "core/proxy/job_failure.hpp"
#include "core/proxy/proxy_transport.hpp"

namespace courier {

// The outermost decorator; it owns the decorators below it, not `endpoint`,
// which must outlive it, as must `failure` (may be null): once it tripped,
// the retries stop (RetryingTransport::watch_failure).
std::unique_ptr<ProxyTransport> make_transport_chain(ProxyTransport& endpoint, const Config& config,
                                                     uint32_t thread_index, Logger& log,
                                                     const JobFailure* failure = nullptr);

}  // namespace courier
