#include "verbs_memory.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <new>

#include "verbs_device.hpp"
#include "verbs_error.hpp"

namespace courier::verbs {
namespace {

// Peers write into and run atomics on every registered region; the region
// is also a local source, and the target of fetched atomic results.
constexpr int kAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                        IBV_ACCESS_REMOTE_ATOMIC;

std::string errno_text(int code) { return std::string(std::strerror(code)); }

}  // namespace

const char* to_string(Registration how) {
  switch (how) {
    case Registration::on_demand:
      return "on-demand paging";
    case Registration::dmabuf:
      return "dmabuf";
    case Registration::peer_memory:
      return "peer memory";
    default:
      return "pinned";
  }
}

int MemoryRegion::register_memory(const Device& device, const courier_host_services_v1* host,
                                  const RegistrationPolicy& policy, void* owner, void* addr,
                                  size_t len, uint32_t mem_kind, std::unique_ptr<MemoryRegion>* out,
                                  std::string* warning) {
  if (!addr || len == 0) {
    return set_error(-EINVAL, "mr_register: empty region (addr %p, %zu bytes)", addr, len);
  }
  if (len > device.info().max_mr_size) {
    return set_error(-EINVAL, "mr_register: %zu bytes exceed %s's max_mr_size %llu", len,
                     device.info().name.c_str(),
                     static_cast<unsigned long long>(device.info().max_mr_size));
  }
  std::unique_ptr<MemoryRegion> region(new (std::nothrow) MemoryRegion);
  if (!region) return set_error(-ENOMEM, "mr_register: out of memory");
  region->addr_ = addr;
  region->length_ = len;
  region->owner_ = owner;
  ibv_pd* pd = device.pd();

  if (mem_kind == COURIER_MEM_HOST) {
    if (policy.prefer_odp && device.info().odp_for_rc()) {
      errno = 0;
      region->mr_ = ibv_reg_mr(pd, addr, len, kAccess | IBV_ACCESS_ON_DEMAND);
      if (region->mr_) {
        region->how_ = Registration::on_demand;
      } else {
        *warning = "on-demand paging registration of " + std::to_string(len) + " bytes failed (" +
                   errno_text(errno) + "): pinning instead";
      }
    }
    if (!region->mr_) {
      errno = 0;
      region->mr_ = ibv_reg_mr(pd, addr, len, kAccess);
      region->how_ = Registration::pinned;
      if (!region->mr_) {
        const int code = errno ? errno : ENOMEM;
        return set_error(-code,
                         "mr_register: pinning %zu bytes of host memory at %p on %s failed: %s%s",
                         len, addr, device.info().name.c_str(), errno_text(code).c_str(),
                         code == ENOMEM ? " (locked-memory limit? see ulimit -l)" : "");
      }
    }
  } else if (mem_kind == COURIER_MEM_CUDA || mem_kind == COURIER_MEM_ROCM) {
    std::string dmabuf_why = "the core offers no dmabuf export";
    if (host && COURIER_HOST_HAS(host, dmabuf_export)) {
      int fd = -1;
      uint64_t offset = 0;
      const int rc = host->dmabuf_export(host->ctx, addr, len, &fd, &offset);
      if (rc == 0 && fd >= 0) {
        errno = 0;
        region->mr_ =
            ibv_reg_dmabuf_mr(pd, offset, len, reinterpret_cast<uintptr_t>(addr), fd, kAccess);
        const int code = errno;
        close(fd);  // the registration holds its own reference to the dmabuf
        if (region->mr_) {
          region->how_ = Registration::dmabuf;
        } else {
          dmabuf_why = "ibv_reg_dmabuf_mr failed: " + errno_text(code ? code : EIO);
        }
      } else {
        dmabuf_why = "dmabuf export failed (" + std::to_string(rc) + ")";
      }
    }
    if (!region->mr_) {
      errno = 0;
      region->mr_ = ibv_reg_mr(pd, addr, len, kAccess);
      region->how_ = Registration::peer_memory;
      if (!region->mr_) {
        const int code = errno ? errno : EFAULT;
        return set_error(-code,
                         "mr_register: GPU memory at %p (%zu bytes) on %s: %s, and the "
                         "peer-memory path failed too: %s (is nvidia-peermem / amdgpu peer "
                         "memory loaded?)",
                         addr, len, device.info().name.c_str(), dmabuf_why.c_str(),
                         errno_text(code).c_str());
      }
      *warning = "GPU memory registered through peer memory: " + dmabuf_why;
    }
  } else {
    return set_error(-EINVAL, "mr_register: unsupported memory kind 0x%x", mem_kind);
  }
  *out = std::move(region);
  return 0;
}

MemoryRegion::~MemoryRegion() {
  if (mr_) ibv_dereg_mr(mr_);
}

}  // namespace courier::verbs
