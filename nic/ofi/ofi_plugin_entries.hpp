// The plugin struct of every libfabric-based NIC plugin (nic-ofi, nic-efa):
// the shared C entry points (nic/plugin_entries.hpp) over this family's
// objects. Only init depends on the plugin (its BackendTraits); a plugin file
// declares its traits and knobs and exports
//
//     constexpr courier_nic_plugin_v1 kPlugin = ofi::make_nic_plugin<kTraits>(kKnobs);
//     extern "C" const courier_nic_plugin_v1* courier_nic_backend_v1(void) { return &kPlugin; }
#pragma once

#include <courier/abi/nic_v1.h>

#include <cstddef>
#include <string>

#include "nic/plugin_entries.hpp"
#include "ofi_backend.hpp"
#include "ofi_ep.hpp"
#include "ofi_error.hpp"
#include "ofi_mr.hpp"

namespace courier::ofi {

// What nic/plugin_entries.hpp needs to know of this family.
struct PluginFamily {
  using Traits = BackendTraits;
  using Backend = ofi::Backend;
  using Endpoint = ofi::Endpoint;
  using MemoryRegion = ofi::MemoryRegion;
  static constexpr auto set_error = &ofi::set_error;
  static constexpr auto last_error = &ofi::last_error;
};

// The plugin struct of the backend with `kTraits` and `knobs`. A plugin
// that may not offer atomics has no post_atomic entry.
template <const BackendTraits& kTraits, size_t kNumKnobs>
constexpr courier_nic_plugin_v1 make_nic_plugin(const courier_knob_v1 (&knobs)[kNumKnobs]) {
  return nic::make_plugin_struct<PluginFamily, kTraits>(
      kTraits.description, knobs, kNumKnobs,
      kTraits.may_offer_atomics ? nic::Atomics::offered : nic::Atomics::none);
}

}  // namespace courier::ofi
