// libcourier-nic-skeleton.so: the plugin entry point, the C boundary.
//
// The core finds this file by its name, calls courier_nic_backend_v1() and
// from then on only the entries of the struct below. Each entry turns the
// opaque handles back into C++ objects (Backend, Endpoint, MemoryRegion),
// checks its arguments and returns a status; no exception crosses back.
//
// To start a backend for your NIC: copy this folder, rename "skeleton"
// (the file name, the struct's name, the knobs), and replace, file by file:
//   skeleton_backend.cpp   init: open your device, fill the props it really has
//   skeleton_endpoint.cpp  ep_open/connect: queue pairs; mr_register: the NIC's MMU
//   skeleton_link.cpp      post_write/poll: work requests and the completion queue
// skeleton_socket.cpp and skeleton_wire.hpp then go: your NIC carries the bytes.
#include <courier/abi/nic_v1.h>

#include <cerrno>
#include <exception>
#include <memory>
#include <new>

#include "skeleton_backend.hpp"
#include "skeleton_endpoint.hpp"
#include "skeleton_error.hpp"

namespace courier::skeleton {
namespace {

// Entries allocate (containers, strings); a failure must become a status,
// not an exception escaping into C.
template <typename F>
int guarded(const char* what, F&& body) {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return fail(-ENOMEM, "%s: out of memory", what);
  } catch (const std::exception& e) {
    return fail(-EIO, "%s: %s", what, e.what());
  }
}

Endpoint* as_endpoint(void* ep) { return static_cast<Endpoint*>(ep); }

// Probe the device and open the backend; fail fast with a reason the
// registry can print (last_error(NULL)).
int plugin_init(const courier_host_services_v1* host, void** backend) {
  return guarded("init", [&] {
    if (!backend) return fail(-EINVAL, "init: NULL backend output");
    std::unique_ptr<Backend> created;
    if (const int rc = Backend::create(host, &created); rc != 0) return rc;
    *backend = created.release();
    return 0;
  });
}

// Every endpoint and registration is closed by now: close the device.
void plugin_fini(void* backend) { delete static_cast<Backend*>(backend); }

const char* plugin_last_error(void* /*backend*/) { return last_error(); }

// What the NIC can do, once, after init; the core decides everything from it.
int plugin_query(void* backend, courier_nic_props_v1* props) {
  if (!backend) return fail(-EINVAL, "query: NULL backend");
  return static_cast<Backend*>(backend)->query(props);
}

// Create the queue pairs and the completion queue of one endpoint.
int plugin_ep_open(void* backend, const courier_nic_ep_attr_v1* attr, void** ep) {
  return guarded("ep_open", [&] {
    if (!backend || !attr || !ep) return fail(-EINVAL, "ep_open: NULL argument");
    if (attr->struct_size < sizeof(courier_nic_ep_attr_v1)) {
      return fail(-EINVAL, "ep_open: attr->struct_size %u is too small", attr->struct_size);
    }
    if (attr->flags & COURIER_NIC_EP_ATOMICS) {
      return fail(-EINVAL,
                  "ep_open: this backend carries out no atomics (COURIER_NIC_EP_ATOMICS); "
                  "the core emulates them over immediate data");
    }
    if (attr->flags != 0) return fail(-EINVAL, "ep_open: unknown flags 0x%x", attr->flags);
    std::unique_ptr<Endpoint> endpoint;
    if (const int rc = Endpoint::open(*static_cast<Backend*>(backend), *attr, &endpoint); rc != 0) {
      return rc;
    }
    *ep = endpoint.release();
    return 0;
  });
}

// Destroy the queue pairs; writes still in flight are dropped.
int plugin_ep_close(void* ep) {
  if (!ep) return fail(-EINVAL, "ep_close: NULL endpoint");
  Endpoint* endpoint = as_endpoint(ep);
  // Regions point at their endpoint: closing under them would leave them
  // dangling (the core deregisters first).
  if (endpoint->registered_regions() > 0) {
    return fail(-EBUSY, "ep_close: %zu memory regions are still registered",
                endpoint->registered_regions());
  }
  delete endpoint;
  return 0;
}

// The address peers need to reach this endpoint (verbs: GID and QP number).
int plugin_ep_name(void* ep, void* buf, size_t* len) {
  if (!ep) return fail(-EINVAL, "ep_name: NULL endpoint");
  return as_endpoint(ep)->name(buf, len);
}

// Every rank's address, index = rank: connect the queue pairs.
int plugin_ep_connect(void* ep, uint32_t num_peers, const void* names, size_t stride) {
  return guarded("ep_connect", [&] {
    if (!ep) return fail(-EINVAL, "ep_connect: NULL endpoint");
    return as_endpoint(ep)->connect(num_peers, names, stride);
  });
}

// Register memory with the NIC's MMU (pin it, load its translation) and
// return the key peers write with.
int plugin_mr_register(void* ep, void* addr, size_t len, uint32_t mem_kind, void** mr,
                       courier_nic_rkey_v1* rkey) {
  return guarded("mr_register", [&] {
    if (!ep || !mr) return fail(-EINVAL, "mr_register: NULL endpoint or output");
    MemoryRegion* region = nullptr;
    if (const int rc = as_endpoint(ep)->register_memory(addr, len, mem_kind, &region, rkey);
        rc != 0) {
      return rc;
    }
    *mr = region;
    return 0;
  });
}

// Remove the registration from the NIC's MMU.
int plugin_mr_deregister(void* mr) {
  if (!mr) return fail(-EINVAL, "mr_deregister: NULL region");
  auto* region = static_cast<MemoryRegion*>(mr);
  return region->owner->deregister_memory(region);
}

// Post the work request (RDMA write, with immediate data on request) and
// ring the doorbell. Never blocks: -EAGAIN when the send queue is full.
int plugin_post_write(void* ep, const courier_nic_write_v1* write) {
  return guarded("post_write", [&] {
    if (!ep || !write) return fail(-EINVAL, "post_write: NULL endpoint or write");
    return as_endpoint(ep)->post_write(*write);
  });
}

// Read the completion queue: TX completions of our writes, RX_IMM
// notifications of peers' writes with immediate data.
int plugin_poll(void* ep, courier_nic_completion_v1* out, uint32_t max) {
  return guarded("poll", [&] {
    if (!ep) return fail(-EINVAL, "poll: NULL endpoint");
    return as_endpoint(ep)->poll(out, max);
  });
}

const courier_knob_v1 kKnobs[] = {
    {kMaxMsgSizeKnob, kMaxMsgSizeDefault, kMaxMsgSizeAllowed,
     "largest single write in bytes (max_msg_size); a NIC reports its hardware limit"},
    {kSocketBufferKnob, kSocketBufferDefault, kSocketBufferAllowed,
     "send and receive buffer of each stream in bytes, 0 for the system's default"},
};

// The devices this backend drives (ABI 1.3), so that topology chooses it
// for the GPUs paired with one, with no change to Courier: the name the
// kernel driver gives its RDMA devices without the index (skeleton_nic0 ->
// "skeleton_nic"), and the PCI vendor and device IDs (also how a device is
// known under a name rdma-core derived from its PCI path). Both are made up
// here: put your NIC's. The recorded machine
// tests/topology/fixtures/vendor-nic.xml has such a device.
constexpr courier_nic_claim_v1 kClaims[] = {
    {.driver = "skeleton_nic", .pci_vendor = 0, .pci_device = 0, .flags = 0},
    {.driver = nullptr, .pci_vendor = 0x5e1e, .pci_device = 0x0001, .flags = 0},
};

// Built field by field from an all-NULL struct: an entry a later ABI minor
// adds stays NULL ("absent") when this file is compiled against newer
// headers, and the core reads nothing beyond header.struct_size.
constexpr courier_nic_plugin_v1 make_plugin() {
  courier_nic_plugin_v1 plugin{};
  plugin.header = {sizeof(courier_nic_plugin_v1), COURIER_NIC_ABI_MAJOR, COURIER_NIC_ABI_MINOR,
                   "skeleton"};  // the name must match the file: libcourier-nic-skeleton.so
  plugin.description =
      "example NIC backend over AF_UNIX streams between processes of one host (a template for "
      "new NIC backends)";
  plugin.knobs = kKnobs;
  plugin.num_knobs = sizeof kKnobs / sizeof kKnobs[0];
  // ABI 1.0: every entry is required.
  plugin.init = plugin_init;
  plugin.fini = plugin_fini;
  plugin.last_error = plugin_last_error;
  plugin.query = plugin_query;
  plugin.ep_open = plugin_ep_open;
  plugin.ep_close = plugin_ep_close;
  plugin.ep_name = plugin_ep_name;
  plugin.ep_connect = plugin_ep_connect;
  plugin.mr_register = plugin_mr_register;
  plugin.mr_deregister = plugin_mr_deregister;
  plugin.post_write = plugin_post_write;
  plugin.poll = plugin_poll;
  // ABI 1.1: post_atomic stays NULL: no atomics (atomic_ops == 0), the core
  // emulates them over immediate data and the conformance suite skips them.
  // ABI 1.2: describe stays NULL: nothing to add to courier-info's report.
  // ABI 1.3: the devices it claims.
  plugin.claims = kClaims;
  plugin.num_claims = sizeof kClaims / sizeof kClaims[0];
  return plugin;
}

constexpr courier_nic_plugin_v1 kPlugin = make_plugin();

}  // namespace
}  // namespace courier::skeleton

extern "C" __attribute__((visibility("default"))) const courier_nic_plugin_v1*
courier_nic_backend_v1(void) {
  return &courier::skeleton::kPlugin;
}
