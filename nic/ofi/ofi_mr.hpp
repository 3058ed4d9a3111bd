// Memory registration, written for the strictest provider (EFA) and used
// unchanged with the lenient ones (shm, tcp).
//
// Whatever the provider's mr_mode says, a registration:
//  - asks for a key but reads the real one back with fi_mr_key (FI_MR_PROV_KEY:
//    the provider picks keys; where it does not, the requested key is used,
//    so requested keys are unique per domain and hard to guess: RequestedKeys);
//  - binds the region to the endpoint and enables it (FI_MR_ENDPOINT). A
//    provider that did not ask for FI_MR_ENDPOINT may not implement
//    fi_mr_bind/fi_mr_enable for endpoints (shm and tcp answer -FI_ENOSYS):
//    that answer is accepted, any other failure is not;
//  - exposes fi_mr_desc for every post (FI_MR_LOCAL), even where the provider
//    would accept NULL;
//  - publishes a base address so peers can address it: the region's virtual
//    address under FI_MR_VIRT_ADDR, 0 otherwise (offset-based addressing).
//    Peers compute base + offset and never need to know which it is;
//  - goes through fi_mr_regattr with the memory's interface (FI_HMEM_SYSTEM
//    for host memory, FI_HMEM_CUDA / FI_HMEM_ROCR for device memory under
//    FI_HMEM), so host and device memory take one path.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "ofi_fid.hpp"

namespace courier::ofi {

// The keys one domain asks for (fi_mr_attr::requested_key). Where the
// provider takes them as they are (no FI_MR_PROV_KEY: shm, tcp), a key and an
// offset are all a process that reaches the endpoint needs to write into a
// window (docs/security.md), so the keys start at a random point of the
// provider's key space (domain_attr->mr_key_size bytes) and count up from
// there: unique per domain until the key space wraps, and no better guessed
// than the start. Under FI_MR_PROV_KEY the provider picks the keys; the
// requested ones then count from 1.
class RequestedKeys {
 public:
  RequestedKeys() = default;  // counts from 1 (before a domain exists)
  explicit RequestedKeys(const fi_info& info);
  // mr_mode and mr_key_size as fi_info's domain_attr gives them; `start` in
  // place of the random one (tests).
  RequestedKeys(uint64_t mr_mode, size_t key_size, uint64_t start);

  uint64_t next();

 private:
  uint64_t next_ = 1;
  uint64_t mask_ = ~uint64_t{0};  // the key space: mr_key_size bytes
};

class MemoryRegion {
 public:
  // Registers [addr, addr + len) on `domain` for `access` (FI_WRITE,
  // FI_REMOTE_WRITE, ...) and binds it to `ep`. `owner` is remembered for the
  // caller: the object that registered the region (the plugin ABI hands a
  // region back without its endpoint, see mr_deregister). `iface` says what
  // memory it is (ofi_hmem.hpp); device memory needs a profile with FI_HMEM.
  static int create(fid_domain* domain, fid_ep* ep, uint64_t mr_mode, void* addr, size_t len,
                    uint64_t access, uint64_t requested_key, void* owner,
                    std::unique_ptr<MemoryRegion>* out, fi_hmem_iface iface = FI_HMEM_SYSTEM);

  // Closes the registration now and reports fi_close's status as -errno
  // (the destructor closes too, silently).
  int close();

  char* addr() const { return addr_; }
  size_t length() const { return length_; }
  void* desc() const { return desc_; }
  uint64_t key() const { return key_; }
  uint64_t base() const { return base_; }
  void* owner() const { return owner_; }

 private:
  MemoryRegion() = default;

  MrHandle mr_;
  char* addr_ = nullptr;
  size_t length_ = 0;
  void* desc_ = nullptr;
  uint64_t key_ = 0;
  uint64_t base_ = 0;
  void* owner_ = nullptr;
};

}  // namespace courier::ofi
