// Endpoint::post_atomic: one courier_nic_atomic_v1 -> fi_atomic (ADD),
// fi_fetch_atomic (FETCH_ADD) or fi_compare_atomic (CAS); and the init-time
// probe of which of those the provider carries out.
//
// The post is a hot path like post_write: a few comparisons, a context from
// the same pool as writes (so tx_depth bounds both), the operands copied into
// that context's registered slot, one libfabric call. It never allocates;
// only the error paths format a message. The TX completion comes back through
// poll() exactly like a write's, with the same watchdog.
#include <rdma/fi_atomic.h>
#include <rdma/fi_errno.h>

#include <cerrno>
#include <cstring>

#include "ofi_ep.hpp"
#include "ofi_error.hpp"

namespace courier::ofi {
namespace {

constexpr uint32_t kFetchingOps = COURIER_NIC_ATOMIC_FETCH_ADD_U64 | COURIER_NIC_ATOMIC_CAS_U64 |
                                  COURIER_NIC_ATOMIC_FETCH_ADD_U32 | COURIER_NIC_ATOMIC_CAS_U32;
constexpr uint32_t kCasOps = COURIER_NIC_ATOMIC_CAS_U64 | COURIER_NIC_ATOMIC_CAS_U32;

}  // namespace

int probe_atomic_ops(ProviderProfile* profile) {
  profile->atomic_ops = 0;
  if (!profile->atomics) return 0;
  // fi_*atomicvalid are endpoint calls: open a minimal endpoint for them.
  EndpointStack stack;
  const int rc = open_endpoint_stack(*profile, 1, 1, &stack);
  if (rc != 0) return rc;

  struct Width {
    fi_datatype datatype;
    uint32_t add, fetch_add, cas;
  };
  static constexpr Width kWidths[] = {
      {FI_UINT64, COURIER_NIC_ATOMIC_ADD_U64, COURIER_NIC_ATOMIC_FETCH_ADD_U64,
       COURIER_NIC_ATOMIC_CAS_U64},
      {FI_UINT32, COURIER_NIC_ATOMIC_ADD_U32, COURIER_NIC_ATOMIC_FETCH_ADD_U32,
       COURIER_NIC_ATOMIC_CAS_U32},
  };
  fid_ep* ep = stack.ep.get();
  for (const Width& w : kWidths) {
    // `count` is how many elements one call may carry; Courier posts one.
    size_t count = 0;
    if (fi_atomicvalid(ep, w.datatype, FI_SUM, &count) == 0 && count >= 1) {
      profile->atomic_ops |= w.add;
    }
    count = 0;
    if (fi_fetch_atomicvalid(ep, w.datatype, FI_SUM, &count) == 0 && count >= 1) {
      profile->atomic_ops |= w.fetch_add;
    }
    count = 0;
    if (fi_compare_atomicvalid(ep, w.datatype, FI_CSWAP, &count) == 0 && count >= 1) {
      profile->atomic_ops |= w.cas;
    }
  }
  return 0;
}

int Endpoint::post_atomic(const courier_nic_atomic_v1& atomic) {
  if (!atomics_) {
    return set_error(-EINVAL,
                     "post_atomic %s to peer %u: endpoint opened without COURIER_NIC_EP_ATOMICS",
                     courier_nic_atomic_name(atomic.op), atomic.peer);
  }
  const uint32_t op = atomic.op;
  if (op == 0 || (op & (op - 1)) != 0) {
    return set_error(-EINVAL, "post_atomic: op 0x%x is not exactly one COURIER_NIC_ATOMIC_* bit",
                     op);
  }
  if ((op & atomic_ops_) == 0) {
    return set_error(-EOPNOTSUPP,
                     "post_atomic: %s (0x%x) is not offered by provider %s (atomic_ops 0x%x)",
                     courier_nic_atomic_name(op), op, provider_name_.c_str(), atomic_ops_);
  }
  if (atomic.peer >= peers_.size()) {
    return set_error(-EINVAL, "post_atomic %s: unknown peer %u (ep_connect installed %zu peers)",
                     courier_nic_atomic_name(op), atomic.peer, peers_.size());
  }
  const uint64_t width = courier_nic_atomic_width(op);
  if (atomic.remote_offset % width != 0) {
    return set_error(-EINVAL,
                     "post_atomic %s to peer %u: remote offset %llu is not aligned to %llu bytes",
                     courier_nic_atomic_name(op), atomic.peer,
                     static_cast<unsigned long long>(atomic.remote_offset),
                     static_cast<unsigned long long>(width));
  }
  char* result = nullptr;
  void* result_desc = nullptr;
  if (op & kFetchingOps) {
    auto* region = static_cast<MemoryRegion*>(atomic.result_mr);
    if (!region) {
      return set_error(-EINVAL, "post_atomic %s to peer %u: result_mr is NULL (a fetching op)",
                       courier_nic_atomic_name(op), atomic.peer);
    }
    if (region->owner() != this) {
      return set_error(-EINVAL,
                       "post_atomic %s to peer %u: result_mr was registered on another endpoint",
                       courier_nic_atomic_name(op), atomic.peer);
    }
    if (atomic.result_offset % width != 0 || atomic.result_offset > region->length() ||
        width > region->length() - atomic.result_offset) {
      return set_error(-EINVAL,
                       "post_atomic %s to peer %u: result offset %llu is misaligned or outside "
                       "the %zu-byte result region",
                       courier_nic_atomic_name(op), atomic.peer,
                       static_cast<unsigned long long>(atomic.result_offset), region->length());
    }
    result = region->addr() + atomic.result_offset;
    result_desc = region->desc();
  }

  // A provider that corrupts atomics beyond some number of operations in
  // flight (shm 1.17, see ofi_info.cpp) gets its atomics held back here.
  if (max_in_flight_for_atomics_ != 0 && writes_.in_use() >= max_in_flight_for_atomics_) {
    return -EAGAIN;
  }
  OpContext* context = writes_.acquire();
  if (!context) return -EAGAIN;  // tx_depth writes and atomics in flight: poll, retry
  context->cookie = atomic.cookie;
  context->peer = atomic.peer;
  context->kind = OpContext::Kind::kAtomic;

  // The operand and compare value go into this context's registered slot, at
  // the op's width (little-endian: the low bytes of the 64-bit value).
  uint64_t* slot = &operands_[size_t{2} * writes_.index_of(context)];
  std::memcpy(&slot[0], &atomic.operand, width);
  std::memcpy(&slot[1], &atomic.compare, width);
  void* operand_desc = operands_mr_->desc();
  const fi_datatype datatype = width == 4 ? FI_UINT32 : FI_UINT64;
  // As for writes: base is the region's address under FI_MR_VIRT_ADDR and 0
  // under offset addressing (ofi_mr.hpp).
  const uint64_t remote_addr = atomic.remote.base + atomic.remote_offset;
  const fi_addr_t peer = peers_[atomic.peer];
  fid_ep* ep = stack_.ep.get();

  ssize_t rc;
  const char* call;
  if (op & kCasOps) {
    call = "fi_compare_atomic";
    rc = fi_compare_atomic(ep, &slot[0], 1, operand_desc, &slot[1], operand_desc, result,
                           result_desc, peer, remote_addr, atomic.remote.key, datatype, FI_CSWAP,
                           context);
  } else if (op & kFetchingOps) {
    call = "fi_fetch_atomic";
    rc = fi_fetch_atomic(ep, &slot[0], 1, operand_desc, result, result_desc, peer, remote_addr,
                         atomic.remote.key, datatype, FI_SUM, context);
  } else {
    call = "fi_atomic";
    rc = fi_atomic(ep, &slot[0], 1, operand_desc, peer, remote_addr, atomic.remote.key, datatype,
                   FI_SUM, context);
  }
  if (rc == 0) return 0;

  writes_.release(context);
  if (rc == -FI_EAGAIN) return -EAGAIN;  // the provider's queue is full
  return set_error(to_errno(rc), "post_atomic %s to peer %u at remote offset %llu: %s",
                   courier_nic_atomic_name(op), atomic.peer,
                   static_cast<unsigned long long>(atomic.remote_offset),
                   describe_fi_error(call, rc).c_str());
}

}  // namespace courier::ofi
