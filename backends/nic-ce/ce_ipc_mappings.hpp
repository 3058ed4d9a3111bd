// The process's mappings of peers' GPU allocations, by CUDA IPC handle. CUDA
// maps an allocation once per process, so every endpoint of the backend
// shares them; they are closed when the backend goes away.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "ce_segment.hpp"

namespace courier::nic_ce {

class IpcMappings {
 public:
  IpcMappings() = default;
  ~IpcMappings();
  IpcMappings(const IpcMappings&) = delete;
  IpcMappings& operator=(const IpcMappings&) = delete;
  // The allocation's base in this process, mapped on `device` on first use,
  // for the registration (owner segment, slot, generation) that names it.
  int open(int device, const uint8_t (&handle)[64], const SegmentLayout* owner, uint32_t slot,
           uint32_t generation, std::byte** base, std::string* why);
  // An endpoint that mapped `owner`'s segment is going away: its
  // registrations no longer count as users (the mappings stay for others).
  void forget_owner(const SegmentLayout* owner);
  // Closes the mappings whose registrations were all withdrawn: the owner
  // may have freed the memory, and CUDA refuses to map a new allocation
  // there next to the stale mapping. Closing synchronizes the device, so
  // this runs on the control path only (mr_register).
  void sweep();

 private:
  struct User {
    const SegmentLayout* owner;
    uint32_t slot;
    uint32_t generation;
    bool operator==(const User&) const = default;
  };
  struct Mapping {
    std::byte* base;
    std::vector<User> users;
  };
  void close_withdrawn();

  std::mutex mutex_;
  std::map<std::string, Mapping> mapped_;
};

}  // namespace courier::nic_ce
