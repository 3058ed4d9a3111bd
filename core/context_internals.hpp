// What core code outside context.cpp (the EP layer) needs from a Context:
// its GPU and NIC backends, its device, its configuration, and how many hosts the job
// spans. Not part of the public API.
#pragma once

#include <cstddef>

#include "core/backend_instance.hpp"
#include "core/config.hpp"
#include "courier/context.hpp"

namespace courier {

struct ContextInternals {
  static const GpuBackend& gpu(const Context& context);
  static const NicBackend& nic(const Context& context);
  static int device(const Context& context);
  static const Config& config(const Context& context);
  static size_t hosts(const Context& context);
};

}  // namespace courier
