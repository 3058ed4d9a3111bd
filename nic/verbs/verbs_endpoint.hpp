// A verbs endpoint: one reliable-connected (RC) queue pair per peer, sharing
// one completion queue, plus a UD queue pair used only to exchange queue
// pair numbers when connecting (verbs_endpoint_connect.cpp).
//
// Why RC: it gives what the core wants from a NIC natively: writes and
// atomics to one peer applied in post order (write-then-atomic for free),
// delivery-complete send completions (the ACK comes from the target's NIC),
// immediate data naming the sender through the queue pair it arrived on,
// and hardware atomics.
//
// Data path: post_write / post_atomic post one signalled work request whose
// wr_id indexes a slot holding the core's cookie; poll() reaps the shared
// completion queue in batches, reposts the receive a write-with-immediate
// consumed, and turns error completions into completions with a negative
// status and an error text naming the peer, the operation and the verbs
// status. After an error the queue pair to that peer is in the error state
// (RC semantics): later posts to that peer fail at once with the first error.
#pragma once

#include <courier/abi/nic_v1.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "verbs_address.hpp"
#include "verbs_memory.hpp"
#include "verbs_queue_pair.hpp"

namespace courier::verbs {

class Device;

struct EndpointOptions {
  uint32_t tx_depth = 256;  // work requests in flight on the whole endpoint
  uint32_t rx_depth = 256;  // receives kept posted per peer (capped, see connect)
  uint32_t atomic_ops = 0;  // COURIER_NIC_ATOMIC_* posted natively (0: no atomics)
  uint8_t gid_index = kNoGid;
  ibv_gid gid{};
  QueuePairTuning tuning;
  // Per peer: bytes of writes in flight before post_write answers -EAGAIN
  // (0: no limit; one write larger than the limit still goes alone).
  uint64_t max_inflight_bytes = 0;
  uint32_t connect_timeout_ms = 60000;
  RegistrationPolicy registration;
  // COURIER_IB_CONNECT=lazy: connect() opens no queue pair but its own; a
  // peer's is opened and handshaken on the first post to it (the post
  // answers -EAGAIN until the peer confirms) or when the peer's hello
  // arrives first. Queue pairs are then per peer actually talked to.
  bool lazy_connect = false;
};

using LogFn = std::function<void(int level, const std::string& message)>;

class Endpoint;

// The endpoints of one backend. An endpoint waiting in connect() also answers
// the handshakes of its connected siblings: the core connects endpoints one
// after the other, so a peer still finishing endpoint 0's handshake (a lost
// datagram) needs our endpoint 0 to answer while we wait in endpoint 1's,
// where that peer will only arrive afterwards.
class EndpointSet {
 public:
  void add(Endpoint* endpoint);
  void remove(Endpoint* endpoint);
  // Services the handshake queue of every connected endpoint but `caller`.
  void service_siblings(const Endpoint* caller);

 private:
  std::mutex mutex_;
  std::vector<Endpoint*> endpoints_;
};

class Endpoint {
 public:
  // `siblings`: the backend's endpoints, which this one joins until destroyed.
  static int open(const Device& device, const courier_host_services_v1* host,
                  const EndpointOptions& options, LogFn log, EndpointSet* siblings,
                  std::unique_ptr<Endpoint>* out);
  ~Endpoint();
  Endpoint(const Endpoint&) = delete;
  Endpoint& operator=(const Endpoint&) = delete;

  int name(void* buf, size_t* len) const;
  // Creates the RC queue pairs and runs the handshake with every peer
  // (collective: every rank connects its endpoints in the same order); with
  // lazy_connect only learns the peers' addresses (no wait for anyone).
  int connect(uint32_t num_peers, const void* names, size_t stride);

  int register_memory(void* addr, size_t len, uint32_t mem_kind, std::unique_ptr<MemoryRegion>* out,
                      courier_nic_rkey_v1* rkey);
  int deregister_memory(MemoryRegion* region);
  uint32_t registered_regions() const { return registered_; }

  int post_write(const courier_nic_write_v1& write);
  int post_atomic(const courier_nic_atomic_v1& atomic);
  int poll(courier_nic_completion_v1* out, uint32_t max);

  // Reaps the handshake queue and answers hellos (any thread; locked).
  int service_handshake();
  // connect() succeeded: siblings may service this endpoint's handshake.
  bool handshake_ready() const { return handshake_ready_.load(std::memory_order_acquire); }

 private:
  struct Peer {
    EndpointAddress address;
    std::unique_ptr<QueuePair> qp;
    std::unique_ptr<AddressHandle> ah;  // for handshake messages
    uint32_t local_psn = 0;
    bool have_theirs = false;  // we know their queue pair (ours is connected)
    bool confirmed = false;    // they told us they know ours
    bool done() const { return have_theirs && confirmed; }
    uint32_t inflight = 0;
    uint64_t inflight_bytes = 0;
    std::string failure;  // first error on this connection ("" while healthy)
    // lazy_connect: when this side first asked for the connection, and
    // last sent a hello (resent every kResendPeriod until done()).
    std::chrono::steady_clock::time_point asked{}, last_hello{};
  };
  enum class Op : uint8_t { write, write_imm, fetch_add, compare_swap };
  struct Slot {
    uint64_t cookie = 0;
    uint64_t bytes = 0;
    uint32_t peer = 0;
    Op op = Op::write;
    bool busy = false;
  };
  struct Hello;

  Endpoint(const Device& device, const courier_host_services_v1* host,
           const EndpointOptions& options, LogFn log, EndpointSet* siblings);
  int open_handshake_queue();
  int acquire_slot(uint32_t peer, uint64_t bytes, uint64_t cookie, Op op, uint32_t* slot);
  void release_slot(uint32_t slot);
  int post(uint32_t peer, ibv_send_wr* wr, uint32_t slot, const char* what);
  int check_peer(uint32_t peer, const char* what) const;
  int post_receives(Peer& peer, uint32_t count);
  uint32_t translate(const ibv_wc& wc, courier_nic_completion_v1* out);

  // Handshake (verbs_endpoint_connect.cpp).
  int send_hello(uint32_t peer);
  void handle_hello(const Hello& hello);
  int service_handshake_locked();
  void send_pending_hellos();
  int connect_peer(uint32_t peer, uint32_t remote_qpn, uint32_t remote_psn);
  int connect_self(uint32_t self);
  // The queue pair (and address handle) towards `peer`, opened once; an
  // error names the device's queue-pair limit when that is what refused it.
  int open_peer(uint32_t peer);
  // lazy_connect, before a post to `peer`: 0 once connected; -EAGAIN while
  // the handshake runs (started here if need be); an error when the peer
  // refused or did not answer within connect_timeout_ms.
  int connect_on_demand(uint32_t peer, const char* what);

  const Device& device_;
  const courier_host_services_v1* host_;
  const EndpointOptions options_;
  LogFn log_;
  EndpointSet* siblings_;
  // Guards the handshake queue and state that a sibling's connect() may
  // service while this endpoint's proxy polls it.
  std::mutex handshake_mutex_;
  std::atomic<bool> handshake_ready_{false};
  EndpointAddress local_;
  uint32_t self_ = 0;
  bool connected_ = false;
  bool connect_failed_ = false;  // connect() ran and failed: the endpoint is unusable
  uint32_t polls_ = 0;           // poll() calls, to service the handshake now and then
  uint32_t next_resend_ = 0;     // where the next round of hellos starts
  uint32_t recv_depth_ = 0;
  uint32_t send_depth_ = 0;
  uint32_t open_qps_ = 0;     // RC queue pairs open (the UD one not counted)
  uint32_t handshaking_ = 0;  // lazy_connect: peers asked for and not done yet

  // Handshake resources: a UD queue pair with its own queue and buffers.
  std::unique_ptr<CompletionQueue> ud_cq_;
  std::unique_ptr<QueuePair> ud_qp_;
  std::vector<std::byte> ud_buffer_;
  std::unique_ptr<MemoryRegion> ud_mr_;
  uint32_t ud_sends_inflight_ = 0;
  uint32_t ud_next_send_ = 0;

  // Data path.
  std::unique_ptr<CompletionQueue> cq_;
  std::vector<Peer> peers_;
  std::unordered_map<uint32_t, uint32_t> peer_of_qpn_;
  std::unordered_map<uint64_t, uint32_t> peer_of_id_;
  std::vector<Slot> slots_;
  std::vector<uint32_t> free_slots_;
  std::vector<uint64_t> scratch_;  // where non-fetching ADDs put the old value
  std::unique_ptr<MemoryRegion> scratch_mr_;
  uint32_t registered_ = 0;
};

}  // namespace courier::verbs
