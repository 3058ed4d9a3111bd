// Opening the libfabric object stack behind one endpoint: fabric, domain,
// address vector, completion queue, endpoint.
//
// Every endpoint gets its own stack. That costs a little memory but lets
// each proxy thread drive its endpoint without sharing anything (and lets
// the domain run with FI_THREAD_DOMAIN, i.e. without provider locks). The
// raw-libfabric benchmark opens its endpoint through the same function so
// that Courier and its baseline run on identical settings.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ofi_fid.hpp"
#include "ofi_info.hpp"

namespace courier::ofi {

// Room reserved for an endpoint name (courier_nic_props_v1.max_ep_name).
// libfabric's binary formats need at most 64 bytes (sockaddr_in6 is 28, EFA
// 32); FI_ADDR_STR names (shm) are strings well below 256.
inline constexpr uint32_t kMaxNameBytes = 256;

// A file descriptor, closed on destruction.
class OwnedFd {
 public:
  OwnedFd() = default;
  explicit OwnedFd(int fd) : fd_(fd) {}
  ~OwnedFd();
  OwnedFd(OwnedFd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  OwnedFd& operator=(OwnedFd&& other) noexcept;
  OwnedFd(const OwnedFd&) = delete;
  OwnedFd& operator=(const OwnedFd&) = delete;

  int get() const { return fd_; }

 private:
  int fd_ = -1;
};

struct EndpointStack {
  // Declared in creation order; destroyed in reverse (see ofi_fid.hpp).
  InfoPtr info;  // this endpoint's own copy of the profile's fi_info
  FabricHandle fabric;
  DomainHandle domain;
  AvHandle av;
  CqHandle cq;
  EpHandle ep;
  // shm: the endpoint's region, locked shared while it lives (see
  // remove_stale_shm_regions).
  OwnedFd region_lock;
};

// Opens and enables an endpoint able to keep `tx_depth` writes in flight
// and to buffer `rx_depth` incoming immediate-data completions.
int open_endpoint_stack(const ProviderProfile& profile, uint32_t tx_depth, uint32_t rx_depth,
                        EndpointStack* out);

// The endpoint's address (fi_getname). *len is the capacity in, the size out.
int get_endpoint_name(const EndpointStack& stack, void* buffer, size_t* len);

// Inserts `count` peer addresses into the address vector, one by one, so
// that peer i gets fi_addr_t out[i]. With FI_AV_TABLE that is i itself.
int insert_peers(const EndpointStack& stack, uint32_t count, const void* names, size_t stride,
                 std::vector<fi_addr_t>* out);

// shm endpoints' shared-memory regions, named by open_endpoint_stack
// "courier-<pid>-<16 hex digits>" after the process that created them.
// A process killed by a signal leaves its regions (16 MiB each) behind.

// The process id in the name of such a region (a file name in /dev/shm),
// or 0 when `name` is not one.
pid_t shm_region_owner(std::string_view name);

struct StaleRegions {
  struct Removed {
    std::string path;
    pid_t owner;
  };
  std::vector<Removed> removed;
  std::vector<std::string> failed;  // "PATH: reason"
};

// Removes from `dir` the regions whose process no longer exists
// (kill(pid, 0) fails with ESRCH) and that no endpoint holds locked; a live
// process's regions, or those of a process that cannot be signalled (EPERM:
// another user's), are kept. The lock covers what the id cannot: processes
// of another pid namespace sharing /dev/shm (containers run with
// --ipc=host), whose ids mean nothing here.
StaleRegions remove_stale_shm_regions(const std::string& dir = "/dev/shm");

}  // namespace courier::ofi
