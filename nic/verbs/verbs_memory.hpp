// Memory registration for the verbs backends.
//
// Host memory is pinned (ibv_reg_mr), or registered for on-demand paging
// when the backend prefers it and the device supports ODP for RC writes and
// atomics (no pinning: the NIC faults pages in, which suits large or
// changing windows on NICs where pinning is expensive). GPU memory is
// registered through a dmabuf exported by the GPU backend (host services'
// dmabuf_export, ibv_reg_dmabuf_mr), and otherwise through the peer-memory
// path (ibv_reg_mr on the device pointer, which nvidia-peermem or the AMD
// peer-memory driver make work).
//
// Remote keys: rkey.key is the MR's rkey, rkey.base the address that
// offset 0 of the region has on the wire (its iova, the virtual address).
#pragma once

#include <courier/abi/nic_v1.h>
#include <infiniband/verbs.h>

#include <cstdint>
#include <memory>
#include <string>

namespace courier::verbs {

class Device;

enum class Registration { pinned, on_demand, dmabuf, peer_memory };
const char* to_string(Registration how);

struct RegistrationPolicy {
  bool prefer_odp = false;  // try IBV_ACCESS_ON_DEMAND for host memory first
};

class MemoryRegion {
 public:
  // Registers [addr, addr+len) of `mem_kind` (COURIER_MEM_HOST/CUDA/ROCM).
  // `host` provides dmabuf_export for GPU memory. `log` receives a warning
  // when a preferred path failed and a fallback was taken.
  static int register_memory(const Device& device, const courier_host_services_v1* host,
                             const RegistrationPolicy& policy, void* owner, void* addr, size_t len,
                             uint32_t mem_kind, std::unique_ptr<MemoryRegion>* out,
                             std::string* warning);
  ~MemoryRegion();
  MemoryRegion(const MemoryRegion&) = delete;
  MemoryRegion& operator=(const MemoryRegion&) = delete;

  uint32_t lkey() const { return mr_->lkey; }
  uint32_t rkey() const { return mr_->rkey; }
  uint64_t base() const { return reinterpret_cast<uintptr_t>(addr_); }
  size_t length() const { return length_; }
  Registration how() const { return how_; }
  void* owner() const { return owner_; }  // the endpoint it was registered on
  // True when [offset, offset+bytes) lies inside the region.
  bool covers(uint64_t offset, uint64_t bytes) const {
    return offset <= length_ && bytes <= length_ - offset;
  }

 private:
  MemoryRegion() = default;
  ibv_mr* mr_ = nullptr;
  void* addr_ = nullptr;
  size_t length_ = 0;
  Registration how_ = Registration::pinned;
  void* owner_ = nullptr;
};

}  // namespace courier::verbs
