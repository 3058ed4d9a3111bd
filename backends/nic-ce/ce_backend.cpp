#include "ce_backend.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "ce_error.hpp"
#include "gpu/rank_device.hpp"

namespace courier::nic_ce {

namespace {

// The GPU this process uses: the one the core chose, from the host
// services (gpu/rank_device.hpp). A Context chooses before any NIC
// backend's init, so -EAGAIN means the backend was opened outside one
// (courier-info, tests): device 0 then.
int choose_device(const courier_host_services_v1* host, int count, int* device) {
  const courier::device::RankDevice rank = courier::device::rank_device(host, count, "CUDA");
  if (rank.status == -EAGAIN) {
    *device = 0;
    return 0;
  }
  if (rank.status != 0) return set_error(rank.status, rank.error);
  *device = rank.device;
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

constexpr uint32_t kAtomics = COURIER_NIC_ATOMIC_ADD_U64 | COURIER_NIC_ATOMIC_FETCH_ADD_U64 |
                              COURIER_NIC_ATOMIC_CAS_U64 | COURIER_NIC_ATOMIC_ADD_U32 |
                              COURIER_NIC_ATOMIC_FETCH_ADD_U32 | COURIER_NIC_ATOMIC_CAS_U32;

}  // namespace

// One plugin of this family: its traits say nothing create() needs.
int Backend::create(const BackendTraits& /*traits*/, const courier_host_services_v1* host,
                    std::unique_ptr<Backend>* out) {
  if (host == nullptr) return set_error(-EINVAL, "init: NULL host services");
  int count = 0;
  cudaError_t rc = cudaGetDeviceCount(&count);
  if (rc != cudaSuccess || count == 0) {
    std::string why = rc != cudaSuccess
                          ? std::string(cudaGetErrorString(rc)) + " (" + cudaGetErrorName(rc) + ")"
                          : "the CUDA driver reports no device";
    return set_error(-ENODEV,
                     "no CUDA device: " + why + "; nic-ce moves data with GPU copy engines");
  }
  std::unique_ptr<Backend> b(new Backend());
  if (int status = choose_device(host, count, &b->device_); status != 0) return status;
  if (int status = read_switch(host, "COURIER_CE_BATCH", &b->batch_copies_); status != 0) {
    return status;
  }
  if (int status = read_switch(host, "COURIER_CE_TRACE", &b->trace_); status != 0) return status;
  if (int status = read_microseconds(host, "COURIER_CE_LINGER_US", &b->linger_ns_); status != 0) {
    return status;
  }
  cudaDeviceProp props{};
  if (cudaGetDeviceProperties(&props, b->device_) == cudaSuccess) {
    b->device_name_ = "ce:cuda" + std::to_string(b->device_) + " " + props.name;
  }
  cudaDeviceGetPCIBusId(b->pci_address_, sizeof b->pci_address_, b->device_);
  warn_if_lazy_loading(host);
  *out = std::move(b);
  return 0;
}

int Backend::query(courier_nic_props_v1* props) const {
  if (props == nullptr) return set_error(-EINVAL, "query: NULL argument");
  const size_t size = props->struct_size;
  if (size < offsetof(courier_nic_props_v1, caps_with_atomics)) {
    return set_error(-EINVAL, "query: props->struct_size is smaller than ABI 1.0's props");
  }
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
  std::snprintf(p.device, sizeof p.device, "%s", device_name_.c_str());
  std::snprintf(p.pci_address, sizeof p.pci_address, "%s", pci_address_);
  p.caps_with_atomics = p.caps;
  std::memcpy(props, &p, p.struct_size);
  return 0;
}

// nic/plugin_entries.hpp checked attr's size and flags.
int Backend::open_endpoint(const courier_nic_ep_attr_v1& attr,
                           std::unique_ptr<Endpoint>* out) const {
  EndpointOptions options;
  options.device = device_;
  options.mappings = &mappings_;
  options.batch_copies = batch_copies_;
  options.trace = trace_;
  options.linger_ns = linger_ns_;
  options.tx_depth = attr.tx_depth == 0 ? 256 : attr.tx_depth;
  options.atomics = (attr.flags & COURIER_NIC_EP_ATOMICS) != 0;
  return Endpoint::open(options, out);
}

}  // namespace courier::nic_ce
