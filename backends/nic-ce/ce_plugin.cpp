// libcourier-nic-ce.so: a NIC backend for ranks that share a host, moving
// data with GPU copy engines (CUDA IPC peer copies) and host-side messages
// in shared memory. It lets the whole GPU -> FIFO -> proxy -> transport ->
// remote GPU path run on a multi-GPU host without an RDMA NIC.
//
// This file is the C boundary: it turns the opaque handles into
// nic_ce::Endpoint and LocalRegion and keeps exceptions from crossing.
#include <courier/abi/nic_v1.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <string>

#include "ce_endpoint.hpp"
#include "ce_error.hpp"

namespace courier::nic_ce {
namespace {

struct Backend {
  int device = 0;
  bool batch_copies = true;   // COURIER_CE_BATCH
  bool trace = false;         // COURIER_CE_TRACE
  uint64_t linger_ns = 3000;  // COURIER_CE_LINGER_US
  IpcMappings mappings;       // closed after every endpoint (fini comes last)
  std::string device_name;
  char pci_address[32] = {};
};

template <typename F>
int guarded(const char* what, F&& body) {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return set_error(-ENOMEM, std::string(what) + ": out of memory");
  } catch (const std::exception& e) {
    return set_error(-EIO, std::string(what) + ": " + e.what());
  }
}

// The GPU this process uses, chosen the way the core chooses it:
// COURIER_GPU_DEVICE, else the local rank modulo the device count.
int choose_device(const courier_host_services_v1* host, int count, int* device) {
  const char* forced = host->get_env(host->ctx, "COURIER_GPU_DEVICE");
  const char* local = host->get_env(host->ctx, "COURIER_LOCAL_RANK");
  if (forced != nullptr && *forced != '\0') {
    char* end = nullptr;
    long value = std::strtol(forced, &end, 10);
    if (*end != '\0' || value < 0 || value >= count) {
      return set_error(-EINVAL, "COURIER_GPU_DEVICE='" + std::string(forced) +
                                    "' is not one of the " + std::to_string(count) +
                                    " CUDA devices");
    }
    *device = static_cast<int>(value);
  } else {
    long rank = local != nullptr ? std::strtol(local, nullptr, 10) : 0;
    *device = static_cast<int>((rank < 0 ? 0 : rank) % count);
  }
  return 0;
}

// A 0|1 knob: unset or empty keeps *value; anything else fails naming it.
int read_switch(const courier_host_services_v1* host, const char* name, bool* value) {
  const char* text = host->get_env(host->ctx, name);
  if (text == nullptr || *text == '\0') return 0;
  const std::string given(text);
  if (given != "0" && given != "1") {
    return set_error(-EINVAL, std::string(name) + "='" + given + "' is invalid: expected 0 or 1");
  }
  *value = given == "1";
  return 0;
}

// A whole number of microseconds in [0, 1000]; unset or empty keeps *ns.
int read_microseconds(const courier_host_services_v1* host, const char* name, uint64_t* ns) {
  const char* text = host->get_env(host->ctx, name);
  if (text == nullptr || *text == '\0') return 0;
  char* end = nullptr;
  errno = 0;
  const unsigned long value = std::strtoul(text, &end, 10);
  if (errno != 0 || *end != '\0' || text[0] == '-' || value > 1000) {
    return set_error(-EINVAL, std::string(name) + "='" + text +
                                  "' is invalid: expected whole microseconds from 0 to 1000");
  }
  *ns = uint64_t{value} * 1000;
  return 0;
}

// The copies of this backend are GPU work. With CUDA's lazy module loading
// (the driver's default since CUDA 12.2), a kernel launched for the first
// time, by Courier or by the application, loads its module, and loading
// waits for the kernels running then: a Courier kernel that waits for this
// backend's copies holds them up until COURIER_TIMEOUT_S (seen on an H200:
// the first low-latency calls of a torch program stalled; with
// CUDA_MODULE_LOADING=EAGER they passed). A NIC's writes do not depend on
// the GPU, so only this backend says so.
// Once per process (the loading mode is the process's), not per Context.
void warn_if_lazy_loading(const courier_host_services_v1* host) {
  const char* mode = std::getenv("CUDA_MODULE_LOADING");
  if ((mode != nullptr && std::strcmp(mode, "EAGER") == 0) || host->log == nullptr) return;
  static std::once_flag warned;
  std::call_once(warned, [host] {
    host->log(host->ctx, COURIER_LOG_WARN, "ce",
              "CUDA_MODULE_LOADING is not EAGER: a kernel loaded for the first time while a "
              "Courier kernel waits for this backend's copies stalls them until "
              "COURIER_TIMEOUT_S; set CUDA_MODULE_LOADING=EAGER before the process starts "
              "(docs/nic-ce.md)");
  });
}

int plugin_init(const courier_host_services_v1* host, void** backend) {
  return guarded("init", [&] {
    if (host == nullptr || backend == nullptr) return set_error(-EINVAL, "init: NULL argument");
    int count = 0;
    cudaError_t rc = cudaGetDeviceCount(&count);
    if (rc != cudaSuccess || count == 0) {
      std::string why = rc != cudaSuccess ? std::string(cudaGetErrorString(rc)) + " (" +
                                                cudaGetErrorName(rc) + ")"
                                          : "the CUDA driver reports no device";
      return set_error(-ENODEV,
                       "no CUDA device: " + why + "; nic-ce moves data with GPU copy engines");
    }
    auto b = std::make_unique<Backend>();
    if (int status = choose_device(host, count, &b->device); status != 0) return status;
    if (int status = read_switch(host, "COURIER_CE_BATCH", &b->batch_copies); status != 0) {
      return status;
    }
    if (int status = read_switch(host, "COURIER_CE_TRACE", &b->trace); status != 0) return status;
    if (int status = read_microseconds(host, "COURIER_CE_LINGER_US", &b->linger_ns); status != 0) {
      return status;
    }
    cudaDeviceProp props{};
    if (cudaGetDeviceProperties(&props, b->device) == cudaSuccess) {
      b->device_name = "ce:cuda" + std::to_string(b->device) + " " + props.name;
    }
    cudaDeviceGetPCIBusId(b->pci_address, sizeof b->pci_address, b->device);
    warn_if_lazy_loading(host);
    *backend = b.release();
    return 0;
  });
}

void plugin_fini(void* backend) { delete static_cast<Backend*>(backend); }

const char* plugin_last_error(void*) { return last_error(); }

constexpr uint32_t kAtomics = COURIER_NIC_ATOMIC_ADD_U64 | COURIER_NIC_ATOMIC_FETCH_ADD_U64 |
                              COURIER_NIC_ATOMIC_CAS_U64 | COURIER_NIC_ATOMIC_ADD_U32 |
                              COURIER_NIC_ATOMIC_FETCH_ADD_U32 | COURIER_NIC_ATOMIC_CAS_U32;

int plugin_query(void* backend, courier_nic_props_v1* props) {
  if (backend == nullptr || props == nullptr) return set_error(-EINVAL, "query: NULL argument");
  const size_t size = props->struct_size;
  if (size < offsetof(courier_nic_props_v1, caps_with_atomics)) {
    return set_error(-EINVAL, "query: props->struct_size is smaller than ABI 1.0's props");
  }
  const auto& b = *static_cast<Backend*>(backend);
  courier_nic_props_v1 p{};
  p.struct_size = static_cast<uint32_t>(std::min(size, sizeof p));
  p.caps = COURIER_NIC_CAP_RMA_WRITE | COURIER_NIC_CAP_WRITE_IMM | COURIER_NIC_CAP_ORDERED_WRITES |
           COURIER_NIC_CAP_DELIVERY_COMPLETE | COURIER_NIC_CAP_IMM_SOURCE |
           COURIER_NIC_CAP_LOOPBACK | COURIER_NIC_CAP_HOST_LOCAL |
           COURIER_NIC_CAP_CHEAP_REGISTRATION;  // a registration records an address
  // The GPU executes every atomic itself (system-scope atomics over NVLink).
  p.atomic_ops = kAtomics;
  p.atomic_native = kAtomics;
  p.imm_bytes = 4;
  p.mem_kinds = COURIER_MEM_HOST | COURIER_MEM_CUDA;
  p.max_msg_size = uint64_t{1} << 31;
  p.max_ep_name = sizeof(EndpointName);
  p.latency_ns = 8000;
  p.bandwidth_mbps = 400000;
  std::snprintf(p.device, sizeof p.device, "%s", b.device_name.c_str());
  std::snprintf(p.pci_address, sizeof p.pci_address, "%s", b.pci_address);
  p.caps_with_atomics = p.caps;
  std::memcpy(props, &p, p.struct_size);
  return 0;
}

Endpoint* as_endpoint(void* ep) { return static_cast<Endpoint*>(ep); }

int plugin_ep_open(void* backend, const courier_nic_ep_attr_v1* attr, void** ep) {
  return guarded("ep_open", [&] {
    if (backend == nullptr || attr == nullptr || ep == nullptr) {
      return set_error(-EINVAL, "ep_open: NULL argument");
    }
    if (attr->struct_size < sizeof(courier_nic_ep_attr_v1)) {
      return set_error(-EINVAL, "ep_open: attr->struct_size is too small");
    }
    if ((attr->flags & ~uint32_t{COURIER_NIC_EP_ATOMICS}) != 0) {
      return set_error(-EINVAL, "ep_open: unknown flags");
    }
    EndpointOptions options;
    options.device = static_cast<Backend*>(backend)->device;
    options.mappings = &static_cast<Backend*>(backend)->mappings;
    options.batch_copies = static_cast<Backend*>(backend)->batch_copies;
    options.trace = static_cast<Backend*>(backend)->trace;
    options.linger_ns = static_cast<Backend*>(backend)->linger_ns;
    options.tx_depth = attr->tx_depth == 0 ? 256 : attr->tx_depth;
    options.atomics = (attr->flags & COURIER_NIC_EP_ATOMICS) != 0;
    std::unique_ptr<Endpoint> endpoint;
    if (int rc = Endpoint::open(options, &endpoint); rc != 0) return rc;
    *ep = endpoint.release();
    return 0;
  });
}

int plugin_ep_close(void* ep) {
  delete as_endpoint(ep);
  return 0;
}

int plugin_ep_name(void* ep, void* buf, size_t* len) {
  if (ep == nullptr) return set_error(-EINVAL, "ep_name: NULL endpoint");
  return as_endpoint(ep)->name(buf, len);
}

int plugin_ep_connect(void* ep, uint32_t num_peers, const void* names, size_t stride) {
  return guarded("ep_connect", [&] {
    if (ep == nullptr) return set_error(-EINVAL, "ep_connect: NULL endpoint");
    return as_endpoint(ep)->connect(num_peers, names, stride);
  });
}

int plugin_mr_register(void* ep, void* addr, size_t len, uint32_t mem_kind, void** mr,
                       courier_nic_rkey_v1* rkey) {
  return guarded("mr_register", [&] {
    if (ep == nullptr) return set_error(-EINVAL, "mr_register: NULL endpoint");
    LocalRegion* region = nullptr;
    int rc = as_endpoint(ep)->register_region(addr, len, mem_kind, &region, rkey);
    if (rc == 0 && mr != nullptr) *mr = region;
    return rc;
  });
}

int plugin_mr_deregister(void* mr) {
  if (mr == nullptr) return set_error(-EINVAL, "mr_deregister: NULL region");
  auto* region = static_cast<LocalRegion*>(mr);
  return region->owner->deregister(region);
}

int plugin_post_write(void* ep, const courier_nic_write_v1* write) {
  return guarded("post_write", [&] {
    if (ep == nullptr || write == nullptr) return set_error(-EINVAL, "post_write: NULL argument");
    return as_endpoint(ep)->post_write(*write);
  });
}

int plugin_poll(void* ep, courier_nic_completion_v1* out, uint32_t max) {
  return guarded("poll", [&] {
    if (ep == nullptr) return set_error(-EINVAL, "poll: NULL endpoint");
    return as_endpoint(ep)->poll(out, max);
  });
}

int plugin_post_atomic(void* ep, const courier_nic_atomic_v1* atomic) {
  return guarded("post_atomic", [&] {
    if (ep == nullptr || atomic == nullptr) return set_error(-EINVAL, "post_atomic: NULL argument");
    return as_endpoint(ep)->post_atomic(*atomic);
  });
}

constexpr courier_knob_v1 kKnobs[] = {
    {"COURIER_CE_BATCH", "1", "0|1",
     "1: the copies a poll finds queued go to the copy engines as batches (one driver call and "
     "one event each, cudaMemcpyBatchAsync where the CUDA runtime has it); 0: one "
     "cudaMemcpyAsync and one event per write"},
    {"COURIER_CE_LINGER_US", "3", "0..1000",
     "with batching: copies wait while writes were posted less than this many microseconds ago, "
     "so that a kernel's pieces of one region, pushed microseconds apart, merge into one copy; "
     "0 launches them at once"},
    {"COURIER_CE_TRACE", "0", "0|1",
     "1: when an endpoint closes, print to stderr how many copies carried its writes and a "
     "timeline of its last 256 launches (for tuning)"},
};

const courier_nic_plugin_v1 kPlugin = {
    {sizeof(courier_nic_plugin_v1), COURIER_NIC_ABI_MAJOR, COURIER_NIC_ABI_MINOR, "ce"},
    "GPU copy engines between the GPUs of one host (CUDA IPC), host messages in shared memory",
    kKnobs,
    sizeof kKnobs / sizeof kKnobs[0],
    0,
    plugin_init,
    plugin_fini,
    plugin_last_error,
    plugin_query,
    plugin_ep_open,
    plugin_ep_close,
    plugin_ep_name,
    plugin_ep_connect,
    plugin_mr_register,
    plugin_mr_deregister,
    plugin_post_write,
    plugin_poll,
    plugin_post_atomic,
    /* describe */ nullptr,  // no device of its own to report beyond the GPUs'
};

}  // namespace
}  // namespace courier::nic_ce

extern "C" __attribute__((visibility("default"))) const courier_nic_plugin_v1*
courier_nic_backend_v1(void) {
  return &courier::nic_ce::kPlugin;
}
