#include "core/atomic_policy.hpp"

#include "core/check.hpp"

namespace courier {

AtomicStrategies choose_atomic_strategies(const Config& config, const NicBackend& nic,
                                          Logger& log) {
  const courier_nic_props_v1& props = nic.props();
  const bool imm_possible = (props.caps & COURIER_NIC_CAP_WRITE_IMM) != 0 &&
                            (props.caps & COURIER_NIC_CAP_IMM_SOURCE) != 0 && props.imm_bytes >= 4;
  auto choose = [&](uint32_t op) {
    const bool offered = (props.atomic_ops & op) != 0;
    const bool native = (props.atomic_native & op) != 0;
    switch (config.atomics) {
      case AtomicsMode::hw:
      case AtomicsMode::provider:
        if (!offered) {
          fail("COURIER_ATOMICS={} but NIC backend '{}' ({}) carries out no {}; use imm or auto",
               to_string(config.atomics), nic.plugin().name, props.device,
               courier_nic_atomic_name(op));
        }
        return AtomicStrategyKind::hw;
      case AtomicsMode::imm:
        if (!imm_possible) {
          fail(
              "COURIER_ATOMICS=imm but NIC backend '{}' ({}) cannot carry 4 bytes of "
              "immediate data with the sender's identity; use hw or auto",
              nic.plugin().name, props.device);
        }
        return AtomicStrategyKind::imm;
      case AtomicsMode::automatic:
        if (native) return AtomicStrategyKind::hw;
        if (imm_possible) return AtomicStrategyKind::imm;
        return offered ? AtomicStrategyKind::hw : AtomicStrategyKind::none;
    }
    return AtomicStrategyKind::none;
  };
  AtomicStrategies chosen;
  chosen.add_u64 = choose(COURIER_NIC_ATOMIC_ADD_U64);
  chosen.add_u32 = choose(COURIER_NIC_ATOMIC_ADD_U32);
  log.info("context", "atomics: ADD_U64 by {}, ADD_U32 by {} (COURIER_ATOMICS={})",
           to_string(chosen.add_u64), to_string(chosen.add_u32), to_string(config.atomics));
  return chosen;
}

}  // namespace courier
