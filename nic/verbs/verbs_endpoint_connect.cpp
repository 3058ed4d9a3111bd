// Connecting a verbs endpoint: RC queue pairs need each other's queue pair
// numbers, and the all-gathered endpoint names can only carry the UD queue
// pair that every endpoint opens first. So each side creates one RC queue
// pair per peer and tells the peer its number in a "hello" over UD (wire
// format in docs/wire-formats.md):
//   offset 0 u32 magic 0x48565243 ("CRVH")  4 u32 sender's RC QPN for the receiver
//   8 u64 sender endpoint id  16 u64 receiver endpoint id  24 u32 sender PSN  28 u32 flags
// flags: kHaveYours, the sender has the receiver's QPN (its queue pair
// towards the receiver is in RTS); kDone, the sender also knows the receiver
// has its QPN, so it needs nothing more.
// Rules: on a peer's first hello, connect our queue pair to it; a hello with
// kHaveYours confirms; every hello without kDone is answered with our state.
// A side is done with a peer once it has the peer's QPN and a confirmation.
// Until then it resends every 20 ms (UD may drop), and since an unfinished
// peer's hellos always lack kDone, the side that finished first keeps
// answering them, from poll() once connect() has returned.
// With COURIER_IB_CONNECT=lazy, connect() opens only the queue pair to
// itself; the first post to a peer opens its queue pair and sends the first
// hello (the post answers -EAGAIN until the peer confirmed), and a hello
// from a peer without one opens it on the receiving side. A side that
// cannot open the queue pair (the device's max_qp reached) answers with
// kRefused and its QPN 0, so the asking side fails at once, naming it.
#include <arpa/inet.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <random>
#include <thread>

#include "verbs_device.hpp"
#include "verbs_endpoint.hpp"
#include "verbs_error.hpp"

namespace courier::verbs {
namespace {

constexpr uint32_t kHelloMagic = 0x48565243;
constexpr uint32_t kHaveYours = 1u << 0;
constexpr uint32_t kDone = 1u << 1;
constexpr uint32_t kRefused = 1u << 2;  // the sender could not open a queue pair for us
constexpr uint32_t kQkey = 0x43525651;
constexpr uint32_t kGrhBytes = 40;      // UD receives start with the global routing header
constexpr uint32_t kUdSlotBytes = 128;  // one hello (+ GRH) per slot
constexpr uint32_t kUdReceives = 256;
constexpr uint32_t kUdSends = 256;
constexpr auto kResendPeriod = std::chrono::milliseconds(20);

uint32_t random_psn() {
  std::random_device device;
  return device() & 0xffffff;  // PSNs are 24 bits
}

}  // namespace

struct Endpoint::Hello {
  uint32_t magic;
  uint32_t rc_qpn;
  uint64_t sender_id;
  uint64_t receiver_id;
  uint32_t psn;
  uint32_t flags;
};

int Endpoint::open_handshake_queue() {
  static_assert(sizeof(Hello) == 32, "the hello wire format is 32 bytes");
  int rc = CompletionQueue::create(device_, static_cast<int>(kUdReceives + kUdSends), &ud_cq_);
  if (rc != 0) return rc;
  rc = QueuePair::create_ud(device_, ud_cq_->get(), std::max(kUdReceives, kUdSends), &ud_qp_);
  if (rc != 0) return rc;
  rc = ud_qp_->activate_ud(local_.port, kQkey);
  if (rc != 0) return rc;
  local_.ud_qpn = ud_qp_->qpn();
  local_.qkey = kQkey;
  ud_buffer_.resize(size_t{kUdSlotBytes} * (kUdReceives + kUdSends));
  std::string warning;
  rc = MemoryRegion::register_memory(device_, host_, RegistrationPolicy{}, this, ud_buffer_.data(),
                                     ud_buffer_.size(), COURIER_MEM_HOST, &ud_mr_, &warning);
  if (rc != 0) return rc;
  // Receives are posted now, so hellos from peers that connect before us wait here.
  for (uint32_t i = 0; i < kUdReceives; ++i) {
    ibv_sge sge{ud_mr_->base() + uint64_t{i} * kUdSlotBytes, kUdSlotBytes, ud_mr_->lkey()};
    ibv_recv_wr wr{};
    wr.wr_id = i;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    rc = ibv_post_recv(ud_qp_->get(), &wr, &bad);
    if (rc != 0) {
      return set_error(-(rc > 0 ? rc : EIO), "handshake queue: %s",
                       describe_verbs_error("ibv_post_recv", rc).c_str());
    }
  }
  return 0;
}

int Endpoint::send_hello(uint32_t peer) {
  // A full send queue: skip; the next resend (or the peer's) tries again.
  if (ud_sends_inflight_ >= kUdSends) return 0;
  Peer& p = peers_[peer];
  const uint32_t flags =
      (p.have_theirs ? kHaveYours : 0u) | (p.done() ? kDone : 0u) | (p.qp ? 0u : kRefused);
  Hello hello{kHelloMagic,        p.qp ? p.qp->qpn() : 0u,
              local_.endpoint_id, p.address.endpoint_id,
              p.local_psn,        flags};
  p.last_hello = std::chrono::steady_clock::now();
  const uint32_t slot = kUdReceives + (ud_next_send_++ % kUdSends);
  std::byte* where = ud_buffer_.data() + size_t{slot} * kUdSlotBytes;
  std::memcpy(where, &hello, sizeof hello);
  ibv_sge sge{ud_mr_->base() + uint64_t{slot} * kUdSlotBytes, sizeof hello, ud_mr_->lkey()};
  ibv_send_wr wr{};
  wr.wr_id = slot;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.ud.ah = p.ah->get();
  wr.wr.ud.remote_qpn = p.address.ud_qpn;
  wr.wr.ud.remote_qkey = p.address.qkey;
  ibv_send_wr* bad = nullptr;
  const int rc = ibv_post_send(ud_qp_->get(), &wr, &bad);
  if (rc != 0) {
    return set_error(-(rc > 0 ? rc : EIO), "connecting to rank %u: sending the hello: %s", peer,
                     describe_verbs_error("ibv_post_send", rc).c_str());
  }
  ++ud_sends_inflight_;
  return 0;
}

int Endpoint::connect_peer(uint32_t peer, uint32_t remote_qpn, uint32_t remote_psn) {
  Peer& p = peers_[peer];
  // Atomics in flight per queue pair: what the device allows, at most 16.
  const auto depth = [](int limit) { return static_cast<uint8_t>(std::clamp(limit, 0, 16)); };
  int rc = p.qp->connect_rc(local_, p.address, remote_qpn, remote_psn, p.local_psn,
                            depth(device_.info().max_qp_rd_atom),
                            depth(device_.info().max_qp_init_rd_atom), options_.tuning);
  if (rc != 0) {
    return set_error(rc, "connecting to rank %u: %s", peer, std::string(last_error()).c_str());
  }
  p.have_theirs = true;
  return post_receives(p, recv_depth_);
}

int Endpoint::connect_self(uint32_t self) {
  // A queue pair connected to itself: loopback through the NIC.
  Peer& p = peers_[self];
  int rc = connect_peer(self, p.qp->qpn(), p.local_psn);
  p.confirmed = true;
  return rc;
}

void Endpoint::handle_hello(const Hello& hello) {
  if (hello.magic != kHelloMagic || hello.receiver_id != local_.endpoint_id) return;
  auto found = peer_of_id_.find(hello.sender_id);
  if (found == peer_of_id_.end()) return;  // not one of our peers (a stale endpoint)
  const uint32_t peer = found->second;
  Peer& p = peers_[peer];
  if (hello.flags & kRefused) {
    if (p.failure.empty()) {
      p.failure = "rank " + std::to_string(peer) +
                  " could not open a queue pair for this connection (its device is at its "
                  "queue-pair limit, max_qp: see that rank's log)";
    }
    return;
  }
  if (!p.qp && p.failure.empty()) {  // lazy_connect: the peer asked first
    if (open_peer(peer) != 0) {
      p.failure = last_error();
      log_(COURIER_LOG_ERROR, p.failure);
      if (p.ah) send_hello(peer);  // tells the peer (kRefused)
      return;
    }
    ++handshaking_;
  }
  if (!p.qp) return;
  if (!p.have_theirs && p.failure.empty()) {
    if (connect_peer(peer, hello.rc_qpn, hello.psn) != 0) {
      p.failure = last_error();
      return;
    }
  }
  const bool was_done = p.done();
  if (hello.flags & kHaveYours) p.confirmed = true;
  if (!was_done && p.done() && options_.lazy_connect && handshaking_ > 0) --handshaking_;
  if (!(hello.flags & kDone)) send_hello(peer);  // they still need something from us
}

int Endpoint::open_peer(uint32_t peer) {
  Peer& p = peers_[peer];
  int rc = 0;
  if (!p.ah && peer != self_) {
    rc = AddressHandle::create(device_,
                               make_ah_attr(local_, p.address, options_.tuning.traffic_class,
                                            options_.tuning.service_level),
                               &p.ah);
    if (rc != 0) return set_error(rc, "rank %u: %s", peer, std::string(last_error()).c_str());
  }
  rc = QueuePair::create_rc(device_, cq_->get(), cq_->get(), send_depth_, recv_depth_, &p.qp);
  if (rc != 0) {
    const std::string why = last_error();
    const int limit = device_.info().max_qp;
    if (rc == -ENOMEM && limit > 0) {  // what a device out of queue-pair contexts answers
      return set_error(rc,
                       "rank %u: cannot open a queue pair: %s holds at most max_qp %d and this "
                       "endpoint has %u RC queue pairs open (%s): %s",
                       peer, device_.info().name.c_str(), limit, open_qps_,
                       options_.lazy_connect
                           ? "one per peer it talks to"
                           : "one per rank of the job; COURIER_IB_CONNECT=lazy opens them on "
                             "first use",
                       why.c_str());
    }
    return set_error(rc, "rank %u: %s", peer, why.c_str());
  }
  ++open_qps_;
  p.local_psn = random_psn();
  peer_of_qpn_[p.qp->qpn()] = peer;
  return 0;
}

int Endpoint::connect_on_demand(uint32_t peer, const char* what) {
  std::lock_guard lock(handshake_mutex_);
  Peer& p = peers_[peer];
  if (p.done()) return 0;
  using Clock = std::chrono::steady_clock;
  const auto now = Clock::now();
  if (p.failure.empty() && !p.qp) {
    if (open_peer(peer) != 0) {
      p.failure = last_error();
    } else {
      ++handshaking_;
      p.asked = now;
      send_hello(peer);
      return -EAGAIN;
    }
  }
  if (p.failure.empty()) {
    if (p.asked == Clock::time_point{}) p.asked = now;  // it asked first: our clock starts now
    const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(now - p.asked);
    if (waited.count() >= options_.connect_timeout_ms) {
      p.failure = "no answer to the connection handshake within " +
                  std::to_string(options_.connect_timeout_ms) +
                  " ms (COURIER_IB_CONNECT_TIMEOUT_S): is rank " + std::to_string(peer) +
                  " running and on the same fabric?";
    } else {
      service_handshake_locked();
      if (p.done()) return 0;
      if (now - p.last_hello >= kResendPeriod) send_hello(peer);
      return -EAGAIN;
    }
  }
  return set_error(-ECONNREFUSED, "%s to rank %u: connecting on first use failed: %s", what, peer,
                   p.failure.c_str());
}

int Endpoint::service_handshake() {
  std::lock_guard lock(handshake_mutex_);
  return service_handshake_locked();
}

int Endpoint::service_handshake_locked() {
  ibv_wc wcs[16];
  for (;;) {
    const int got = ibv_poll_cq(ud_cq_->get(), 16, wcs);
    if (got < 0) return set_error(-EIO, "handshake queue: ibv_poll_cq failed");
    for (int i = 0; i < got; ++i) {
      const ibv_wc& wc = wcs[i];
      // wr_id tells receives (slots below kUdReceives) from sends: opcode
      // is undefined in error completions.
      if (wc.wr_id >= kUdReceives) {
        if (ud_sends_inflight_ > 0) --ud_sends_inflight_;
        continue;
      }
      if (wc.status == IBV_WC_SUCCESS && wc.byte_len >= kGrhBytes + sizeof(Hello)) {
        Hello hello;
        const std::byte* slot = ud_buffer_.data() + wc.wr_id * kUdSlotBytes;
        std::memcpy(&hello, slot + kGrhBytes, sizeof hello);
        handle_hello(hello);
      }
      if (wc.status == IBV_WC_WR_FLUSH_ERR) continue;
      ibv_sge sge{ud_mr_->base() + wc.wr_id * kUdSlotBytes, kUdSlotBytes, ud_mr_->lkey()};
      ibv_recv_wr wr{};
      wr.wr_id = wc.wr_id;
      wr.sg_list = &sge;
      wr.num_sge = 1;
      ibv_recv_wr* bad = nullptr;
      ibv_post_recv(ud_qp_->get(), &wr, &bad);
    }
    if (got < 16) return 0;
  }
}

int Endpoint::connect(uint32_t num_peers, const void* names, size_t stride) {
  if (connected_) return set_error(-EALREADY, "ep_connect: the endpoint is already connected");
  if (connect_failed_) {
    return set_error(-EINVAL,
                     "ep_connect: an earlier connect of this endpoint failed; close it and open "
                     "a new one");
  }
  // Any failure below leaves queue pairs half connected: no second attempt.
  connect_failed_ = true;
  if (num_peers == 0 || !names || stride < kNameBytes) {
    return set_error(-EINVAL, "ep_connect: %u peers, names %p, stride %zu (a name is %zu bytes)",
                     num_peers, names, stride, kNameBytes);
  }
  const auto* table = static_cast<const std::byte*>(names);
  peers_.resize(num_peers);
  bool found_self = false;
  for (uint32_t r = 0; r < num_peers; ++r) {
    int rc = decode_name(table + size_t{r} * stride, stride, r, &peers_[r].address);
    if (rc != 0) return rc;
    const EndpointAddress& a = peers_[r].address;
    if (a.endpoint_id == local_.endpoint_id) {
      if (found_self) {
        return set_error(-EINVAL, "ep_connect: this endpoint's name appears twice in the table");
      }
      self_ = r;
      found_self = true;
    }
    if (a.link_layer != local_.link_layer || a.global() != local_.global()) {
      return set_error(-EINVAL,
                       "ep_connect: rank %u's port is %s%s but ours is %s%s: all ranks must use "
                       "the same kind of fabric and addressing",
                       r, a.link_layer == IBV_LINK_LAYER_ETHERNET ? "RoCE" : "InfiniBand",
                       a.global() ? " (GID)" : " (LID)",
                       local_.link_layer == IBV_LINK_LAYER_ETHERNET ? "RoCE" : "InfiniBand",
                       local_.global() ? " (GID)" : " (LID)");
    }
  }
  if (!found_self) {
    return set_error(-EINVAL, "ep_connect: this endpoint's own name is not in the table");
  }

  // Receives per peer for writes with immediate data; the completion queue
  // must hold every signalled send plus every posted receive.
  recv_depth_ = std::clamp<uint32_t>(options_.rx_depth, 16, 512);
  recv_depth_ = std::min<uint32_t>(recv_depth_, static_cast<uint32_t>(device_.info().max_qp_wr));
  const uint32_t send_depth =
      std::min<uint32_t>(options_.tx_depth, static_cast<uint32_t>(device_.info().max_qp_wr));
  const uint64_t cq_entries = uint64_t{options_.tx_depth} + uint64_t{num_peers} * recv_depth_;
  if (cq_entries > static_cast<uint64_t>(device_.info().max_cqe)) {
    return set_error(-EINVAL, "ep_connect: %u peers need %llu completion entries, %s has %d",
                     num_peers, static_cast<unsigned long long>(cq_entries),
                     device_.info().name.c_str(), device_.info().max_cqe);
  }
  int rc = CompletionQueue::create(device_, static_cast<int>(cq_entries), &cq_);
  if (rc != 0) return rc;
  send_depth_ = send_depth;
  for (uint32_t r = 0; r < num_peers; ++r) {
    peer_of_id_[peers_[r].address.endpoint_id] = r;
    if (options_.lazy_connect && r != self_) continue;  // opened on first use
    rc = open_peer(r);
    if (rc != 0) return rc;
  }
  rc = connect_self(self_);
  if (rc != 0) return rc;
  connected_ = true;
  if (options_.lazy_connect) {
    connect_failed_ = false;
    handshake_ready_.store(true, std::memory_order_release);
    return 0;
  }

  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::milliseconds(options_.connect_timeout_ms);
  auto next_send = Clock::now();
  for (;;) {
    rc = service_handshake();
    if (rc != 0) return rc;
    uint32_t waiting = 0;
    std::string missing;
    for (uint32_t r = 0; r < num_peers; ++r) {
      const Peer& p = peers_[r];
      if (!p.failure.empty()) {
        connected_ = false;
        return set_error(-ECONNREFUSED, "ep_connect: rank %u: %s", r, p.failure.c_str());
      }
      if (p.done()) continue;
      if (++waiting <= 8) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
    }
    if (waiting == 0) break;
    const auto now = Clock::now();
    if (now >= deadline) {
      connected_ = false;
      return set_error(-ETIMEDOUT,
                       "ep_connect: no answer within %u ms from %u rank(s): %s%s (are they "
                       "running, on the same fabric, and connecting too?)",
                       options_.connect_timeout_ms, waiting, missing.c_str(),
                       waiting > 8 ? ", ..." : "");
    }
    if (now >= next_send) {
      send_pending_hellos();
      next_send = now + kResendPeriod;
    }
    if (siblings_) siblings_->service_siblings(this);
    // Others share these cores: wait briefly rather than spin.
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  connect_failed_ = false;
  handshake_ready_.store(true, std::memory_order_release);
  return 0;
}

void Endpoint::send_pending_hellos() {
  std::lock_guard lock(handshake_mutex_);
  // Start where the last round stopped, so that with a full send queue
  // every unfinished peer gets its turn.
  const uint32_t n = static_cast<uint32_t>(peers_.size());
  for (uint32_t k = 0; k < n && ud_sends_inflight_ < kUdSends; ++k) {
    const uint32_t r = (next_resend_ + k) % n;
    if (r != self_ && peers_[r].qp && !peers_[r].done()) {
      send_hello(r);
      next_resend_ = r + 1;
    }
  }
}

}  // namespace courier::verbs
