// One nic-ce endpoint: the peers on this host it writes to, the regions it
// registered, and the operations in flight.
//
// Data path, per destination region:
//  - GPU memory: the peer's allocation is mapped here through its CUDA IPC
//    handle, and a WRITE is a cudaMemcpyAsync (a copy engine) on the peer's
//    stream; ATOMICs are one-thread kernels on the same stream. Immediate
//    data follows as an inbox message once the copy completed.
//  - host memory: the bytes travel in inbox messages (64 B each) and the
//    owner's poll() copies them into place.
// Operations to one peer form a queue processed in post order: a message is
// sent only when every earlier operation landed, and a copy starts only when
// no earlier message is still undelivered, so writes land in post order and
// immediate data never overtakes the data it announces.
//
// Posting only queues; poll() starts what order allows. The copies a poll
// finds queued go to the copy engines as batches (cudaMemcpyBatchAsync where
// the CUDA runtime has it): one driver call and one completion event per
// batch instead of one each, which is what a proxy draining a kernel's burst
// of WRITEs pays for. Pieces contiguous at both ends become one copy (a
// kernel pushes a region in pieces, one per block). Only copies whose byte
// ranges are disjoint run as a batch, so their order cannot change the final
// bytes; others run one by one in post order. While two batches are
// on a peer's stream, new copies wait and gather (a copy costs the stream
// several microseconds whatever its size, so fewer, larger ones win; the
// stream never idles meanwhile).
//
// The endpoint's code, by responsibility:
//   ce_endpoint.cpp          opening and closing, the endpoint's own streams
//   ce_endpoint_connect.cpp  its name, and the peers' segments (ep_connect)
//   ce_registration.cpp      regions published in the segment, peers' read
//   ce_write.cpp             post_write, in its steps
//   ce_atomics.cpp           post_atomic, and an atomic's old value
//   ce_peer_queue.cpp        poll: moving each peer's operations on
//   ce_copy_batch.cpp        copies gathered into batches
//   ce_inbox.cpp             the messages peers left in this endpoint's inbox
#pragma once

#include <courier/abi/nic_v1.h>
#include <cuda_runtime_api.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "ce_ipc_mappings.hpp"
#include "ce_segment.hpp"
#include "ce_trace.hpp"

namespace courier::nic_ce {

// What ep_name hands out.
struct EndpointName {
  uint32_t magic;
  uint32_t pid;
  char segment[56];
};

class Endpoint;

// A registered local region (the mr handle). The handle owns it; the
// endpoint's table names it until it is deregistered.
struct LocalRegion {
  Endpoint* endpoint;  // the one it was registered on
  uint32_t slot;
  uint32_t generation;
  uint32_t mem_kind;
  std::byte* address;
  uint64_t length;

  Endpoint* owner() const { return endpoint; }  // what mr_deregister dispatches on
};

struct EndpointOptions {
  int device = 0;
  IpcMappings* mappings = nullptr;  // the backend's
  uint32_t tx_depth = 256;
  bool atomics = false;
  bool batch_copies = true;  // COURIER_CE_BATCH: several queued copies per driver call
  bool trace = false;        // COURIER_CE_TRACE: the last launches and their completions at close
  // COURIER_CE_LINGER_US: queued copies wait while writes keep arriving
  // this recently (a GPU kernel's blocks push their pieces microseconds
  // apart), so that they merge and share one batch; 0 launches at once.
  uint64_t linger_ns = 3000;
};

class Endpoint {
 public:
  // The calls return 0 or -errno with last_error() set, as the ABI's entries
  // do (poll: the completions it wrote; -EAGAIN: full, poll and retry).
  static int open(const EndpointOptions& options, std::unique_ptr<Endpoint>* out);
  ~Endpoint();
  Endpoint(const Endpoint&) = delete;
  Endpoint& operator=(const Endpoint&) = delete;

  int name(void* buf, size_t* len) const;
  int connect(uint32_t num_peers, const void* names, size_t stride);
  int register_memory(void* address, size_t length, uint32_t mem_kind,
                      std::unique_ptr<LocalRegion>* out, courier_nic_rkey_v1* rkey);
  // Withdraws and frees `region` (registered here).
  int deregister_memory(LocalRegion* region);
  uint32_t registered_regions() const { return registered_; }
  int post_write(const courier_nic_write_v1& write);
  int post_atomic(const courier_nic_atomic_v1& atomic);
  int poll(courier_nic_completion_v1* out, uint32_t max);

 private:
  enum class State { deferred, running, message_ready, message_sent, done };

  struct Op {
    State state = State::deferred;
    uint64_t cookie = 0;
    bool report = true;  // emit a TX completion (the last piece of a write)
    int status = 0;
    // Set on the last operation of a batch: a running operation without one
    // completes with the next one that has it (the stream runs in order).
    cudaEvent_t event = nullptr;
    bool device_source = false;  // the source is GPU memory (may join a batch)
    int64_t trace_slot = -1;     // COURIER_CE_TRACE: its launch's entry
    uint64_t posted_ns = 0;      // with linger_ns or the trace: when it was posted
    // A copy (or atomic) to start once order allows.
    void* dst = nullptr;
    const void* src = nullptr;
    size_t bytes = 0;
    bool atomic = false;
    uint32_t atomic_op = 0;
    uint64_t operand = 0;
    uint64_t compare = 0;
    int32_t staging = -1;         // result slot of an atomic
    std::byte* result = nullptr;  // where a fetching atomic's old value goes
    uint32_t result_kind = 0;     // memory kind there
    // A message for the peer's inbox.
    bool has_message = false;
    Message message;
    int64_t position = -1;
  };

  struct Peer {
    Segment segment;  // empty for this endpoint itself (use own_)
    SegmentLayout* layout = nullptr;
    bool self = false;
    cudaStream_t stream = nullptr;
    std::deque<Op> ops;
    uint32_t launched = 0;  // events recorded on the stream and not yet seen complete
  };

  // A peer registration as read from its segment.
  struct RemoteRegion {
    uint32_t slot = 0;
    uint32_t generation = 0;
    uint32_t mem_kind = 0;
    uint64_t address = 0;
    uint64_t length = 0;
    uint64_t alloc_base = 0;
    uint8_t ipc_handle[64] = {};
  };

  explicit Endpoint(const EndpointOptions& options) : options_(options) {}

  // ce_endpoint.cpp
  int ensure_stream(Peer& peer);
  cudaError_t copy_now(void* dst, const void* src, size_t bytes);

  // ce_registration.cpp
  int read_registration(const Peer& peer, uint64_t key, RemoteRegion* out, std::string* why) const;
  // The address of [offset] of a peer's GPU region in this process.
  int map_remote(Peer& peer, const RemoteRegion& region, uint64_t offset, std::byte** out,
                 std::string* why);
  int check_local(const LocalRegion* mr, uint64_t offset, uint64_t length, const char* what) const;

  // ce_write.cpp: post_write's steps.
  int check_write(const courier_nic_write_v1& write, const LocalRegion** local) const;
  // The remote region `write` lands in, checked against its range; false
  // with *why set when it does not.
  bool find_write_target(const Peer& peer, const courier_nic_write_v1& write, RemoteRegion* region,
                         std::string* why) const;
  Message imm_message(const courier_nic_write_v1& write) const;
  // A GPU-memory target: one copy, started by poll().
  int queue_device_write(Peer& peer, const courier_nic_write_v1& write, const RemoteRegion& region,
                         const std::byte* src, bool device_source);
  // A host-memory target: the bytes in inbox messages, the last one reporting.
  int queue_host_write(Peer& peer, const courier_nic_write_v1& write, const std::byte* src,
                       uint32_t source_kind);
  // Queues an operation that failed before it started: its error
  // completion comes in order with the others.
  void queue_failed(Peer& peer, uint64_t cookie, int status);

  // ce_atomics.cpp
  void finish_atomic(Op& op);

  // ce_peer_queue.cpp: advance() = complete_launched, deliver_messages,
  // launch_deferred.
  void advance(Peer& peer);
  void complete_launched(Peer& peer);
  void deliver_messages(Peer& peer);
  void launch_deferred(Peer& peer);
  int launch(Peer& peer, Op& op);
  int record_event(Peer& peer, Op& op);
  // A launched operation's outcome: status 0 moves it on (to its message, or
  // done), anything else fails it.
  void finish_launched(Op& op, int status);

  // ce_copy_batch.cpp
  // The copies of batch_ as batch_dst_/src_/bytes_, contiguous pieces
  // merged; false when their ranges meet (they must then run in post order).
  bool plan_batch();
  // Starts the gathered copies as one batch with an event on the last.
  void flush_batch(Peer& peer);
  cudaError_t submit_batch(Peer& peer);

  // ce_inbox.cpp
  uint32_t drain_inbox(courier_nic_completion_v1* out, uint32_t max);
  void apply_host_write(const Message& message);

  EndpointOptions options_;
  Segment own_;
  int32_t rank_ = -1;  // this endpoint's index in the connect() table
  std::vector<Peer> peers_;
  uint32_t generation_ = 0;
  // The registered regions by registration slot (the handles own them).
  std::array<LocalRegion*, kRegistrationSlots> regions_{};
  uint32_t registered_ = 0;
  uint64_t consume_position_ = 0;
  uint32_t in_flight_ = 0;  // reported operations queued
  std::vector<cudaEvent_t> free_events_;
  cudaStream_t control_stream_ = nullptr;
  // Old values of atomics, in mapped pinned memory the kernels write.
  uint64_t* staging_ = nullptr;
  std::vector<int32_t> free_staging_;
  uint64_t dropped_host_writes_ = 0;
  // The copies gathered for the next batch, and the runtime's batch call
  // (cleared for good when the runtime refuses it).
  std::vector<Op*> batch_;
  std::vector<void*> batch_dst_;
  std::vector<const void*> batch_src_;
  std::vector<size_t> batch_bytes_;
  bool batch_call_ = true;
  std::vector<size_t> order_, by_source_;  // plan_batch's scratch
  uint64_t copies_merged_ = 0;
  size_t batch_copies_ = 0;    // copies the last submit_batch issued
  uint64_t last_post_ns_ = 0;  // when the last copy was queued (linger_ns)
  LaunchTrace trace_;          // COURIER_CE_TRACE
  std::vector<Op*> waiting_;   // complete_launched's scratch
};

}  // namespace courier::nic_ce
