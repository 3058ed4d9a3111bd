// courier::Context: one rank's view of a Courier job.
//
// Creating a Context reads and validates the COURIER_* configuration, loads
// the GPU and NIC backends, joins the job through the bootstrap, opens one
// NIC endpoint per proxy thread, allocates the FIFO channels and starts the
// proxies. Kernels then push TransferCmds into channel(i) with the functions
// of gpu/fifo_push.hpp; the proxies carry them out.
//
// Collective calls (every rank, same order): the constructor,
// register_window(), deregister_window(), barrier().
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "courier/abi/gpu_v1.h"
#include "courier/device_channel.hpp"
#include "courier/error.hpp"

namespace courier {

class Bootstrap;  // courier/bootstrap.hpp

struct ContextOptions {
  // Variables that take precedence over the process environment, e.g. a
  // program's command-line flag {"COURIER_OFI_PROVIDER", "tcp"}.
  std::vector<std::pair<std::string, std::string>> env;
  // An already joined job (core/bootstrap/bootstrap.hpp), for programs that
  // have one; otherwise the Context joins the job the configuration names.
  std::shared_ptr<Bootstrap> bootstrap;
};

struct ChannelStats {
  uint64_t commands = 0;    // commands the proxy dequeued
  uint64_t errors = 0;      // commands that failed
  uint64_t completed = 0;   // in-order completion prefix
  uint64_t coalesced = 0;   // commands merged into another's NIC write (COURIER_COALESCE_BYTES)
  std::string first_error;  // "" when none
};

// Commands one device thread pushes, in order, into channel `channel`
// (Context::run_device_commands).
struct DeviceCommandList {
  uint32_t channel = 0;
  std::vector<TransferCmd> commands;
  PushStatus status = PushStatus::ok;  // set by run_device_commands
};

// Another rank of the job died, or a rank's transport failed a command for
// good naming this rank as the suspect (docs/bootstrap.md, "Liveness").
struct PeerFailure {
  int rank = -1;
  std::string reason;  // the message naming the rank and what happened
};

class Context;

// Device memory from the GPU backend (host memory on gpu-host); freed on
// destruction.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(DeviceBuffer&& other) noexcept { *this = std::move(other); }
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer();

  void* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  friend class Context;
  DeviceBuffer(const Context* owner, void* data, size_t size)
      : owner_(owner), data_(data), size_(size) {}
  const Context* owner_ = nullptr;
  void* data_ = nullptr;
  size_t size_ = 0;
};

class Context {
 public:
  explicit Context(const ContextOptions& options = {});
  // Stops the proxy threads and frees everything. A proxy thread that does
  // not stop within COURIER_TIMEOUT_S (a few seconds once a peer failed: a
  // dead rank can keep it inside the NIC provider for good) is given up on:
  // the Context then logs why and leaks its threads, endpoints and memory
  // rather than hang (docs/fifo-and-proxy.md, "Failures").
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  int rank() const;
  int world_size() const;
  std::string gpu_backend() const;
  std::string nic_backend() const;

  DeviceBuffer alloc(size_t bytes) const;
  void copy(void* dst, const void* src, size_t bytes) const;
  // Synchronous copies the host made through copy() so far: on a GPU
  // backend each is a round trip between host and device (courier-bench ep
  // prints them per call).
  struct CopyStats {
    uint64_t calls = 0;
    uint64_t bytes = 0;
  };
  CopyStats copy_stats() const;

  // Collective. Registers [base, base + bytes) with every proxy endpoint and
  // exchanges keys and sizes with all ranks; returns the window id that
  // TransferCmds name (0, 1, ... in call order; at most 16).
  uint32_t register_window(void* base, size_t bytes);
  // Collective. Undoes register_window once every rank got here (so nobody
  // writes into it any more); the id may be handed out again. After a peer
  // failed it runs on this rank alone; a proxy thread that does not answer
  // then (within a few seconds) keeps the window registered on its endpoint,
  // logged and leaked rather than waited for, and the id stays taken.
  void deregister_window(uint32_t window);

  // Not collective. Registers [base, base + bytes) (memory of the GPU
  // backend's kind, as alloc() gives) as this rank's WRITE source `slot`
  // (0..2) with every proxy endpoint: a WRITE encoded with
  // WriteCmdArgs::source = slot + 1 reads its bytes there at src_offset
  // instead of in its window (docs/wire-formats.md), so a kernel can send
  // from memory no window covers. The same range again costs nothing;
  // another replaces the registration: no command reading the slot may
  // still be in flight then (drain its channels first). An ep::Buffer in
  // high-throughput mode over the proxies uses slots 0 (dispatch's x) and 1
  // (combine's input) on NIC backends with cheap_registration.
  void set_source(uint32_t slot, const void* base, size_t bytes);

  uint32_t num_channels() const;
  DeviceChannel channel(uint32_t index) const;
  ChannelStats channel_stats(uint32_t index) const;

  // Runs fn on grid x block "GPU threads" and waits (GPU backends with host
  // kernels only, i.e. gpu-host).
  void launch_host_kernel(uint32_t grid, uint32_t block, courier_host_kernel_fn fn,
                          void* arg) const;

  // Runs the GPU backend's command-list kernel: device thread i pushes
  // lists[i].commands into its channel and waits until the last completed,
  // then lists[i].status says how that went. Drives channels from real
  // device code on any backend with the fifo_kernels capability (tests,
  // tools); kernels of one's own do the same with gpu/fifo_push.hpp.
  void run_device_commands(std::vector<DeviceCommandList>& lists) const;

  // Collective, out of band (through the bootstrap). Afterwards every write
  // a peer completed before entering the barrier is visible to the caller.
  void barrier();
  // Immediate-data notifications that arrived at this rank.
  uint64_t imm_received() const;
  // Incoming writes with immediate data that arrived with an error status.
  uint64_t imm_failed() const;
  // How this rank started and what it holds now (courier-bench scale
  // prints it per rank; docs/scaling.md). The phases of the constructor in
  // milliseconds, in order: the backends opened (GPU, NIC, topology), the
  // job joined (rendezvous, job-shape check), host discovery and FIFO
  // channels, endpoints opened, their names exchanged and connected, and
  // proxy threads started with Courier's own windows registered.
  struct Footprint {
    double backends_ms = 0, join_ms = 0, setup_ms = 0, connect_ms = 0, windows_ms = 0;
    // The CPU time the whole process (all its threads: the proxies register
    // windows) spent in each phase, so that time spent waiting for others
    // shows as the difference.
    double backends_cpu_ms = 0, join_cpu_ms = 0, setup_cpu_ms = 0, connect_cpu_ms = 0,
           windows_cpu_ms = 0;
    double total_ms = 0;              // the whole constructor
    uint32_t proxy_threads = 0;       // one NIC endpoint each
    uint32_t peers_per_endpoint = 0;  // ranks each endpoint connected to (itself included)
    // Memory registered with the endpoints now, summed over them: windows
    // (Courier's own included) and WRITE sources.
    uint64_t registered_bytes = 0;
    uint64_t registered_bytes_peak = 0;  // the most at any time so far
    uint32_t registrations = 0;
  };
  Footprint footprint() const;
  // What the semantics layer did on this rank so far (all proxy threads).
  struct AtomicStats {
    std::string add_u64;  // strategy: "hw", "imm" or "none"
    std::string add_u32;
    uint64_t atomics_applied = 0;   // emulated atomics applied here for peers
    uint64_t atomics_rejected = 0;  // malformed emulated atomics refused here
    uint64_t duplicates = 0;        // duplicated deliveries dropped here
    uint64_t held_back = 0;         // atomics held until earlier writes arrived
    uint64_t fenced = 0;            // transport atomics that waited for earlier writes
  };
  AtomicStats atomic_stats() const;
  // The job's out-of-band channel, for tools that exchange their own data
  // (for example courier-bench's plain-libfabric baseline).
  Bootstrap& bootstrap();
  // The peer this rank learned had died or failed, if any (also this rank's
  // own transport failure, naming the peer it wrote to). From then on every channel
  // is fatally failed (ChannelErrorCode::peer_failed): producers' waits
  // return channel_failed at once, and channel_stats(i).first_error names
  // the rank.
  std::optional<PeerFailure> failed_peer() const;
  // Per rank, the index of its host (0, 1, ...: hosts in the order of their
  // lowest rank), as the Context found them (hostname and boot id, or
  // COURIER_RANKS_PER_HOST).
  const std::vector<uint32_t>& rank_hosts() const;
  // Wakes this rank's proxy threads if they sleep (after COURIER_PROXY_SLEEP_MS
  // without work they block for up to 20 ms at a time). Courier does it
  // before every kernel it launches; call it before launching a kernel of
  // your own that pushes into the channels after a pause, or its first
  // commands may wait up to 20 ms.
  void wake_proxies() const;

 private:
  friend class DeviceBuffer;
  friend struct ContextInternals;  // core/context_internals.hpp
  void free_device(void* ptr) const;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Human-readable text of a PushStatus.
const char* to_string(PushStatus status);

}  // namespace courier
