// How this rank carries out each atomic op (docs/semantics.md, "Atomic
// strategies"): from COURIER_ATOMICS and the NIC backend's capabilities.
// Every rank computes the same from the same configuration (the job-shape
// check makes sure).
#pragma once

#include "core/backend_instance.hpp"
#include "core/config.hpp"
#include "core/log.hpp"
#include "core/semantics/semantic_transport.hpp"

namespace courier {

struct AtomicStrategies {
  AtomicStrategyKind add_u64 = AtomicStrategyKind::none;
  AtomicStrategyKind add_u32 = AtomicStrategyKind::none;
  bool uses(AtomicStrategyKind kind) const { return add_u64 == kind || add_u32 == kind; }
};

// Throws, naming COURIER_ATOMICS and the backend, when the mode asks for
// what the NIC cannot do.
AtomicStrategies choose_atomic_strategies(const Config& config, const NicBackend& nic, Logger& log);

}  // namespace courier
