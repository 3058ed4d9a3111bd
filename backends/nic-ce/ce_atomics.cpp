// post_atomic: an atomic on a word of a peer's GPU memory, carried out by a
// one-thread kernel on the peer's stream (ce_atomic_kernel.cu), so stream
// order puts it after every earlier copy to that peer. A fetching atomic's
// old value comes back through a pinned staging slot.
#include <cerrno>
#include <cstring>
#include <string>

#include "ce_clock.hpp"
#include "ce_current_device.hpp"
#include "ce_endpoint.hpp"
#include "ce_error.hpp"

namespace courier::nic_ce {

namespace {
bool fetching(uint32_t op) {
  return op == COURIER_NIC_ATOMIC_FETCH_ADD_U64 || op == COURIER_NIC_ATOMIC_FETCH_ADD_U32 ||
         op == COURIER_NIC_ATOMIC_CAS_U64 || op == COURIER_NIC_ATOMIC_CAS_U32;
}
}  // namespace

int Endpoint::post_atomic(const courier_nic_atomic_v1& a) {
  if (!options_.atomics) {
    return set_error(-EINVAL,
                     "post_atomic: the endpoint was opened without COURIER_NIC_EP_ATOMICS");
  }
  if (rank_ < 0) return set_error(-ENOTCONN, "post_atomic: the endpoint is not connected");
  const uint32_t width = courier_nic_atomic_width(a.op);
  if (width == 0)
    return set_error(-EOPNOTSUPP,
                     "post_atomic: op " + std::to_string(a.op) + " is not one atomic op");
  if (a.peer >= peers_.size()) {
    return set_error(-EINVAL, "post_atomic: peer " + std::to_string(a.peer) + " is not connected");
  }
  if (a.remote_offset % width != 0) {
    return set_error(-EINVAL, "post_atomic: remote offset " + std::to_string(a.remote_offset) +
                                  " is not aligned to " + std::to_string(width) + " bytes");
  }
  const auto* result = static_cast<const LocalRegion*>(a.result_mr);
  if (fetching(a.op)) {
    if (int rc = check_local(result, a.result_offset, width, "post_atomic result"); rc != 0)
      return rc;
    if (a.result_offset % width != 0)
      return set_error(-EINVAL, "post_atomic: result offset is misaligned");
  }
  if (in_flight_ >= options_.tx_depth || free_staging_.empty()) return -EAGAIN;
  if (int rc = use_device(options_.device); rc != 0) return rc;
  Peer& peer = peers_[a.peer];
  RemoteRegion region;
  std::string why;
  if (read_registration(peer, a.remote.key, &region, &why) != 0 ||
      a.remote_offset > region.length || width > region.length - a.remote_offset) {
    if (why.empty()) why = "the atomic's word is outside the remote region";
    set_error(-EINVAL, std::string(courier_nic_atomic_name(a.op)) + " on rank " +
                           std::to_string(a.peer) + ": " + why);
    queue_failed(peer, a.cookie, -EINVAL);
    return 0;
  }
  if (region.mem_kind != COURIER_MEM_CUDA) {
    set_error(-EOPNOTSUPP, std::string(courier_nic_atomic_name(a.op)) + " on rank " +
                               std::to_string(a.peer) +
                               ": nic-ce carries out atomics on GPU memory only, and the target "
                               "region is host memory");
    queue_failed(peer, a.cookie, -EOPNOTSUPP);
    return 0;
  }
  std::byte* target = nullptr;
  if (map_remote(peer, region, a.remote_offset, &target, &why) != 0) {
    set_error(-EIO, "atomic on rank " + std::to_string(a.peer) + ": " + why);
    queue_failed(peer, a.cookie, -EIO);
    return 0;
  }
  Op op;
  op.cookie = a.cookie;
  op.atomic = true;
  if (options_.trace) op.posted_ns = monotonic_ns();
  op.atomic_op = a.op;
  op.dst = target;
  op.operand = a.operand;
  op.compare = a.compare;
  op.staging = free_staging_.back();
  free_staging_.pop_back();
  if (fetching(a.op)) {
    op.result = result->address + a.result_offset;
    op.result_kind = result->mem_kind;
  }
  peer.ops.push_back(op);
  ++in_flight_;
  return 0;
}

// The atomic's kernel finished: its old value goes to the result region,
// and its staging slot is free again.
void Endpoint::finish_atomic(Op& op) {
  if (op.result != nullptr) {
    const uint64_t old = staging_[op.staging];
    const uint32_t width = courier_nic_atomic_width(op.atomic_op);
    if (op.result_kind == COURIER_MEM_CUDA) {
      cudaError_t rc = copy_now(op.result, &old, width);
      if (rc != cudaSuccess) op.status = set_cuda_error(rc, "storing an atomic's old value");
    } else {
      std::memcpy(op.result, &old, width);  // little-endian: the low bytes
    }
  }
  free_staging_.push_back(op.staging);
  op.staging = -1;
}

}  // namespace courier::nic_ce
