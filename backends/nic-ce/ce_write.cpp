// post_write: a WRITE to a peer on this host. Into GPU memory it becomes a
// copy that poll() starts on the peer's stream; into host memory its bytes
// travel in the peer's inbox. Either way posting only queues: the operation
// completes, in post order, when poll() sees it land.
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "ce_clock.hpp"
#include "ce_current_device.hpp"
#include "ce_endpoint.hpp"
#include "ce_error.hpp"

namespace courier::nic_ce {

namespace {
// Host-memory targets take the bytes through the inbox, 64 at a time: meant
// for the small control messages that land there.
constexpr uint64_t kMaxHostTargetWrite = 1 << 20;

std::string write_to_rank(uint32_t peer) { return "write to rank " + std::to_string(peer) + ": "; }
}  // namespace

int Endpoint::post_write(const courier_nic_write_v1& w) {
  TraceTimer timer(options_.trace, trace_.posting());
  const LocalRegion* local = nullptr;
  if (int rc = check_write(w, &local); rc != 0) return rc;
  if (in_flight_ >= options_.tx_depth) return -EAGAIN;
  if (int rc = use_device(options_.device); rc != 0) return rc;
  Peer& peer = peers_[w.peer];
  RemoteRegion region;
  std::string why;
  if (!find_write_target(peer, w, &region, &why)) {
    set_error(-EINVAL, write_to_rank(w.peer) + why);
    queue_failed(peer, w.cookie, -EINVAL);
    return 0;
  }
  const std::byte* src = local->address + w.local_offset;
  if (region.mem_kind == COURIER_MEM_CUDA) {
    return queue_device_write(peer, w, region, src, local->mem_kind == COURIER_MEM_CUDA);
  }
  return queue_host_write(peer, w, src, local->mem_kind);
}

// What the caller got wrong: refused at once, nothing queued.
int Endpoint::check_write(const courier_nic_write_v1& w, const LocalRegion** local) const {
  if (rank_ < 0) return set_error(-ENOTCONN, "post_write: the endpoint is not connected");
  if (w.peer >= peers_.size()) {
    return set_error(-EINVAL, "post_write: peer " + std::to_string(w.peer) + " is not one of the " +
                                  std::to_string(peers_.size()) + " connected ranks");
  }
  if ((w.flags & ~uint32_t{COURIER_NIC_WRITE_IMM}) != 0) {
    return set_error(-EINVAL, "post_write: unknown flags");
  }
  *local = static_cast<const LocalRegion*>(w.local_mr);
  return check_local(*local, w.local_offset, w.length, "post_write");
}

bool Endpoint::find_write_target(const Peer& peer, const courier_nic_write_v1& w,
                                 RemoteRegion* region, std::string* why) const {
  if (read_registration(peer, w.remote.key, region, why) != 0) return false;
  if (w.remote_offset > region->length || w.length > region->length - w.remote_offset) {
    *why = "[" + std::to_string(w.remote_offset) + ", +" + std::to_string(w.length) +
           ") is outside the remote region of " + std::to_string(region->length) + " bytes";
    return false;
  }
  return true;
}

// The immediate data of `w`, delivered once its bytes landed.
Message Endpoint::imm_message(const courier_nic_write_v1& w) const {
  Message notify;
  notify.kind = MessageKind::imm;
  notify.sender = static_cast<uint32_t>(rank_);
  notify.length = w.length;
  notify.imm = w.imm & 0xFFFFFFFFu;  // 4 bytes of immediate data, as on verbs
  return notify;
}

int Endpoint::queue_device_write(Peer& peer, const courier_nic_write_v1& w,
                                 const RemoteRegion& region, const std::byte* src,
                                 bool device_source) {
  const bool imm = (w.flags & COURIER_NIC_WRITE_IMM) != 0;
  Op op;
  op.cookie = w.cookie;
  if (w.length > 0) {
    std::byte* dst = nullptr;
    std::string why;
    if (map_remote(peer, region, w.remote_offset, &dst, &why) != 0) {
      set_error(-EIO, write_to_rank(w.peer) + why);
      queue_failed(peer, w.cookie, -EIO);
      return 0;
    }
    op.dst = dst;
    op.src = src;
    op.bytes = w.length;
    op.state = State::deferred;
  } else {
    op.state = imm ? State::message_ready : State::done;
  }
  op.device_source = device_source;
  op.has_message = imm;
  op.message = imm_message(w);
  if (options_.linger_ns != 0 || options_.trace) op.posted_ns = last_post_ns_ = monotonic_ns();
  peer.ops.push_back(op);  // poll() starts it
  ++in_flight_;
  return 0;
}

int Endpoint::queue_host_write(Peer& peer, const courier_nic_write_v1& w, const std::byte* src,
                               uint32_t source_kind) {
  if (w.length > kMaxHostTargetWrite) {
    set_error(-EMSGSIZE, write_to_rank(w.peer) + std::to_string(w.length) +
                             " bytes into host memory exceed nic-ce's " +
                             std::to_string(kMaxHostTargetWrite) + "-byte limit for such targets");
    queue_failed(peer, w.cookie, -EMSGSIZE);
    return 0;
  }
  // The bytes as they are now: the messages carry a copy.
  std::vector<std::byte> bytes(w.length);
  if (w.length > 0) {
    if (source_kind == COURIER_MEM_CUDA) {
      cudaError_t rc = copy_now(bytes.data(), src, w.length);
      if (rc != cudaSuccess) {
        set_cuda_error(rc, write_to_rank(w.peer) + "reading the source");
        queue_failed(peer, w.cookie, -EIO);
        return 0;
      }
    } else {
      std::memcpy(bytes.data(), src, w.length);
    }
  }
  for (uint64_t done = 0; done < w.length; done += kInlineBytes) {
    Op piece;
    piece.state = State::message_ready;
    piece.report = false;
    piece.has_message = true;
    piece.message.kind = MessageKind::host_write;
    piece.message.sender = static_cast<uint32_t>(rank_);
    piece.message.key = w.remote.key;
    piece.message.offset = w.remote_offset + done;
    piece.message.length = std::min<uint64_t>(kInlineBytes, w.length - done);
    std::memcpy(piece.message.payload, bytes.data() + done, piece.message.length);
    peer.ops.push_back(piece);
  }
  // What completes the write: its immediate data, else its last piece.
  const bool imm = (w.flags & COURIER_NIC_WRITE_IMM) != 0;
  if (!imm && w.length > 0) {
    peer.ops.back().report = true;
    peer.ops.back().cookie = w.cookie;
    ++in_flight_;
    return 0;
  }
  Op last;
  last.cookie = w.cookie;
  if (imm) {
    last.state = State::message_ready;
    last.has_message = true;
    last.message = imm_message(w);
  } else {
    last.state = State::done;
  }
  peer.ops.push_back(last);
  ++in_flight_;
  return 0;
}

void Endpoint::queue_failed(Peer& peer, uint64_t cookie, int status) {
  Op op;
  op.state = State::done;
  op.cookie = cookie;
  op.status = status;
  peer.ops.push_back(op);
  ++in_flight_;
}

}  // namespace courier::nic_ce
