#include "ofi_mr.hpp"

#include <rdma/fi_errno.h>
#include <sys/uio.h>

#include <cerrno>
#include <memory>
#include <new>
#include <random>

#include "ofi_error.hpp"

namespace courier::ofi {
namespace {

// A provider that did not put FI_MR_ENDPOINT into mr_mode associates regions
// with the domain and may leave the endpoint-binding calls unimplemented.
bool not_needed(uint64_t mr_mode, long rc) {
  return !(mr_mode & FI_MR_ENDPOINT) && (rc == -FI_ENOSYS || rc == -FI_EOPNOTSUPP);
}

uint64_t key_mask(size_t key_size) {
  // 0 means the provider did not say: take the full 64 bits.
  if (key_size == 0 || key_size >= sizeof(uint64_t)) return ~uint64_t{0};
  return (uint64_t{1} << (8 * key_size)) - 1;
}

uint64_t random_key() {
  std::random_device random;
  return (uint64_t{random()} << 32) ^ random();
}

}  // namespace

RequestedKeys::RequestedKeys(uint64_t mr_mode, size_t key_size, uint64_t start)
    : next_(start), mask_(key_mask(key_size)) {
  if (mr_mode & FI_MR_PROV_KEY) next_ = 1;  // ignored by the provider: nothing to hide
  next_ &= mask_;
}

RequestedKeys::RequestedKeys(const fi_info& info)
    : RequestedKeys(
          info.domain_attr ? info.domain_attr->mr_mode : 0,
          info.domain_attr ? info.domain_attr->mr_key_size : 0,
          info.domain_attr && (info.domain_attr->mr_mode & FI_MR_PROV_KEY) ? 1 : random_key()) {}

uint64_t RequestedKeys::next() {
  // FI_KEY_NOTAVAIL is what fi_mr_key answers for raw keys: never ask for it.
  if (next_ == FI_KEY_NOTAVAIL) next_ = 0;
  const uint64_t key = next_;
  next_ = (next_ + 1) & mask_;
  return key;
}

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
