#include "skeleton_endpoint.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <new>
#include <utility>

#include "skeleton_backend.hpp"
#include "skeleton_error.hpp"

namespace courier::skeleton {

Endpoint::Endpoint(const Backend& backend, const courier_nic_ep_attr_v1& attr)
    : backend_(backend), tx_depth_(attr.tx_depth), regions_(this), completions_(attr.rx_depth) {}

int Endpoint::open(const Backend& backend, const courier_nic_ep_attr_v1& attr,
                   std::unique_ptr<Endpoint>* out) {
  if (attr.tx_depth == 0 || attr.rx_depth == 0) {
    return fail(-EINVAL, "ep_open: tx_depth %u and rx_depth %u must both be at least 1",
                attr.tx_depth, attr.rx_depth);
  }
  std::unique_ptr<Endpoint> endpoint(new (std::nothrow) Endpoint(backend, attr));
  if (!endpoint) return fail(-ENOMEM, "ep_open: out of memory");
  // A NIC creates its queue pairs and completion queue here, sized by
  // tx_depth and rx_depth. The skeleton listens under a fresh name, which
  // peers will connect to.
  if (const int rc = listen_on_fresh_address(backend.socket_buffer_bytes(), &endpoint->listener_,
                                             &endpoint->address_);
      rc != 0) {
    return rc;
  }
  *out = std::move(endpoint);
  return 0;
}

int Endpoint::name(void* buffer, size_t* length) const {
  if (!buffer || !length) return fail(-EINVAL, "ep_name: NULL buffer or length");
  if (*length < sizeof address_) {
    const size_t capacity = *length;
    *length = sizeof address_;
    return fail(-ENOSPC, "ep_name: the buffer holds %zu bytes, the name needs %zu", capacity,
                sizeof address_);
  }
  std::memcpy(buffer, &address_, sizeof address_);
  *length = sizeof address_;
  return 0;
}

int Endpoint::connect(uint32_t num_peers, const void* names, size_t stride) {
  if (num_peers == 0 || !names) return fail(-EINVAL, "ep_connect: no names given");
  if (stride < sizeof(EndpointAddress)) {
    return fail(-EINVAL, "ep_connect: stride %zu is shorter than a name (%zu bytes, max_ep_name)",
                stride, sizeof(EndpointAddress));
  }
  if (!peers_.empty()) {
    return fail(-EALREADY, "ep_connect: already connected to %zu ranks", peers_.size());
  }
  const auto* table = static_cast<const std::byte*>(names);
  auto name_of = [&](uint32_t rank) {
    EndpointAddress address;
    std::memcpy(&address, table + size_t{rank} * stride, sizeof address);
    return address;
  };

  // Our rank is where our own name is: the target reports it as the sender
  // of our writes (CAP_IMM_SOURCE).
  uint32_t own_rank = num_peers;
  for (uint32_t rank = 0; rank < num_peers && own_rank == num_peers; ++rank) {
    const EndpointAddress address = name_of(rank);
    if (std::memcmp(&address, &address_, sizeof address) == 0) own_rank = rank;
  }
  if (own_rank == num_peers) {
    return fail(-EINVAL, "ep_connect: this endpoint's own name is not among the %u names",
                num_peers);
  }

  // A NIC moves each queue pair to "ready to send" with the peer's address
  // here (verbs: ibv_modify_qp to RTR and RTS). The skeleton opens one
  // stream per peer, itself included (CAP_LOOPBACK).
  std::vector<std::unique_ptr<OutgoingLink>> links;
  for (uint32_t rank = 0; rank < num_peers; ++rank) {
    char what[48];
    std::snprintf(what, sizeof what, "ep_connect to rank %u", rank);
    Socket stream;
    if (const int rc = connect_to(name_of(rank), backend_.socket_buffer_bytes(), what, &stream);
        rc != 0) {
      return rc;
    }
    links.push_back(
        std::make_unique<OutgoingLink>(rank, own_rank, std::move(stream), completions_));
  }
  own_rank_ = own_rank;
  peers_ = std::move(links);
  backend_.log(COURIER_LOG_DEBUG, "endpoint connected as rank %u of %u", own_rank_, num_peers);
  return 0;
}

int Endpoint::register_memory(void* address, size_t length, uint32_t mem_kind, MemoryRegion** out,
                              courier_nic_rkey_v1* rkey) {
  if (!address || length == 0 || !out || !rkey) {
    return fail(-EINVAL, "mr_register: NULL address, zero length or NULL output (%p, %zu bytes)",
                address, length);
  }
  if (mem_kind != COURIER_MEM_HOST) {
    // A NIC that can reach GPU memory registers a dmabuf here (the core's
    // host services export one, COURIER_HOST_HAS(host, dmabuf_export)).
    return fail(-EOPNOTSUPP, "mr_register: memory kind 0x%x is not supported, only host memory",
                mem_kind);
  }
  return regions_.add(address, length, out, rkey);
}

int Endpoint::post_write(const courier_nic_write_v1& write) {
  if (write.peer >= peers_.size()) {
    return fail(-EINVAL, "post_write: no rank %u (connected to %zu ranks)", write.peer,
                peers_.size());
  }
  if (write.length == 0) return fail(-EINVAL, "post_write to rank %u: zero length", write.peer);
  if (write.length > backend_.props().max_msg_size) {
    return fail(-EINVAL, "post_write to rank %u: %llu bytes exceed max_msg_size %llu (%s)",
                write.peer, static_cast<unsigned long long>(write.length),
                static_cast<unsigned long long>(backend_.props().max_msg_size), kMaxMsgSizeKnob);
  }
  if (write.flags & ~uint32_t{COURIER_NIC_WRITE_IMM}) {
    return fail(-EINVAL, "post_write to rank %u: unknown flags 0x%x", write.peer, write.flags);
  }
  if (const int rc = regions_.check_local(write.local_mr, write.local_offset, write.length);
      rc != 0) {
    return rc;
  }
  // The send queue is full: the core polls and posts again (never block).
  if (tx_outstanding_ >= tx_depth_) {
    return fail(-EAGAIN, "post_write to rank %u: %u writes in flight, the endpoint's tx_depth",
                write.peer, tx_depth_);
  }
  const auto* source = static_cast<const MemoryRegion*>(write.local_mr);
  const bool with_imm = (write.flags & COURIER_NIC_WRITE_IMM) != 0;
  const int rc = peers_[write.peer]->post(
      write.remote.key, write.remote_offset, source->address + write.local_offset, write.length,
      with_imm, static_cast<uint32_t>(write.imm),  // 4 bytes of immediate data, like verbs
      write.cookie);
  if (rc != 0) return rc;
  ++tx_outstanding_;
  return 0;
}

int Endpoint::poll(courier_nic_completion_v1* out, uint32_t max) {
  if (!out && max > 0) return fail(-EINVAL, "poll: NULL output for %u completions", max);
  // A NIC moves data on its own and poll only reads the CQ; the skeleton's
  // "NIC" runs here, so poll drives it (hence no CAP_PASSIVE_TARGET).
  progress();
  uint32_t tx_taken = 0;
  const uint32_t taken = completions_.pop(out, max, &tx_taken);
  tx_outstanding_ -= tx_taken;
  return static_cast<int>(taken);
}

void Endpoint::progress() {
  for (;;) {
    Socket stream;
    const int rc = accept_one(listener_, &stream);
    if (rc == 0) break;
    if (rc < 0) {
      backend_.log(COURIER_LOG_WARN, "%s", last_error());
      break;
    }
    incoming_.push_back(
        std::make_unique<IncomingLink>(std::move(stream), regions_, completions_, backend_));
  }
  for (auto& peer : peers_) peer->progress();
  // A stream that closed or broke is dropped; its initiator has gone (the
  // link logged anything unusual).
  std::erase_if(incoming_,
                [](const std::unique_ptr<IncomingLink>& link) { return link->progress() != 0; });
}

}  // namespace courier::skeleton
