#include "verbs_plugin_entries.hpp"

#include <cerrno>
#include <memory>
#include <new>
#include <utility>

#include "nic/describe_report.hpp"
#include "nic/entry_guard.hpp"
#include "verbs_error.hpp"

namespace courier::verbs::entries {
namespace {

template <typename F>
int guarded(const char* what, F&& body) {
  return nic::guarded<&set_error>(what, std::forward<F>(body));
}

Endpoint* as_endpoint(void* ep) { return static_cast<Endpoint*>(ep); }

}  // namespace

int init(const BackendTraits& traits, const courier_host_services_v1* host, void** backend) {
  return guarded("init", [&] {
    if (!backend) return set_error(-EINVAL, "init: NULL backend output");
    std::unique_ptr<Backend> created;
    const int rc = Backend::create(traits, host, &created);
    if (rc != 0) return rc;
    *backend = created.release();
    return 0;
  });
}

void fini(void* backend) { delete static_cast<Backend*>(backend); }

const char* last_error(void* /*backend*/) { return verbs::last_error().c_str(); }

int query(void* backend, courier_nic_props_v1* props) {
  if (!backend) return set_error(-EINVAL, "query: NULL backend");
  return static_cast<Backend*>(backend)->query(props);
}

int ep_open(void* backend, const courier_nic_ep_attr_v1* attr, void** ep) {
  return guarded("ep_open", [&] {
    if (!backend || !attr || !ep) return set_error(-EINVAL, "ep_open: NULL argument");
    if (attr->struct_size < sizeof(courier_nic_ep_attr_v1)) {
      return set_error(-EINVAL, "ep_open: attr->struct_size %u is too small", attr->struct_size);
    }
    if (attr->flags & ~uint32_t{COURIER_NIC_EP_ATOMICS}) {
      return set_error(-EINVAL, "ep_open: unknown flags 0x%x", attr->flags);
    }
    std::unique_ptr<Endpoint> endpoint;
    const int rc = static_cast<Backend*>(backend)->open_endpoint(*attr, &endpoint);
    if (rc != 0) return rc;
    *ep = endpoint.release();
    return 0;
  });
}

int ep_close(void* ep) {
  if (!ep) return set_error(-EINVAL, "ep_close: NULL endpoint");
  Endpoint* endpoint = as_endpoint(ep);
  if (endpoint->registered_regions() > 0) {
    return set_error(-EBUSY, "ep_close: %u memory regions are still registered",
                     endpoint->registered_regions());
  }
  delete endpoint;
  return 0;
}

int ep_name(void* ep, void* buf, size_t* len) {
  if (!ep) return set_error(-EINVAL, "ep_name: NULL endpoint");
  return as_endpoint(ep)->name(buf, len);
}

int ep_connect(void* ep, uint32_t num_peers, const void* names, size_t stride) {
  return guarded("ep_connect", [&] {
    if (!ep) return set_error(-EINVAL, "ep_connect: NULL endpoint");
    return as_endpoint(ep)->connect(num_peers, names, stride);
  });
}

int mr_register(void* ep, void* addr, size_t len, uint32_t mem_kind, void** mr,
                courier_nic_rkey_v1* rkey) {
  return guarded("mr_register", [&] {
    if (!ep || !mr) return set_error(-EINVAL, "mr_register: NULL endpoint or output");
    std::unique_ptr<MemoryRegion> region;
    const int rc = as_endpoint(ep)->register_memory(addr, len, mem_kind, &region, rkey);
    if (rc != 0) return rc;
    *mr = region.release();
    return 0;
  });
}

int mr_deregister(void* mr) {
  if (!mr) return set_error(-EINVAL, "mr_deregister: NULL region");
  auto* region = static_cast<MemoryRegion*>(mr);
  return static_cast<Endpoint*>(region->owner())->deregister_memory(region);
}

// The data path builds error texts too; guarded() costs nothing until one throws.
int post_write(void* ep, const courier_nic_write_v1* write) {
  if (!ep || !write) return set_error(-EINVAL, "post_write: NULL endpoint or write");
  return guarded("post_write", [&] { return as_endpoint(ep)->post_write(*write); });
}

int poll(void* ep, courier_nic_completion_v1* out, uint32_t max) {
  if (!ep) return set_error(-EINVAL, "poll: NULL endpoint");
  return guarded("poll", [&] { return as_endpoint(ep)->poll(out, max); });
}

int post_atomic(void* ep, const courier_nic_atomic_v1* atomic) {
  if (!ep || !atomic) return set_error(-EINVAL, "post_atomic: NULL endpoint or atomic");
  return guarded("post_atomic", [&] { return as_endpoint(ep)->post_atomic(*atomic); });
}

int describe(void* backend, char* buf, size_t* len) {
  return guarded("describe", [&] {
    if (!backend || !len) return set_error(-EINVAL, "describe: NULL backend or length");
    nic::copy_report(static_cast<Backend*>(backend)->describe(), buf, len);
    return 0;
  });
}

}  // namespace courier::verbs::entries
