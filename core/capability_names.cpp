// Names for the capability and memory-kind bits of the plugin ABI, as
// courier-info and error messages print them.
#include <fmt/format.h>

#include <span>

#include "core/backend_instance.hpp"

namespace courier {

namespace {

struct BitName {
  uint32_t bit;
  const char* name;
};

// Bits this core does not know (a newer plugin minor) are shown by number
// instead of being dropped, so a listing never hides what a plugin claims.
std::vector<std::string> names_of(uint32_t bits, std::span<const BitName> table) {
  std::vector<std::string> names;
  for (const BitName& entry : table) {
    if ((bits & entry.bit) != 0) names.emplace_back(entry.name);
    bits &= ~entry.bit;
  }
  for (uint32_t bit = 0; bit < 32; ++bit) {
    if ((bits & (1u << bit)) != 0) names.push_back(fmt::format("bit{}", bit));
  }
  return names;
}

constexpr BitName kNicCaps[] = {
    {COURIER_NIC_CAP_RMA_WRITE, "rma_write"},
    {COURIER_NIC_CAP_WRITE_IMM, "write_imm"},
    {COURIER_NIC_CAP_ORDERED_WRITES, "ordered_writes"},
    {COURIER_NIC_CAP_DELIVERY_COMPLETE, "delivery_complete"},
    {COURIER_NIC_CAP_IMM_SOURCE, "imm_source"},
    {COURIER_NIC_CAP_LOOPBACK, "loopback"},
    {COURIER_NIC_CAP_PASSIVE_TARGET, "passive_target"},
    {COURIER_NIC_CAP_HOST_LOCAL, "host_local"},
    {COURIER_NIC_CAP_CHEAP_REGISTRATION, "cheap_registration"},
};

constexpr BitName kGpuCaps[] = {
    {COURIER_GPU_CAP_HOST_KERNELS, "host_kernels"},
    {COURIER_GPU_CAP_MAPPED_HOST, "mapped_host"},
    {COURIER_GPU_CAP_IPC, "ipc"},
    {COURIER_GPU_CAP_DMABUF, "dmabuf"},
    {COURIER_GPU_CAP_FIFO_KERNELS, "fifo_kernels"},
    {COURIER_GPU_CAP_GRAPHS, "graphs"},
    {COURIER_GPU_CAP_EP_KERNELS, "ep_kernels"},
    {COURIER_GPU_CAP_EP_DIRECT, "ep_direct"},
    {COURIER_GPU_CAP_EP_PROXY, "ep_proxy"},
    {COURIER_GPU_CAP_EP_FP8_POW2, "ep_fp8_pow2"},
    {COURIER_GPU_CAP_EP_LOGFMT, "ep_logfmt"},
    {COURIER_GPU_CAP_EP_FUSED, "ep_fused"},
    {COURIER_GPU_CAP_EP_LOCAL_ROWS, "ep_local_rows"},
    {COURIER_GPU_CAP_EP_HT_FUSED, "ep_ht_fused"},
    {COURIER_GPU_CAP_EP_COMBINE_FUSED, "ep_combine_fused"},
    {COURIER_GPU_CAP_EP_DONE_MARK, "ep_done_mark"},
};

constexpr BitName kMemoryKinds[] = {
    {COURIER_MEM_HOST, "host"},     {COURIER_MEM_CUDA, "cuda"}, {COURIER_MEM_ROCM, "rocm"},
    {COURIER_MEM_DMABUF, "dmabuf"}, {COURIER_MEM_ODP, "odp"},
};

}  // namespace

std::vector<std::string> nic_capability_names(uint32_t caps) { return names_of(caps, kNicCaps); }

std::vector<std::string> gpu_capability_names(uint32_t caps) { return names_of(caps, kGpuCaps); }

std::vector<std::string> memory_kind_names(uint32_t kinds) { return names_of(kinds, kMemoryKinds); }

}  // namespace courier
