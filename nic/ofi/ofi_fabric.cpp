#include "ofi_fabric.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_errno.h>
#include <signal.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <utility>

#include "ofi_error.hpp"

namespace courier::ofi {
namespace {

int fail(long rc, const char* call) {
  return set_error(to_errno(rc), "opening endpoint: %s", describe_fi_error(call, rc).c_str());
}

}  // namespace

int open_endpoint_stack(const ProviderProfile& profile, uint32_t tx_depth, uint32_t rx_depth,
                        EndpointStack* out) {
  EndpointStack stack;
  stack.info.reset(fi_dupinfo(profile.info.get()));
  if (!stack.info) return set_error(-ENOMEM, "opening endpoint: fi_dupinfo failed");
  fi_info* info = stack.info.get();

  // The provider's queue sizes are hard limits; asking for more would only
  // turn into -EAGAIN later, so say so now.
  if (tx_depth > info->tx_attr->size) {
    return set_error(-EINVAL, "opening endpoint: tx_depth %u exceeds provider %s's tx size %zu",
                     tx_depth, profile.provider_name.c_str(), info->tx_attr->size);
  }
  if (profile.rx_cq_data && rx_depth > info->rx_attr->size) {
    return set_error(-EINVAL, "opening endpoint: rx_depth %u exceeds provider %s's rx size %zu",
                     rx_depth, profile.provider_name.c_str(), info->rx_attr->size);
  }

  long rc = fi_fabric(info->fabric_attr, stack.fabric.out(), nullptr);
  if (rc != 0) return fail(rc, "fi_fabric");
  rc = fi_domain(stack.fabric.get(), info, stack.domain.out(), nullptr);
  if (rc != 0) return fail(rc, "fi_domain");

  fi_av_attr av_attr{};
  av_attr.type = FI_AV_TABLE;
  rc = fi_av_open(stack.domain.get(), &av_attr, stack.av.out(), nullptr);
  if (rc != 0) return fail(rc, "fi_av_open");

  // One queue for both directions: every write completes here, and so does
  // every incoming write with immediate data. FI_WAIT_NONE: the proxy polls,
  // nobody blocks on a file descriptor.
  fi_cq_attr cq_attr{};
  cq_attr.format = FI_CQ_FORMAT_DATA;
  cq_attr.wait_obj = FI_WAIT_NONE;
  cq_attr.size = std::max<size_t>(size_t{tx_depth} + rx_depth, 64);
  rc = fi_cq_open(stack.domain.get(), &cq_attr, stack.cq.out(), nullptr);
  if (rc != 0) return fail(rc, "fi_cq_open");

  rc = fi_endpoint(stack.domain.get(), info, stack.ep.out(), nullptr);
  if (rc != 0) return fail(rc, "fi_endpoint");
  rc = fi_ep_bind(stack.ep.get(), stack.av.as_fid(), 0);
  if (rc != 0) return fail(rc, "fi_ep_bind(av)");
  rc = fi_ep_bind(stack.ep.get(), stack.cq.as_fid(), FI_TRANSMIT | FI_RECV);
  if (rc != 0) return fail(rc, "fi_ep_bind(cq)");
  char name[64] = "";
  if (profile.provider_name == "shm") {
    // shm names each endpoint's shared-memory region after the process id
    // unless told otherwise. A killed process leaves its region in
    // /dev/shm, and once process ids wrap a new endpoint with the same
    // default name fails to enable (-EBUSY). A random name cannot collide.
    // The process id stays in the name: it tells whose region a leftover
    // is (remove_stale_shm_regions, courier-run).
    std::random_device random;
    const uint64_t nonce = (uint64_t{random()} << 32) ^ random();
    std::snprintf(name, sizeof name, "courier-%d-%016llx", static_cast<int>(getpid()),
                  static_cast<unsigned long long>(nonce));
    rc = fi_setname(stack.ep.as_fid(), name, std::strlen(name) + 1);
    if (rc != 0) return fail(rc, "fi_setname");
  }
  rc = fi_enable(stack.ep.get());
  if (rc != 0) return fail(rc, "fi_enable");
  if (name[0] != '\0') {
    // fi_enable created the region (shm_open(name)). The lock is only a sign
    // of life for remove_stale_shm_regions: should open or flock fail, the
    // process id alone decides there.
    stack.region_lock = OwnedFd(
        ::open((std::string("/dev/shm/") + name).c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
    if (stack.region_lock.get() >= 0) ::flock(stack.region_lock.get(), LOCK_SH | LOCK_NB);
  }

  *out = std::move(stack);
  return 0;
}

int get_endpoint_name(const EndpointStack& stack, void* buffer, size_t* len) {
  const long rc = fi_getname(stack.ep.as_fid(), buffer, len);
  if (rc == -FI_ETOOSMALL) {
    return set_error(-ENOSPC, "ep_name: the name needs %zu bytes", *len);
  }
  if (rc != 0) {
    return set_error(to_errno(rc), "ep_name: %s", describe_fi_error("fi_getname", rc).c_str());
  }
  return 0;
}

int insert_peers(const EndpointStack& stack, uint32_t count, const void* names, size_t stride,
                 std::vector<fi_addr_t>* out) {
  std::vector<fi_addr_t> addresses(count, FI_ADDR_NOTAVAIL);
  const auto* bytes = static_cast<const unsigned char*>(names);
  for (uint32_t rank = 0; rank < count; ++rank) {
    const int inserted =
        fi_av_insert(stack.av.get(), bytes + rank * stride, 1, &addresses[rank], 0, nullptr);
    if (inserted < 0) {
      return set_error(to_errno(inserted), "ep_connect: the address of rank %u was rejected: %s",
                       rank, describe_fi_error("fi_av_insert", inserted).c_str());
    }
    if (inserted != 1) {
      return set_error(-EINVAL, "ep_connect: the address of rank %u is not a valid %s address",
                       rank, stack.info->fabric_attr->prov_name);
    }
  }
  *out = std::move(addresses);
  return 0;
}

OwnedFd::~OwnedFd() {
  if (fd_ >= 0) ::close(fd_);
}

OwnedFd& OwnedFd::operator=(OwnedFd&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

pid_t shm_region_owner(std::string_view name) {
  constexpr std::string_view kPrefix = "courier-";
  if (name.substr(0, kPrefix.size()) != kPrefix) return 0;
  name.remove_prefix(kPrefix.size());
  const size_t dash = name.find('-');
  // A decimal id without leading zeros: courier-0123-... is no process's.
  if (dash == std::string_view::npos || dash == 0 || dash > 10 || name[0] == '0') return 0;
  long long pid = 0;
  for (const char c : name.substr(0, dash)) {
    if (c < '0' || c > '9') return 0;
    pid = pid * 10 + (c - '0');
  }
  if (pid > INT_MAX) return 0;
  const std::string_view nonce = name.substr(dash + 1);
  if (nonce.size() != 16) return 0;
  for (const char c : nonce) {
    if ((c < '0' || c > '9') && (c < 'a' || c > 'f')) return 0;
  }
  return static_cast<pid_t>(pid);
}

StaleRegions remove_stale_shm_regions(const std::string& dir) {
  StaleRegions result;
  std::unique_ptr<DIR, int (*)(DIR*)> listing(::opendir(dir.c_str()), ::closedir);
  if (!listing) {
    result.failed.push_back(dir + ": " + std::strerror(errno));
    return result;
  }
  // Collected first: unlinking while readdir() walks the directory may make
  // it skip entries.
  std::vector<StaleRegions::Removed> stale;
  while (const dirent* entry = ::readdir(listing.get())) {
    const pid_t owner = shm_region_owner(entry->d_name);
    // Only ESRCH proves the process gone; an id reused since keeps the
    // region (a leak, never a live endpoint's region lost).
    if (owner > 0 && ::kill(owner, 0) != 0 && errno == ESRCH) {
      stale.push_back({dir + "/" + entry->d_name, owner});
    }
  }
  for (StaleRegions::Removed& region : stale) {
    const std::string& path = region.path;
    // A live endpoint holds its region locked (open_endpoint_stack),
    // whatever its process id means here.
    OwnedFd file(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK));
    if (file.get() >= 0 && ::flock(file.get(), LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK) {
      continue;
    }
    if (::unlink(path.c_str()) == 0) {
      result.removed.push_back(std::move(region));
    } else if (errno != ENOENT) {  // ENOENT: another starting rank was first
      result.failed.push_back(path + ": " + std::strerror(errno));
    }
  }
  return result;
}

}  // namespace courier::ofi
