#include "skeleton_memory.hpp"

#include <cerrno>
#include <utility>

#include "skeleton_error.hpp"
#include "skeleton_wire.hpp"

namespace courier::skeleton {
namespace {

// Written so that huge offsets cannot overflow the sum.
bool inside(uint64_t offset, uint64_t length, size_t region_length) {
  return offset <= region_length && length <= region_length - offset;
}

}  // namespace

int RegionTable::add(void* address, size_t length, MemoryRegion** out, courier_nic_rkey_v1* rkey) {
  // A NIC pins the pages here and loads their translation into its MMU; the
  // skeleton's "NIC" is the CPU of the target process, which needs neither.
  auto region = std::make_unique<MemoryRegion>();
  region->owner = owner_;
  region->address = static_cast<std::byte*>(address);
  region->length = length;
  // Keys are never reused within an endpoint, so a stale key cannot hit a
  // newer region.
  region->key = next_key_++;
  *rkey = courier_nic_rkey_v1{region->key, 0};
  *out = region.get();
  regions_.emplace(region->key, std::move(region));
  return 0;
}

int RegionTable::remove(MemoryRegion* region) {
  const auto found = regions_.find(region->key);
  if (found == regions_.end() || found->second.get() != region) {
    return fail(-EINVAL, "mr_deregister: region %p (key %llu) is not registered here",
                static_cast<void*>(region), static_cast<unsigned long long>(region->key));
  }
  regions_.erase(found);
  return 0;
}

int RegionTable::check_local(const void* region, uint64_t offset, uint64_t length) const {
  // Compared by address, not dereferenced: a stray pointer is refused, not
  // followed (a NIC checks the lkey the same way).
  for (const auto& [key, mine] : regions_) {
    if (mine.get() != region) continue;
    if (!inside(offset, length, mine->length)) {
      return fail(-EINVAL,
                  "post_write: local range [%llu, +%llu) is outside the %zu-byte region (key %llu)",
                  static_cast<unsigned long long>(offset), static_cast<unsigned long long>(length),
                  mine->length, static_cast<unsigned long long>(key));
    }
    return 0;
  }
  return fail(-EINVAL, "post_write: local_mr %p is not a region registered on this endpoint",
              region);
}

std::byte* RegionTable::resolve(uint64_t key, uint64_t offset, uint64_t length, int* status) const {
  const auto found = regions_.find(key);
  if (found == regions_.end()) {
    *status = kBadKeyStatus;
    return nullptr;
  }
  if (!inside(offset, length, found->second->length)) {
    *status = kOutOfRangeStatus;
    return nullptr;
  }
  *status = 0;
  return found->second->address + offset;
}

}  // namespace courier::skeleton
