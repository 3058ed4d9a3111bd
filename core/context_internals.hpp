// What core code outside context.cpp (the EP layer) needs from a Context:
// its GPU backend and device. Not part of the public API.
#pragma once

#include "core/backend_instance.hpp"
#include "courier/context.hpp"

namespace courier {

struct ContextInternals {
  static const GpuBackend& gpu(const Context& context);
  static int device(const Context& context);
};

}  // namespace courier
