// BARRIER commands (docs/semantics.md, "BARRIER").
//
// The i-th BARRIER of a scope on channel c of every rank belong together; it
// completes once every rank of the scope issued it and finished the
// channel's earlier commands. Two scopes:
//
//  - world: a node-local phase through shared memory (each rank of a host
//    records its arrival in the host's segment; the host leader, its lowest
//    rank, waits for all of them), then an inter-node phase through
//    immediate data (host leaders report to the global leader, rank 0, which
//    releases them), then the host leader releases its host through the
//    segment;
//  - rail: the ranks with the same local index on every host (one rail of
//    GPUs); its leader, the member with the lowest rank, collects arrivals
//    and releases its rail, all through immediate data.
//
// The epoch of the command must be equal on every rank; a mismatch fails
// the barrier with an error naming the rank.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/proxy/proxy_transport.hpp"
#include "core/semantics/imm_codec.hpp"

namespace courier {

// Where this rank sits: shared by every proxy thread, filled by the Context.
struct BarrierTopology {
  uint32_t rank = 0;
  std::vector<uint32_t> host_leaders;  // lowest rank of every host, ascending
  uint32_t host_leader = 0;            // of this rank's host
  uint32_t local_index = 0;            // position among the ranks of its host
  uint32_t local_size = 1;
  std::vector<uint32_t> rail;  // ranks with this local index, ascending (rail[0] leads)
  // The host's shared segment (BarrierSegment layout), mapped by every rank
  // of the host; channel c's block starts at c * block_bytes.
  std::byte* segment = nullptr;
  size_t block_bytes = 0;
};

// Bytes of one channel's block in the shared segment for `local_size` ranks.
size_t barrier_block_bytes(uint32_t local_size);

// Where `rank` sits, from every rank's host key (ranks with equal keys share
// a host). The segment fields are left for the caller.
BarrierTopology make_barrier_topology(uint32_t rank, const std::vector<std::string>& host_keys);

// Window ids of the landing and staging slots of barrier messages
// ([peer][channel] -> 8 bytes: the epoch), registered by the Context.
inline constexpr uint32_t kBarrierLandingWindow = kFirstInternalWindow + 4;
inline constexpr uint32_t kBarrierStagingWindow = kFirstInternalWindow + 5;

class BarrierEngine {
 public:
  using Scope = BarrierRequest::Scope;
  enum class Step { waiting, done, failed };

  // `staging` and `landing`: this thread's kBarrierStagingWindow and
  // kBarrierLandingWindow memory, world size x channels x 8 bytes each.
  BarrierEngine(ProxyTransport& transport, const BarrierTopology* topology, uint64_t* staging,
                const uint64_t* landing, uint32_t channels);

  // Advances the barrier of `channel` with this epoch; call again until it
  // is done. `error` explains a failure.
  Step advance(uint32_t channel, Scope scope, uint64_t epoch, std::string* error);

  // A barrier message (ImmKind::control, barrier subkinds) from `peer`.
  void on_message(uint32_t peer, const DecodedImm& imm);

  bool busy() const { return !in_progress_.empty(); }

 private:
  struct Arrivals {  // messages of one (channel, scope, generation)
    uint32_t channel = 0;
    Scope scope = Scope::world;
    uint16_t generation = 0;
    uint32_t count = 0;          // distinct ranks arrived (a duplicate counts once)
    std::vector<uint32_t> from;  // who
    bool released = false;
    uint64_t epoch = 0;
    std::string mismatch;  // first epoch disagreement, if any
  };
  struct Progress {  // this rank's barrier in flight on a channel
    uint32_t channel = 0;
    Scope scope = Scope::world;
    uint64_t generation = 0;
    uint64_t epoch = 0;
    int phase = 0;
    size_t sent = 0;  // releases sent so far (leaders)
    bool failed = false;
    std::string error;
  };

  Arrivals& arrivals(uint32_t channel, Scope scope, uint16_t generation);
  void forget(uint32_t channel, Scope scope, uint16_t generation);
  bool send(uint32_t peer, ControlKind kind, uint32_t channel, uint16_t generation, uint64_t epoch);
  Step advance_world(Progress& p, std::string* error);
  Step advance_rail(Progress& p, std::string* error);

  ProxyTransport& transport_;
  const BarrierTopology* topo_;
  uint64_t* staging_;
  const uint64_t* landing_;
  uint32_t channels_;
  std::vector<uint64_t> generation_[2];  // per scope, per channel: barriers completed
  std::vector<Progress> in_progress_;
  std::vector<Arrivals> arrivals_;
};

}  // namespace courier
