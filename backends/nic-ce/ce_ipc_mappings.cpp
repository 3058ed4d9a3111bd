#include "ce_ipc_mappings.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "ce_current_device.hpp"
#include "ce_error.hpp"

namespace courier::nic_ce {

IpcMappings::~IpcMappings() {
  for (auto& [handle, mapping] : mapped_) cudaIpcCloseMemHandle(mapping.base);
}

void IpcMappings::forget_owner(const SegmentLayout* owner) {
  std::lock_guard lock(mutex_);
  for (auto& [handle, mapping] : mapped_) {
    std::erase_if(mapping.users, [&](const User& u) { return u.owner == owner; });
  }
}

void IpcMappings::sweep() {
  std::lock_guard lock(mutex_);
  close_withdrawn();
}

void IpcMappings::close_withdrawn() {
  for (auto it = mapped_.begin(); it != mapped_.end();) {
    auto& users = it->second.users;
    std::erase_if(users, [](const User& u) {
      return u.owner->registrations[u.slot].generation.load(std::memory_order_acquire) !=
             u.generation;
    });
    if (users.empty()) {
      cudaIpcCloseMemHandle(it->second.base);
      it = mapped_.erase(it);
    } else {
      ++it;
    }
  }
}

int IpcMappings::open(int device, const uint8_t (&handle)[64], const SegmentLayout* owner,
                      uint32_t slot, uint32_t generation, std::byte** base, std::string* why) {
  const User user{owner, slot, generation};
  std::string key(reinterpret_cast<const char*>(handle), sizeof handle);
  std::lock_guard lock(mutex_);
  auto it = mapped_.find(key);
  if (it == mapped_.end()) {
    if (use_device(device) != 0) {
      *why = last_error();
      return -EIO;
    }
    cudaIpcMemHandle_t h{};
    std::memcpy(&h, handle, sizeof h);
    void* mapped = nullptr;
    cudaError_t rc = cudaIpcOpenMemHandle(&mapped, h, cudaIpcMemLazyEnablePeerAccess);
    if (rc != cudaSuccess) {
      *why = std::string("cudaIpcOpenMemHandle of the peer's region: ") + cudaGetErrorString(rc) +
             " (" + cudaGetErrorName(rc) + ")" +
             (rc == cudaErrorAlreadyMapped
                  ? "; a stale mapping of freed memory is still open: the peer's old region "
                    "must be deregistered everywhere before the new one is registered"
                  : "");
      return -EIO;
    }
    it = mapped_.emplace(std::move(key), Mapping{static_cast<std::byte*>(mapped), {}}).first;
  }
  if (std::find(it->second.users.begin(), it->second.users.end(), user) == it->second.users.end()) {
    it->second.users.push_back(user);
  }
  *base = it->second.base;
  return 0;
}

}  // namespace courier::nic_ce
