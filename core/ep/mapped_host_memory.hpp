// Host memory the GPU backend maps into the device's address space (page-
// locked: copies to and from it on a stream do not make the host wait),
// given back when this goes. The EP paths' readback areas and staging.
#pragma once

#include <cstdint>

#include "core/backend_instance.hpp"

namespace courier::ep {

class MappedHostMemory {
 public:
  MappedHostMemory() = default;
  // Throws "ep::Buffer: <what>: <backend's reason>".
  MappedHostMemory(const GpuBackend& gpu, uint64_t bytes, const char* what);
  ~MappedHostMemory();
  MappedHostMemory(MappedHostMemory&& other) noexcept { swap(other); }
  MappedHostMemory& operator=(MappedHostMemory&& other) noexcept {
    swap(other);
    return *this;
  }
  void* host() const { return host_; }
  void* device() const { return device_; }

 private:
  void swap(MappedHostMemory& other) noexcept;
  const GpuBackend* gpu_ = nullptr;
  void* host_ = nullptr;
  void* device_ = nullptr;
};

}  // namespace courier::ep
