#include "ofi_ep.hpp"

#include <rdma/fi_errno.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <new>

#include "ofi_error.hpp"
#include "ofi_hmem.hpp"

namespace courier::ofi {

uint64_t coarse_now_ms() {
  timespec now;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &now);
  return static_cast<uint64_t>(now.tv_sec) * 1000 + static_cast<uint64_t>(now.tv_nsec) / 1000000;
}

int Endpoint::open(const ProviderProfile& profile, const EndpointOptions& options,
                   std::unique_ptr<Endpoint>* out) {
  const uint32_t tx_depth = options.tx_depth;
  const uint32_t rx_depth = options.rx_depth;
  if (tx_depth == 0) return set_error(-EINVAL, "ep_open: tx_depth must be at least 1");
  if (options.atomics && (!profile.atomics || profile.atomic_ops == 0)) {
    return set_error(-EOPNOTSUPP,
                     "ep_open: COURIER_NIC_EP_ATOMICS requested, but provider %s offers no "
                     "atomics Courier can use",
                     profile.provider_name.c_str());
  }
  std::unique_ptr<Endpoint> ep(new (std::nothrow) Endpoint);
  if (!ep) return set_error(-ENOMEM, "ep_open: out of memory");

  int rc = open_endpoint_stack(profile, tx_depth, rx_depth, &ep->stack_);
  if (rc != 0) return rc;
  ep->requested_keys_ = RequestedKeys(*ep->stack_.info);

  ep->writes_ = ContextPool(tx_depth, OpContext::Kind::kWrite);
  ep->source_ = profile.source;
  ep->rx_cq_data_ = profile.rx_cq_data;
  ep->length_in_data_ = profile.length_in_data;
  ep->write_timeout_ms_ = options.write_timeout_ms;
  // The watchdog counts scans rather than stamping each write with the time,
  // which keeps clock reads off the post path: a write found in flight by
  // more than timeout/interval scans has waited at least the timeout.
  ep->watchdog_interval_ms_ = std::clamp<uint32_t>(options.write_timeout_ms / 8, 1, 1000);
  ep->watchdog_scan_limit_ = options.write_timeout_ms / ep->watchdog_interval_ms_;
  ep->provider_name_ = profile.provider_name;
  ep->mr_mode_ = profile.mr_mode;
  ep->mem_kinds_ = profile.mem_kinds;
  ep->imm_mask_ =
      profile.imm_bytes >= 8 ? ~uint64_t{0} : (uint64_t{1} << (8 * profile.imm_bytes)) - 1;
  ep->max_msg_size_ = profile.max_msg_size;

  if (options.atomics) {
    ep->atomics_ = true;
    ep->atomic_ops_ = profile.atomic_ops;
    ep->max_in_flight_for_atomics_ = profile.max_in_flight_for_atomics;
    ep->operands_.assign(size_t{2} * tx_depth, 0);
    // FI_WRITE: operands are the source of atomics; FI_READ for symmetry
    // with result buffers (some providers check either on local buffers).
    rc = MemoryRegion::create(ep->stack_.domain.get(), ep->stack_.ep.get(), ep->mr_mode_,
                              ep->operands_.data(), ep->operands_.size() * sizeof(uint64_t),
                              FI_WRITE | FI_READ, ep->requested_keys_.next(), ep.get(),
                              &ep->operands_mr_);
    if (rc != 0) return rc;
  }

  if (ep->rx_cq_data_) {
    // Remote CQ data lands in posted receives: keep rx_depth of them posted.
    ep->receives_ = ContextPool(rx_depth > 0 ? rx_depth : 1, OpContext::Kind::kReceive);
    rc = ep->replenish_receives();
    if (rc != 0) return rc;
  }
  *out = std::move(ep);
  return 0;
}

int Endpoint::name(void* buffer, size_t* len) const {
  if (!buffer || !len) return set_error(-EINVAL, "ep_name: NULL buffer or length");
  return get_endpoint_name(stack_, buffer, len);
}

int Endpoint::connect(uint32_t num_peers, const void* names, size_t stride) {
  if (!peers_.empty()) {
    return set_error(-EALREADY, "ep_connect: this endpoint is already connected to %zu peers",
                     peers_.size());
  }
  if (num_peers == 0 || !names || stride == 0) {
    return set_error(-EINVAL, "ep_connect: need at least one name and a non-zero stride");
  }
  std::vector<fi_addr_t> addresses;
  const int rc = insert_peers(stack_, num_peers, names, stride, &addresses);
  if (rc != 0) return rc;

  // Where the sender's rank travels in the CQ data (see ofi_rma.cpp), this
  // endpoint must know its own: it is the entry equal to its own name.
  if (length_in_data_) {
    std::vector<unsigned char> own(stride);
    size_t own_len = own.size();
    if (name(own.data(), &own_len) != 0) return -EIO;
    const auto* all = static_cast<const unsigned char*>(names);
    for (uint32_t rank = 0; rank < num_peers && self_rank_ == UINT32_MAX; ++rank) {
      if (std::memcmp(all + rank * stride, own.data(), own_len) == 0) self_rank_ = rank;
    }
    if (self_rank_ == UINT32_MAX || self_rank_ > 0xffff) {
      return set_error(-EINVAL,
                       "ep_connect: this endpoint's own name is not among the %u names "
                       "(or its rank exceeds 65535)",
                       num_peers);
    }
  }

  // FI_AV_TABLE hands out 0, 1, 2, ... in insertion order, so a completion's
  // source address is the sender's rank. Check rather than assume.
  peers_are_ranks_ = true;
  for (uint32_t rank = 0; rank < num_peers; ++rank) {
    if (addresses[rank] != rank) peers_are_ranks_ = false;
  }
  peers_ = std::move(addresses);
  return 0;
}

int Endpoint::register_memory(void* addr, size_t len, uint32_t mem_kind,
                              std::unique_ptr<MemoryRegion>* out, courier_nic_rkey_v1* rkey) {
  if (!addr || len == 0 || !out || !rkey) {
    return set_error(-EINVAL, "mr_register: NULL address, zero length or NULL output");
  }
  fi_hmem_iface iface = FI_HMEM_SYSTEM;
  if (!(mem_kind & mem_kinds_) || !hmem_iface_of(mem_kind, &iface)) {
    if (mem_kinds_ == COURIER_MEM_HOST) {
      return set_error(-ENOTSUP,
                       "mr_register: memory kind 0x%x is not supported (this backend registers "
                       "host memory only)",
                       mem_kind);
    }
    return set_error(-ENOTSUP,
                     "mr_register: memory kind 0x%x is not supported (this endpoint registers "
                     "%s memory)",
                     mem_kind, describe_memory_kinds(mem_kinds_).c_str());
  }
  // FI_WRITE: the region is the source of local writes; FI_REMOTE_WRITE:
  // peers write into it. An atomic endpoint's regions are also targets of
  // fetching atomics (FI_REMOTE_READ) and receive their results (FI_READ).
  const uint64_t access =
      atomics_ ? FI_WRITE | FI_REMOTE_WRITE | FI_READ | FI_REMOTE_READ : FI_WRITE | FI_REMOTE_WRITE;
  const int rc = MemoryRegion::create(stack_.domain.get(), stack_.ep.get(), mr_mode_, addr, len,
                                      access, requested_keys_.next(), this, out, iface);
  if (rc != 0) return rc;
  rkey->key = (*out)->key();
  rkey->base = (*out)->base();
  ++registered_regions_;
  return 0;
}

int Endpoint::deregister_memory(MemoryRegion* region) {
  if (!region || region->owner() != this) {
    return set_error(-EINVAL, "mr_deregister: the region does not belong to this endpoint");
  }
  std::unique_ptr<MemoryRegion> owned(region);
  --registered_regions_;
  return owned->close();
}

int Endpoint::replenish_receives() {
  while (OpContext* context = receives_.acquire()) {
    // Zero-length receive: it only carries the remote CQ data.
    const ssize_t rc = fi_recv(stack_.ep.get(), nullptr, 0, nullptr, FI_ADDR_UNSPEC, context);
    if (rc != 0) {
      receives_.release(context);
      if (rc == -FI_EAGAIN) return 0;  // try again on the next poll
      return set_error(to_errno(rc), "posting a receive for immediate data: %s",
                       describe_fi_error("fi_recv", rc).c_str());
    }
  }
  return 0;
}

}  // namespace courier::ofi
