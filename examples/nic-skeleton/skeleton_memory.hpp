// Registered memory: what the skeleton's "NIC" may read from (a local
// source) and what peers may write into (a target named by its key).
#pragma once

#include <courier/abi/nic_v1.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>

namespace courier::skeleton {

class Endpoint;

// One registration. The ABI hands the region back alone (mr_deregister), so
// it remembers its endpoint.
struct MemoryRegion {
  Endpoint* owner = nullptr;
  std::byte* address = nullptr;
  size_t length = 0;
  uint64_t key = 0;
};

// The registrations of one endpoint, by key: the table a NIC keeps in its
// memory-translation unit (verbs: the MR's lkey/rkey in the HCA's MTT).
class RegionTable {
 public:
  explicit RegionTable(Endpoint* owner) : owner_(owner) {}

  // Registers [address, address + length); the rkey is {key, 0}: the
  // skeleton addresses a region by offset, so `base` carries nothing (a NIC
  // that addresses by virtual address, like verbs, puts the address there).
  int add(void* address, size_t length, MemoryRegion** out, courier_nic_rkey_v1* rkey);
  int remove(MemoryRegion* region);
  size_t size() const { return regions_.size(); }

  // The local source of a write: `region` must be one of ours and
  // [offset, offset + length) inside it. Returns 0 or -EINVAL with a reason.
  int check_local(const void* region, uint64_t offset, uint64_t length) const;
  // The target of a peer's write: where its bytes go, or nullptr with
  // *status = kBadKeyStatus / kOutOfRangeStatus.
  std::byte* resolve(uint64_t key, uint64_t offset, uint64_t length, int* status) const;

 private:
  Endpoint* owner_;
  uint64_t next_key_ = 1;
  std::map<uint64_t, std::unique_ptr<MemoryRegion>> regions_;
};

}  // namespace courier::skeleton
