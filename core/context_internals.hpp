// What core code outside context.cpp (the EP layer) needs from a Context:
// its GPU and NIC backends, its device, its configuration, how many hosts the job
// spans, its log, and a way to declare the job failed. Not part of the public API.
#pragma once

#include <cstddef>
#include <string>

#include "core/backend_instance.hpp"
#include "core/config.hpp"
#include "core/log.hpp"
#include "courier/context.hpp"

namespace courier {

struct ContextInternals {
  static const GpuBackend& gpu(const Context& context);
  static const NicBackend& nic(const Context& context);
  static int device(const Context& context);
  static const Config& config(const Context& context);
  static size_t hosts(const Context& context);
  static Logger& log(Context& context);
  // How long a wait on what the proxies deliver may last (nanoseconds):
  // COURIER_TIMEOUT_S and a second more, as the channels' producers wait, so
  // that a stalled proxy's diagnosis (which may wait for another rank's,
  // ProxyOptions::stall_tie_wait_ns) names the rank first.
  static uint64_t proxy_wait_ns(const Context& context);
  // Makes `what` the job's failure, naming `suspect` (as a proxy thread's
  // stall report does): every rank learns it, this rank's channels fail.
  static void report_failure(Context& context, int suspect, const std::string& what);
};

}  // namespace courier
