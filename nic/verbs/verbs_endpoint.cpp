#include "verbs_endpoint.hpp"

#include <arpa/inet.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>
#include <random>

#include "verbs_device.hpp"
#include "verbs_error.hpp"

namespace courier::verbs {
namespace {

// Completions reaped per ibv_poll_cq call.
constexpr uint32_t kPollBatch = 64;
// Largest RDMA write (the IB limit is 2^31 bytes).
constexpr uint64_t kMaxWrite = uint64_t{1} << 31;
// wr_id of posted receives; sends use their slot index. Completions are told
// apart by wr_id because opcode is undefined in error completions.
constexpr uint64_t kReceiveTag = uint64_t{1} << 63;
// With every peer connected, poll() looks at the handshake queue once every
// this many calls, to answer a peer that still waits for us.
constexpr uint32_t kHandshakeServicePeriod = 64;

const char* op_name(uint32_t op) { return courier_nic_atomic_name(op); }

uint64_t random_id() {
  std::random_device device;
  const uint64_t high = device(), low = device();
  return (high << 32) ^ low ^ static_cast<uint64_t>(getpid());
}

}  // namespace

void EndpointSet::add(Endpoint* endpoint) {
  std::lock_guard lock(mutex_);
  endpoints_.push_back(endpoint);
}

void EndpointSet::remove(Endpoint* endpoint) {
  std::lock_guard lock(mutex_);
  std::erase(endpoints_, endpoint);
}

void EndpointSet::service_siblings(const Endpoint* caller) {
  std::lock_guard lock(mutex_);
  for (Endpoint* endpoint : endpoints_) {
    if (endpoint != caller && endpoint->handshake_ready()) endpoint->service_handshake();
  }
}

Endpoint::Endpoint(const Device& device, const courier_host_services_v1* host,
                   const EndpointOptions& options, LogFn log, EndpointSet* siblings)
    : device_(device), host_(host), options_(options), log_(std::move(log)), siblings_(siblings) {
  if (siblings_) siblings_->add(this);
}

Endpoint::~Endpoint() {
  // Out of the set first: no sibling may service us while we are taken apart.
  if (siblings_) siblings_->remove(this);
  // Queue pairs go before the completion queues they report to, and before
  // the regions they may still reference (member order would do the reverse).
  peers_.clear();
  ud_qp_.reset();
  scratch_mr_.reset();
  ud_mr_.reset();
}

int Endpoint::open(const Device& device, const courier_host_services_v1* host,
                   const EndpointOptions& options, LogFn log, EndpointSet* siblings,
                   std::unique_ptr<Endpoint>* out) {
  if (options.tx_depth == 0) return set_error(-EINVAL, "ep_open: tx_depth must be at least 1");
  std::unique_ptr<Endpoint> ep(new (std::nothrow)
                                   Endpoint(device, host, options, std::move(log), siblings));
  if (!ep) return set_error(-ENOMEM, "ep_open: out of memory");
  const PortInfo& port = device.port();
  EndpointAddress& local = ep->local_;
  local.link_layer = port.link_layer;
  local.port = port.number;
  local.lid = port.lid;
  local.gid_index = options.gid_index;
  local.gid = options.gid;
  local.mtu = static_cast<uint8_t>(port.active_mtu);
  local.endpoint_id = random_id();
  if (!port.ethernet() && !local.global() && port.lid == 0) {
    return set_error(-ENETUNREACH, "%s port %u is InfiniBand without a LID (no subnet manager?)",
                     device.info().name.c_str(), port.number);
  }

  ep->slots_.resize(options.tx_depth);
  ep->free_slots_.reserve(options.tx_depth);
  for (uint32_t i = options.tx_depth; i > 0; --i) ep->free_slots_.push_back(i - 1);
  if (options.atomic_ops != 0) {
    ep->scratch_.assign(1, 0);
    std::string warning;
    const int rc = MemoryRegion::register_memory(
        device, host, RegistrationPolicy{}, ep.get(), ep->scratch_.data(),
        ep->scratch_.size() * sizeof(uint64_t), COURIER_MEM_HOST, &ep->scratch_mr_, &warning);
    if (rc != 0) return rc;
  }
  const int rc = ep->open_handshake_queue();
  if (rc != 0) return rc;
  *out = std::move(ep);
  return 0;
}

int Endpoint::name(void* buf, size_t* len) const {
  if (!buf || !len) return set_error(-EINVAL, "ep_name: NULL buffer or length");
  if (*len < kNameBytes) {
    const size_t have = *len;
    *len = kNameBytes;
    return set_error(-ENOSPC, "ep_name: %zu bytes given, the name needs %zu", have, kNameBytes);
  }
  encode_name(local_, static_cast<std::byte*>(buf));
  *len = kNameBytes;
  return 0;
}

int Endpoint::register_memory(void* addr, size_t len, uint32_t mem_kind,
                              std::unique_ptr<MemoryRegion>* out, courier_nic_rkey_v1* rkey) {
  if (!rkey) return set_error(-EINVAL, "mr_register: NULL rkey output");
  std::string warning;
  const int rc = MemoryRegion::register_memory(device_, host_, options_.registration, this, addr,
                                               len, mem_kind, out, &warning);
  if (rc != 0) return rc;
  if (!warning.empty()) log_(COURIER_LOG_WARN, warning);
  rkey->key = (*out)->rkey();
  rkey->base = (*out)->base();
  ++registered_;
  return 0;
}

int Endpoint::deregister_memory(MemoryRegion* region) {
  if (!region || region->owner() != this) {
    return set_error(-EINVAL, "mr_deregister: the region was not registered on this endpoint");
  }
  delete region;
  --registered_;
  return 0;
}

int Endpoint::check_peer(uint32_t peer, const char* what) const {
  if (!connected_) return set_error(-ENOTCONN, "%s: the endpoint is not connected", what);
  if (peer >= peers_.size()) {
    return set_error(-EINVAL, "%s: peer %u out of range (%zu ranks)", what, peer, peers_.size());
  }
  if (!peers_[peer].failure.empty()) {
    return set_error(-ECONNABORTED, "%s: the connection to rank %u failed earlier: %s", what, peer,
                     peers_[peer].failure.c_str());
  }
  return 0;
}

int Endpoint::acquire_slot(uint32_t peer, uint64_t bytes, uint64_t cookie, Op op, uint32_t* slot) {
  Peer& p = peers_[peer];
  if (free_slots_.empty() || p.inflight >= p.qp->send_depth()) return -EAGAIN;
  if (options_.max_inflight_bytes != 0 && p.inflight_bytes != 0 &&
      p.inflight_bytes + bytes > options_.max_inflight_bytes) {
    return -EAGAIN;  // COURIER_MAX_INFLIGHT_BYTES: let earlier writes finish first
  }
  *slot = free_slots_.back();
  free_slots_.pop_back();
  slots_[*slot] = Slot{cookie, bytes, peer, op, true};
  ++p.inflight;
  p.inflight_bytes += bytes;
  return 0;
}

void Endpoint::release_slot(uint32_t slot) {
  Slot& s = slots_[slot];
  Peer& p = peers_[s.peer];
  --p.inflight;
  p.inflight_bytes -= s.bytes;
  s.busy = false;
  free_slots_.push_back(slot);
}

int Endpoint::post(uint32_t peer, ibv_send_wr* wr, uint32_t slot, const char* what) {
  ibv_send_wr* bad = nullptr;
  const int rc = ibv_post_send(peers_[peer].qp->get(), wr, &bad);
  if (rc != 0) {
    release_slot(slot);
    const int code = rc > 0 ? rc : EIO;
    // ENOMEM: the send queue is full despite our accounting (a completion
    // not yet reaped): the caller polls and retries.
    if (code == ENOMEM) return -EAGAIN;
    return set_error(-code, "%s to rank %u: %s", what, peer,
                     describe_verbs_error("ibv_post_send", rc).c_str());
  }
  return 0;
}

int Endpoint::post_write(const courier_nic_write_v1& w) {
  int rc = check_peer(w.peer, "post_write");
  if (rc != 0) return rc;
  if (options_.lazy_connect && !peers_[w.peer].done()) {
    rc = connect_on_demand(w.peer, "post_write");
    if (rc != 0) return rc;
  }
  if (w.flags & ~uint32_t{COURIER_NIC_WRITE_IMM}) {
    return set_error(-EINVAL, "post_write: unknown flags 0x%x", w.flags);
  }
  if (w.length == 0) return set_error(-EINVAL, "post_write: zero-length write");
  auto* local = static_cast<MemoryRegion*>(w.local_mr);
  if (!local || local->owner() != this) {
    return set_error(-EINVAL, "post_write: local_mr was not registered on this endpoint");
  }
  if (w.length > kMaxWrite) {
    return set_error(-EMSGSIZE, "post_write: %llu bytes exceed the 2 GiB RDMA write limit",
                     static_cast<unsigned long long>(w.length));
  }
  if (!local->covers(w.local_offset, w.length)) {
    return set_error(-EINVAL,
                     "post_write: local range [%llu, +%llu) is outside the %zu-byte region",
                     static_cast<unsigned long long>(w.local_offset),
                     static_cast<unsigned long long>(w.length), local->length());
  }
  const bool imm = (w.flags & COURIER_NIC_WRITE_IMM) != 0;
  uint32_t slot = 0;
  rc = acquire_slot(w.peer, w.length, w.cookie, imm ? Op::write_imm : Op::write, &slot);
  if (rc != 0) return rc;

  ibv_sge sge{};
  ibv_send_wr wr{};
  wr.wr_id = slot;
  wr.opcode = imm ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE;
  wr.send_flags = IBV_SEND_SIGNALED;
  sge.addr = local->base() + w.local_offset;
  sge.length = static_cast<uint32_t>(w.length);
  sge.lkey = local->lkey();
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.wr.rdma.remote_addr = w.remote.base + w.remote_offset;
  wr.wr.rdma.rkey = static_cast<uint32_t>(w.remote.key);
  // Verbs carry 32 bits of immediate data, in network byte order.
  if (imm) wr.imm_data = htonl(static_cast<uint32_t>(w.imm));
  return post(w.peer, &wr, slot, imm ? "RDMA write with immediate" : "RDMA write");
}

int Endpoint::post_atomic(const courier_nic_atomic_v1& a) {
  int rc = check_peer(a.peer, "post_atomic");
  if (rc != 0) return rc;
  if (options_.lazy_connect && !peers_[a.peer].done()) {
    rc = connect_on_demand(a.peer, "post_atomic");
    if (rc != 0) return rc;
  }
  if (options_.atomic_ops == 0) {
    return set_error(-EINVAL,
                     "post_atomic: the endpoint was opened without "
                     "COURIER_NIC_EP_ATOMICS");
  }
  if (courier_nic_atomic_width(a.op) == 0) {
    return set_error(-EINVAL, "post_atomic: op 0x%x is not exactly one COURIER_NIC_ATOMIC_* bit",
                     a.op);
  }
  if ((options_.atomic_ops & a.op) == 0) {
    return set_error(-EOPNOTSUPP, "post_atomic: %s is not offered (verbs atomics are 64-bit)",
                     op_name(a.op));
  }
  // The address the NIC sees must be aligned, or the target NAKs and the
  // connection dies: check it here and refuse the one atomic instead.
  if ((a.remote.base + a.remote_offset) % 8 != 0) {
    return set_error(-EINVAL,
                     "post_atomic: %s remote address (base 0x%llx + offset %llu) is not 8-byte "
                     "aligned",
                     op_name(a.op), static_cast<unsigned long long>(a.remote.base),
                     static_cast<unsigned long long>(a.remote_offset));
  }
  const bool fetching = a.op != COURIER_NIC_ATOMIC_ADD_U64;
  uint64_t result_addr = 0;
  uint32_t result_lkey = 0;
  if (fetching) {
    auto* result = static_cast<MemoryRegion*>(a.result_mr);
    if (!result || result->owner() != this) {
      return set_error(-EINVAL, "post_atomic: %s needs a result_mr registered on this endpoint",
                       op_name(a.op));
    }
    if (a.result_offset % 8 != 0 || !result->covers(a.result_offset, 8)) {
      return set_error(-EINVAL,
                       "post_atomic: %s result offset %llu is unaligned or outside the region",
                       op_name(a.op), static_cast<unsigned long long>(a.result_offset));
    }
    result_addr = result->base() + a.result_offset;
    result_lkey = result->lkey();
  } else {
    // Verbs have no plain ADD: a fetch-add whose old value lands in scratch.
    result_addr = scratch_mr_->base();
    result_lkey = scratch_mr_->lkey();
  }
  const bool cas = a.op == COURIER_NIC_ATOMIC_CAS_U64;
  uint32_t slot = 0;
  rc = acquire_slot(a.peer, 8, a.cookie, cas ? Op::compare_swap : Op::fetch_add, &slot);
  if (rc != 0) return rc;
  ibv_sge sge{result_addr, 8, result_lkey};
  ibv_send_wr wr{};
  wr.wr_id = slot;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = cas ? IBV_WR_ATOMIC_CMP_AND_SWP : IBV_WR_ATOMIC_FETCH_AND_ADD;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.atomic.remote_addr = a.remote.base + a.remote_offset;
  wr.wr.atomic.rkey = static_cast<uint32_t>(a.remote.key);
  wr.wr.atomic.compare_add = cas ? a.compare : a.operand;
  wr.wr.atomic.swap = cas ? a.operand : 0;
  return post(a.peer, &wr, slot, op_name(a.op));
}

int Endpoint::post_receives(Peer& peer, uint32_t count) {
  // Writes with immediate data consume a receive; it carries no buffer.
  for (uint32_t i = 0; i < count; ++i) {
    ibv_recv_wr wr{};
    wr.wr_id = kReceiveTag;
    ibv_recv_wr* bad = nullptr;
    const int rc = ibv_post_recv(peer.qp->get(), &wr, &bad);
    if (rc != 0) {
      return set_error(-(rc > 0 ? rc : EIO), "posting receives: %s",
                       describe_verbs_error("ibv_post_recv", rc).c_str());
    }
  }
  return 0;
}

uint32_t Endpoint::translate(const ibv_wc& wc, courier_nic_completion_v1* out) {
  *out = {};
  if (wc.wr_id & kReceiveTag) {
    auto found = peer_of_qpn_.find(wc.qp_num);
    const uint32_t peer = found == peer_of_qpn_.end() ? UINT32_MAX : found->second;
    if (wc.status == IBV_WC_WR_FLUSH_ERR) return 0;  // the connection failed; already reported
    out->kind = COURIER_NIC_COMP_RX_IMM;
    out->peer = peer;
    if (wc.status != IBV_WC_SUCCESS) {
      out->status = wc_status_to_errno(wc.status);
      char text[384];
      std::snprintf(text, sizeof text,
                    "incoming write with immediate data from rank %u failed: %s (vendor error "
                    "0x%x)",
                    peer, describe_wc_status(wc.status).c_str(), wc.vendor_err);
      set_error(out->status, "%s", text);
      if (peer != UINT32_MAX && peers_[peer].failure.empty()) {
        peers_[peer].failure = text;
        log_(COURIER_LOG_ERROR, std::string(text) + ": the queue pair is now in the error state");
      }
      return 1;
    }
    if (peer != UINT32_MAX) post_receives(peers_[peer], 1);
    out->status = COURIER_OK;
    out->imm = ntohl(wc.imm_data);
    out->length = wc.byte_len;
    return 1;
  }
  const uint32_t slot = static_cast<uint32_t>(wc.wr_id);
  if (slot >= slots_.size() || !slots_[slot].busy) {
    set_error(-EIO, "poll: completion for unknown work request %llu",
              static_cast<unsigned long long>(wc.wr_id));
    return 0;
  }
  const Slot s = slots_[slot];
  release_slot(slot);
  out->kind = COURIER_NIC_COMP_TX;
  out->cookie = s.cookie;
  out->peer = s.peer;
  out->status = wc_status_to_errno(wc.status);
  if (wc.status != IBV_WC_SUCCESS) {
    static constexpr const char* kOps[] = {"RDMA write", "RDMA write with immediate",
                                           "atomic fetch-add", "atomic compare-and-swap"};
    char text[512];
    std::snprintf(text, sizeof text, "%s to rank %u (cookie %llu) failed: %s (vendor error 0x%x)",
                  kOps[static_cast<int>(s.op)], s.peer, static_cast<unsigned long long>(s.cookie),
                  describe_wc_status(wc.status).c_str(), wc.vendor_err);
    Peer& p = peers_[s.peer];
    const bool first = p.failure.empty();
    if (first) {
      p.failure = text;
      log_(COURIER_LOG_ERROR, std::string(text) +
                                  ": the queue pair is now in the error state; later "
                                  "operations to this rank fail");
    }
    // A flushed request names the error that failed the connection.
    set_error(out->status, "%s",
              first ? text : (std::string(text) + " after: " + p.failure).c_str());
  }
  return 1;
}

int Endpoint::poll(courier_nic_completion_v1* out, uint32_t max) {
  if (!out && max > 0) return set_error(-EINVAL, "poll: NULL output array");
  if (!connected_) return 0;
  // A peer may still need our answer (verbs_endpoint_connect.cpp); while
  // connections made on first use are under way, every poll looks.
  if (++polls_ % kHandshakeServicePeriod == 0 || handshaking_ > 0) {
    const int rc = service_handshake();
    if (rc != 0) return rc;
  }
  uint32_t produced = 0;
  ibv_wc wcs[kPollBatch];
  while (produced < max) {
    const int want = static_cast<int>(std::min(max - produced, kPollBatch));
    const int got = ibv_poll_cq(cq_->get(), want, wcs);
    if (got < 0) {
      if (produced > 0) break;
      return set_error(-EIO, "poll: ibv_poll_cq failed on %s (completion queue overrun?)",
                       device_.info().name.c_str());
    }
    for (int i = 0; i < got; ++i) produced += translate(wcs[i], &out[produced]);
    if (got < want) break;
  }
  return static_cast<int>(produced);
}

}  // namespace courier::verbs
