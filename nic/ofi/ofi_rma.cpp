// Endpoint::post_write: one courier_nic_write_v1 -> fi_write / fi_writedata.
//
// This is the hot path: it validates with a few comparisons, takes a
// preallocated context and calls libfabric. It never allocates; only the
// error paths format a message.
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include <algorithm>
#include <cerrno>

#include "ofi_ep.hpp"
#include "ofi_error.hpp"

namespace courier::ofi {

int Endpoint::post_write(const courier_nic_write_v1& write) {
  if (write.peer >= peers_.size()) {
    return set_error(-EINVAL, "post_write: unknown peer %u (ep_connect installed %zu peers)",
                     write.peer, peers_.size());
  }
  if (write.flags & ~uint32_t{COURIER_NIC_WRITE_IMM}) {
    return set_error(-EINVAL, "post_write: unknown flags 0x%x", write.flags);
  }
  auto* region = static_cast<MemoryRegion*>(write.local_mr);
  if (!region) return set_error(-EINVAL, "post_write: local_mr is NULL");
  if (region->owner() != this) {
    return set_error(-EINVAL, "post_write: local_mr was registered on another endpoint");
  }
  if (write.length == 0 || write.length > max_msg_size_) {
    return set_error(-EINVAL, "post_write: length %llu outside [1, %llu]",
                     static_cast<unsigned long long>(write.length),
                     static_cast<unsigned long long>(max_msg_size_));
  }
  // Written so that huge offsets cannot overflow the sum.
  if (write.local_offset > region->length() ||
      write.length > region->length() - write.local_offset) {
    return set_error(-EINVAL,
                     "post_write: local range [%llu, +%llu) lies outside the %zu-byte region",
                     static_cast<unsigned long long>(write.local_offset),
                     static_cast<unsigned long long>(write.length), region->length());
  }

  uint64_t data = write.imm & imm_mask_;
  if ((write.flags & COURIER_NIC_WRITE_IMM) && length_in_data_) {
    // These providers report neither the length of a remote write nor,
    // reliably, its sender (tcp;ofi_rxm 1.17 gives source address 0 for every
    // remote write): the upper half of the CQ data carries both, the
    // sender's rank in bits 63-48 and the length in bits 47-32 (0xffff for
    // 64 KiB - 1 and more, reported as 0: unknown).
    data |= (uint64_t{self_rank_} << 48) | (std::min<uint64_t>(write.length, 0xffff) << 32);
  }

  OpContext* context = writes_.acquire();
  if (!context) return -EAGAIN;  // tx_depth writes in flight: poll, then retry
  context->cookie = write.cookie;
  context->peer = write.peer;
  context->kind = OpContext::Kind::kWrite;  // the pool is shared with atomics

  void* buffer = region->addr() + write.local_offset;
  // base is the region's virtual address under FI_MR_VIRT_ADDR and 0 under
  // offset addressing (ofi_mr.hpp), so the sum is right in both cases.
  const uint64_t remote_addr = write.remote.base + write.remote_offset;
  ssize_t rc;
  if (write.flags & COURIER_NIC_WRITE_IMM) {
    rc = fi_writedata(stack_.ep.get(), buffer, write.length, region->desc(), data,
                      peers_[write.peer], remote_addr, write.remote.key, context);
  } else {
    rc = fi_write(stack_.ep.get(), buffer, write.length, region->desc(), peers_[write.peer],
                  remote_addr, write.remote.key, context);
  }
  if (rc == 0) return 0;

  writes_.release(context);
  if (rc == -FI_EAGAIN) return -EAGAIN;  // the provider's queue is full
  return set_error(
      to_errno(rc), "post_write to peer %u: %s", write.peer,
      describe_fi_error(write.flags & COURIER_NIC_WRITE_IMM ? "fi_writedata" : "fi_write", rc)
          .c_str());
}

}  // namespace courier::ofi
