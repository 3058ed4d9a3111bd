// The C entry points of Courier's own NIC plugins (courier/abi/nic_v1.h),
// written once for every plugin family: nic/ofi (nic-ofi, nic-efa),
// nic/verbs (nic-cx7, nic-bnxt) and nic-ce. Each entry turns the opaque
// handles back into the family's C++ objects and calls them; nothing C++,
// exceptions included, crosses back into the core (nic::guarded).
//
// A family describes itself with a struct `F`:
//   F::Traits        what a plugin file declares (name, ...)
//   F::Backend       static create(traits, host, &unique_ptr), query(props),
//                    open_endpoint(attr, &unique_ptr<Endpoint>), and
//                    optionally describe(): without it the plugin has no
//                    describe entry (the ABI's "nothing to add")
//   F::Endpoint      name, connect, register_memory, registered_regions,
//                    deregister_memory, post_write, poll, post_atomic
//   F::MemoryRegion  owner(): the endpoint it was registered on
//   F::set_error     the family's printf-style error setter
//   F::last_error    the family's last error text
// and builds each plugin's struct with make_plugin_struct.
#pragma once

#include <courier/abi/nic_v1.h>

#include <cerrno>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "nic/describe_report.hpp"
#include "nic/entry_guard.hpp"

namespace courier::nic {

// A backend with a device report of its own (NIC ABI 1.2 describe).
template <class Backend>
concept DescribesDevice = requires(const Backend& backend) {
  { backend.describe() } -> std::convertible_to<std::string>;
};

template <class F>
struct PluginEntries {
  using Backend = typename F::Backend;
  using Endpoint = typename F::Endpoint;
  using MemoryRegion = typename F::MemoryRegion;

  template <typename Body>
  static int guarded(const char* what, Body&& body) {
    return nic::guarded<F::set_error>(what, std::forward<Body>(body));
  }
  static Endpoint* endpoint(void* ep) { return static_cast<Endpoint*>(ep); }
  static const Backend* backend_of(void* backend) { return static_cast<const Backend*>(backend); }

  // init bound to one plugin's traits (the ABI's init takes none).
  template <const typename F::Traits& kTraits>
  static int init(const courier_host_services_v1* host, void** backend) {
    return guarded("init", [&] {
      if (!backend) return F::set_error(-EINVAL, "init: NULL backend output");
      std::unique_ptr<Backend> created;
      const int rc = Backend::create(kTraits, host, &created);
      if (rc != 0) return rc;
      *backend = created.release();
      return 0;
    });
  }

  static void fini(void* backend) { delete static_cast<Backend*>(backend); }

  static const char* last_error(void* /*backend*/) { return F::last_error().c_str(); }

  static int query(void* backend, courier_nic_props_v1* props) {
    if (!backend) return F::set_error(-EINVAL, "query: NULL backend");
    return guarded("query", [&] { return backend_of(backend)->query(props); });
  }

  static int ep_open(void* backend, const courier_nic_ep_attr_v1* attr, void** ep) {
    return guarded("ep_open", [&] {
      if (!backend || !attr || !ep) return F::set_error(-EINVAL, "ep_open: NULL argument");
      if (attr->struct_size < sizeof(courier_nic_ep_attr_v1)) {
        return F::set_error(-EINVAL, "ep_open: attr->struct_size %u is too small",
                            attr->struct_size);
      }
      if (attr->flags & ~uint32_t{COURIER_NIC_EP_ATOMICS}) {
        return F::set_error(-EINVAL, "ep_open: unknown flags 0x%x", attr->flags);
      }
      std::unique_ptr<Endpoint> opened;
      const int rc = backend_of(backend)->open_endpoint(*attr, &opened);
      if (rc != 0) return rc;
      *ep = opened.release();
      return 0;
    });
  }

  static int ep_close(void* ep) {
    if (!ep) return F::set_error(-EINVAL, "ep_close: NULL endpoint");
    // A registered region keeps the endpoint's resources busy; closing under
    // it would fail half-way and leave the region dangling.
    if (endpoint(ep)->registered_regions() > 0) {
      return F::set_error(-EBUSY, "ep_close: %u memory regions are still registered",
                          endpoint(ep)->registered_regions());
    }
    delete endpoint(ep);
    return 0;
  }

  static int ep_name(void* ep, void* buf, size_t* len) {
    if (!ep) return F::set_error(-EINVAL, "ep_name: NULL endpoint");
    return guarded("ep_name", [&] { return endpoint(ep)->name(buf, len); });
  }

  static int ep_connect(void* ep, uint32_t num_peers, const void* names, size_t stride) {
    if (!ep) return F::set_error(-EINVAL, "ep_connect: NULL endpoint");
    return guarded("ep_connect", [&] { return endpoint(ep)->connect(num_peers, names, stride); });
  }

  static int mr_register(void* ep, void* addr, size_t len, uint32_t mem_kind, void** mr,
                         courier_nic_rkey_v1* rkey) {
    return guarded("mr_register", [&] {
      if (!ep || !mr) return F::set_error(-EINVAL, "mr_register: NULL endpoint or output");
      std::unique_ptr<MemoryRegion> region;
      const int rc = endpoint(ep)->register_memory(addr, len, mem_kind, &region, rkey);
      if (rc != 0) return rc;
      *mr = region.release();
      return 0;
    });
  }

  static int mr_deregister(void* mr) {
    if (!mr) return F::set_error(-EINVAL, "mr_deregister: NULL region");
    auto* region = static_cast<MemoryRegion*>(mr);
    // The ABI passes the region alone; it remembers its endpoint.
    return guarded("mr_deregister",
                   [&] { return endpoint(region->owner())->deregister_memory(region); });
  }

  // The data path is guarded too: a try block costs nothing until one throws.
  static int post_write(void* ep, const courier_nic_write_v1* write) {
    if (!ep || !write) return F::set_error(-EINVAL, "post_write: NULL endpoint or write");
    return guarded("post_write", [&] { return endpoint(ep)->post_write(*write); });
  }

  static int poll(void* ep, courier_nic_completion_v1* out, uint32_t max) {
    if (!ep) return F::set_error(-EINVAL, "poll: NULL endpoint");
    return guarded("poll", [&] { return endpoint(ep)->poll(out, max); });
  }

  static int post_atomic(void* ep, const courier_nic_atomic_v1* atomic) {
    if (!ep || !atomic) return F::set_error(-EINVAL, "post_atomic: NULL endpoint or atomic");
    return guarded("post_atomic", [&] { return endpoint(ep)->post_atomic(*atomic); });
  }

  static int describe(void* backend, char* buf, size_t* len) {
    return guarded("describe", [&] {
      if (!backend || !len) return F::set_error(-EINVAL, "describe: NULL backend or length");
      copy_report(backend_of(backend)->describe(), buf, len);
      return 0;
    });
  }
};

// Whether a plugin struct has a post_atomic entry (none: the ABI's way to
// say "no atomics").
enum class Atomics : bool { none = false, offered = true };

// The plugin struct of the plugin with `kTraits` in family F.
template <class F, const typename F::Traits& kTraits>
constexpr courier_nic_plugin_v1 make_plugin_struct(const char* description,
                                                   const courier_knob_v1* knobs, size_t num_knobs,
                                                   Atomics atomics) {
  using E = PluginEntries<F>;
  courier_nic_plugin_v1 plugin{};
  plugin.header = {sizeof(courier_nic_plugin_v1), COURIER_NIC_ABI_MAJOR, COURIER_NIC_ABI_MINOR,
                   kTraits.name};
  plugin.description = description;
  plugin.knobs = knobs;
  plugin.num_knobs = static_cast<uint32_t>(num_knobs);
  plugin.init = &E::template init<kTraits>;
  plugin.fini = &E::fini;
  plugin.last_error = &E::last_error;
  plugin.query = &E::query;
  plugin.ep_open = &E::ep_open;
  plugin.ep_close = &E::ep_close;
  plugin.ep_name = &E::ep_name;
  plugin.ep_connect = &E::ep_connect;
  plugin.mr_register = &E::mr_register;
  plugin.mr_deregister = &E::mr_deregister;
  plugin.post_write = &E::post_write;
  plugin.poll = &E::poll;
  plugin.post_atomic = atomics == Atomics::offered ? &E::post_atomic : nullptr;
  if constexpr (DescribesDevice<typename F::Backend>) {
    plugin.describe = &E::describe;
  } else {
    plugin.describe = nullptr;
  }
  return plugin;
}

}  // namespace courier::nic
