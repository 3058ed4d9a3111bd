#include "ofi_mr.hpp"

#include <rdma/fi_errno.h>
#include <sys/uio.h>

#include <cerrno>
#include <memory>
#include <new>

#include "ofi_error.hpp"

namespace courier::ofi {
namespace {

// A provider that did not put FI_MR_ENDPOINT into mr_mode associates regions
// with the domain and may leave the endpoint-binding calls unimplemented.
bool not_needed(uint64_t mr_mode, long rc) {
  return !(mr_mode & FI_MR_ENDPOINT) && (rc == -FI_ENOSYS || rc == -FI_EOPNOTSUPP);
}

}  // namespace

int MemoryRegion::create(fid_domain* domain, fid_ep* ep, uint64_t mr_mode, void* addr, size_t len,
                         uint64_t access, uint64_t requested_key, void* owner,
                         std::unique_ptr<MemoryRegion>* out, fi_hmem_iface iface) {
  std::unique_ptr<MemoryRegion> region(new (std::nothrow) MemoryRegion);
  if (!region) return set_error(-ENOMEM, "mr_register: out of memory");

  iovec iov{addr, len};
  fi_mr_attr attr{};
  attr.mr_iov = &iov;
  attr.iov_count = 1;
  attr.access = access;
  attr.offset = 0;
  attr.requested_key = requested_key;
  attr.iface = iface;
  // The plugin ABI's mr_register carries no device ordinal, so the device
  // stays 0: the ordinal is unknown here. libfabric's CUDA and ROCr
  // interfaces find a pointer's device themselves where they need it; a
  // provider that trusts the ordinal would see device 0 for memory of any
  // GPU (docs/nic-efa.md, "GPU memory").
  attr.device.reserved = 0;
  long rc = fi_mr_regattr(domain, &attr, 0, region->mr_.out());
  if (rc != 0) {
    const char* memory = iface == FI_HMEM_CUDA   ? " of CUDA memory"
                         : iface == FI_HMEM_ROCR ? " of ROCm memory"
                                                 : "";
    return set_error(to_errno(rc), "mr_register%s of %zu bytes at %p: %s", memory, len, addr,
                     describe_fi_error("fi_mr_regattr", rc).c_str());
  }

  // The EFA sequence: bind to the endpoint, then enable.
  rc = fi_mr_bind(region->mr_.get(), &ep->fid, 0);
  if (rc != 0 && !not_needed(mr_mode, rc)) {
    return set_error(to_errno(rc), "mr_register: %s",
                     describe_fi_error("fi_mr_bind(endpoint)", rc).c_str());
  }
  rc = fi_mr_enable(region->mr_.get());
  if (rc != 0 && !not_needed(mr_mode, rc)) {
    return set_error(to_errno(rc), "mr_register: %s",
                     describe_fi_error("fi_mr_enable", rc).c_str());
  }

  region->addr_ = static_cast<char*>(addr);
  region->length_ = len;
  region->desc_ = fi_mr_desc(region->mr_.get());
  region->key_ = fi_mr_key(region->mr_.get());
  if (region->key_ == FI_KEY_NOTAVAIL) {
    // Only providers with FI_MR_RAW keys answer this; the hints never allow it.
    return set_error(-ENOTSUP, "mr_register: the provider uses raw keys, which are not supported");
  }
  region->base_ = (mr_mode & FI_MR_VIRT_ADDR) ? reinterpret_cast<uintptr_t>(addr) : 0;
  region->owner_ = owner;
  *out = std::move(region);
  return 0;
}

int MemoryRegion::close() {
  const int rc = mr_.close();
  if (rc != 0) {
    return set_error(to_errno(rc), "mr_deregister: %s",
                     describe_fi_error("fi_close(mr)", rc).c_str());
  }
  return 0;
}

}  // namespace courier::ofi
