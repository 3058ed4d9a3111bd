// The C entry points of every libfabric-based NIC plugin (courier/abi/nic_v1.h)
// and the plugin struct built from them.
//
// Each entry turns the opaque handles back into C++ objects (Backend,
// Endpoint, MemoryRegion) and calls them; nothing C++ (exceptions included)
// crosses back. The data path, post_write, post_atomic and poll, goes
// straight through. Only init depends on the plugin (its BackendTraits);
// a plugin file declares its traits and knobs and exports
//
//     constexpr courier_nic_plugin_v1 kPlugin = ofi::make_nic_plugin<kTraits>(kKnobs);
//     extern "C" const courier_nic_plugin_v1* courier_nic_backend_v1(void) { return &kPlugin; }
#pragma once

#include <courier/abi/nic_v1.h>

#include <cstddef>
#include <cstdint>

#include "ofi_backend.hpp"

namespace courier::ofi::entries {

// init for the plugin with `traits`; the template below binds it.
int init_with(const BackendTraits& traits, const courier_host_services_v1* host, void** backend);

template <const BackendTraits& kTraits>
int init(const courier_host_services_v1* host, void** backend) {
  return init_with(kTraits, host, backend);
}

void fini(void* backend);
const char* last_error(void* backend);
int query(void* backend, courier_nic_props_v1* props);
int ep_open(void* backend, const courier_nic_ep_attr_v1* attr, void** ep);
int ep_close(void* ep);
int ep_name(void* ep, void* buf, size_t* len);
int ep_connect(void* ep, uint32_t num_peers, const void* names, size_t stride);
int mr_register(void* ep, void* addr, size_t len, uint32_t mem_kind, void** mr,
                courier_nic_rkey_v1* rkey);
int mr_deregister(void* mr);
int post_write(void* ep, const courier_nic_write_v1* write);
int poll(void* ep, courier_nic_completion_v1* out, uint32_t max);
int post_atomic(void* ep, const courier_nic_atomic_v1* atomic);
int describe(void* backend, char* buf, size_t* len);

}  // namespace courier::ofi::entries

namespace courier::ofi {

// The plugin struct of the backend with `kTraits` and `knobs`. A plugin
// that may not offer atomics has no post_atomic entry (the ABI's way to say
// "no atomics").
template <const BackendTraits& kTraits, size_t kNumKnobs>
constexpr courier_nic_plugin_v1 make_nic_plugin(const courier_knob_v1 (&knobs)[kNumKnobs]) {
  // Entries a later ABI minor appends stay NULL ("absent") until these
  // plugins implement them (every entry up to minor 2 is here).
  courier_nic_plugin_v1 plugin{};
  plugin.header = {sizeof(courier_nic_plugin_v1), COURIER_NIC_ABI_MAJOR, COURIER_NIC_ABI_MINOR,
                   kTraits.name};
  plugin.description = kTraits.description;
  plugin.knobs = knobs;
  plugin.num_knobs = static_cast<uint32_t>(kNumKnobs);
  plugin.init = &entries::init<kTraits>;
  plugin.fini = &entries::fini;
  plugin.last_error = &entries::last_error;
  plugin.query = &entries::query;
  plugin.ep_open = &entries::ep_open;
  plugin.ep_close = &entries::ep_close;
  plugin.ep_name = &entries::ep_name;
  plugin.ep_connect = &entries::ep_connect;
  plugin.mr_register = &entries::mr_register;
  plugin.mr_deregister = &entries::mr_deregister;
  plugin.post_write = &entries::post_write;
  plugin.poll = &entries::poll;
  plugin.post_atomic = kTraits.may_offer_atomics ? &entries::post_atomic : nullptr;
  plugin.describe = &entries::describe;
  return plugin;
}

}  // namespace courier::ofi
