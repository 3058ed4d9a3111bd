// Registration: this endpoint publishes its regions in its segment's table
// (mr_register), and reads its peers' tables when it writes to them.
#include <cuda.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "ce_current_device.hpp"
#include "ce_endpoint.hpp"
#include "ce_error.hpp"

namespace courier::nic_ce {

namespace {

constexpr uint64_t make_key(uint32_t slot, uint32_t generation) {
  return (uint64_t{generation} << 32) | slot;
}

// cuMemGetAddressRange through the runtime (nothing links against libcuda).
using AddressRangeFn = CUresult (*)(CUdeviceptr*, size_t*, CUdeviceptr);
AddressRangeFn address_range_fn() {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found{};
  if (cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &fn, 3020, cudaEnableDefault,
                                       &found) != cudaSuccess ||
      found != cudaDriverEntryPointSuccess) {
    return nullptr;
  }
  return reinterpret_cast<AddressRangeFn>(fn);
}

}  // namespace

int Endpoint::register_memory(void* address, size_t length, uint32_t mem_kind,
                              std::unique_ptr<LocalRegion>* out, courier_nic_rkey_v1* rkey) {
  if (address == nullptr || length == 0 || out == nullptr || rkey == nullptr) {
    return set_error(-EINVAL, "mr_register: NULL address, zero length or NULL output");
  }
  if (mem_kind != COURIER_MEM_HOST && mem_kind != COURIER_MEM_CUDA) {
    return set_error(-EOPNOTSUPP, "mr_register: memory kind " + std::to_string(mem_kind) +
                                      " is not supported (host and CUDA memory are)");
  }
  if (int rc = use_device(options_.device); rc != 0) return rc;
  // Registration is control path, with no kernel of ours waiting on a
  // transfer: the time to close mappings of regions peers withdrew
  // (closing one synchronizes the device).
  options_.mappings->sweep();
  SegmentLayout& own = *own_.get();
  uint32_t slot = kRegistrationSlots;
  for (uint32_t i = 0; i < kRegistrationSlots; ++i) {
    if (own.registrations[i].generation.load(std::memory_order_relaxed) == 0) {
      slot = i;
      break;
    }
  }
  if (slot == kRegistrationSlots) {
    return set_error(-ENOSPC, "mr_register: all " + std::to_string(kRegistrationSlots) +
                                  " registration slots are in use");
  }
  Registration& reg = own.registrations[slot];
  reg.mem_kind = mem_kind;
  reg.address = reinterpret_cast<uint64_t>(address);
  reg.length = length;
  reg.alloc_base = reg.address;
  std::memset(reg.ipc_handle, 0, sizeof reg.ipc_handle);
  if (mem_kind == COURIER_MEM_CUDA) {
    static_assert(sizeof(cudaIpcMemHandle_t) <= sizeof reg.ipc_handle);
    AddressRangeFn range = address_range_fn();
    CUdeviceptr base = 0;
    size_t bytes = 0;
    if (range == nullptr ||
        range(&base, &bytes, reinterpret_cast<CUdeviceptr>(address)) != CUDA_SUCCESS) {
      return set_error(
          -EINVAL,
          "mr_register: the address is not CUDA device memory (cuMemGetAddressRange refused it)");
    }
    if (reg.address + length > base + bytes) {
      return set_error(-EINVAL, "mr_register: the region runs past the end of its CUDA allocation");
    }
    cudaIpcMemHandle_t handle{};
    cudaError_t rc = cudaIpcGetMemHandle(&handle, reinterpret_cast<void*>(base));
    if (rc != cudaSuccess) return set_cuda_error(rc, "mr_register: cudaIpcGetMemHandle");
    std::memcpy(reg.ipc_handle, &handle, sizeof handle);
    reg.alloc_base = base;
  }
  const uint32_t generation = generation_ == 0xFFFFFFFFu ? 1 : generation_ + 1;
  // Allocated before the slot is published: nothing can fail after that.
  auto region = std::make_unique<LocalRegion>(
      LocalRegion{this, slot, generation, mem_kind, static_cast<std::byte*>(address), length});
  generation_ = generation;
  reg.generation.store(generation, std::memory_order_release);
  regions_[slot] = region.get();
  ++registered_;
  rkey->key = make_key(slot, generation);
  rkey->base = reg.address;
  *out = std::move(region);
  return 0;
}

int Endpoint::deregister_memory(LocalRegion* region) {
  if (region == nullptr || region->slot >= kRegistrationSlots || regions_[region->slot] != region) {
    return set_error(-EINVAL, "mr_deregister: unknown region");
  }
  std::unique_ptr<LocalRegion> owned(region);
  own_.get()->registrations[region->slot].generation.store(0, std::memory_order_release);
  regions_[region->slot] = nullptr;
  --registered_;
  return 0;
}

int Endpoint::read_registration(const Peer& peer, uint64_t key, RemoteRegion* out,
                                std::string* why) const {
  const auto slot = static_cast<uint32_t>(key & 0xFFFFFFFFu);
  const auto generation = static_cast<uint32_t>(key >> 32);
  if (slot >= kRegistrationSlots || generation == 0) {
    *why = "the remote key names no registration";
    return -EINVAL;
  }
  const Registration& reg = peer.layout->registrations[slot];
  if (reg.generation.load(std::memory_order_acquire) != generation) {
    *why = "the remote key is stale or invalid (the region is not registered)";
    return -EINVAL;
  }
  out->slot = slot;
  out->generation = generation;
  out->mem_kind = reg.mem_kind;
  out->address = reg.address;
  out->length = reg.length;
  out->alloc_base = reg.alloc_base;
  std::memcpy(out->ipc_handle, reg.ipc_handle, sizeof out->ipc_handle);
  std::atomic_thread_fence(std::memory_order_acquire);
  if (reg.generation.load(std::memory_order_relaxed) != generation) {
    *why = "the remote region was deregistered meanwhile";
    return -EINVAL;
  }
  return 0;
}

int Endpoint::map_remote(Peer& peer, const RemoteRegion& region, uint64_t offset, std::byte** out,
                         std::string* why) {
  std::byte* base = nullptr;
  if (peer.self) {
    base = reinterpret_cast<std::byte*>(region.alloc_base);
  } else if (int rc = options_.mappings->open(options_.device, region.ipc_handle, peer.layout,
                                              region.slot, region.generation, &base, why);
             rc != 0) {
    return rc;
  }
  *out = base + (region.address - region.alloc_base) + offset;
  return 0;
}

int Endpoint::check_local(const LocalRegion* mr, uint64_t offset, uint64_t length,
                          const char* what) const {
  if (mr == nullptr || mr->endpoint != this) {
    return set_error(-EINVAL,
                     std::string(what) + ": the local region is not registered on this endpoint");
  }
  if (offset > mr->length || length > mr->length - offset) {
    return set_error(-EINVAL, std::string(what) + ": [" + std::to_string(offset) + ", +" +
                                  std::to_string(length) + ") is outside the local region of " +
                                  std::to_string(mr->length) + " bytes");
  }
  return 0;
}

}  // namespace courier::nic_ce
