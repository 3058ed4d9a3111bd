#include "core/ep/mapped_host_memory.hpp"

#include <utility>

#include "core/check.hpp"

namespace courier::ep {

MappedHostMemory::MappedHostMemory(const GpuBackend& gpu, uint64_t bytes, const char* what)
    : gpu_(&gpu) {
  if (gpu.runtime().host_alloc_mapped(gpu.handle(), bytes, &host_, &device_) != 0) {
    host_ = nullptr;
    fail("ep::Buffer: {} ({} bytes): {}", what, bytes, gpu.last_error());
  }
}

MappedHostMemory::~MappedHostMemory() {
  if (host_ != nullptr) gpu_->runtime().host_free_mapped(gpu_->handle(), host_);
}

void MappedHostMemory::swap(MappedHostMemory& other) noexcept {
  std::swap(gpu_, other.gpu_);
  std::swap(host_, other.host_);
  std::swap(device_, other.device_);
}

}  // namespace courier::ep
