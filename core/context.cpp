#include "courier/context.hpp"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstring>
#include <ctime>
#include <map>
#include <mutex>
#include <optional>

#include "core/atomic_policy.hpp"
#include "core/backend_instance.hpp"
#include "core/bootstrap/job_bootstrap.hpp"
#include "core/check.hpp"
#include "core/config.hpp"
#include "core/context_internals.hpp"
#include "core/cpu_placement.hpp"
#include "core/device_choice.hpp"
#include "core/faults/transport_chain.hpp"
#include "core/fifo_channels.hpp"
#include "core/host_discovery.hpp"
#include "core/job_shape.hpp"
#include "core/proxy/job_failure.hpp"
#include "core/proxy/nic_endpoint.hpp"
#include "core/proxy/proxy_thread.hpp"
#include "core/proxy/ringing_transport.hpp"
#include "core/registry.hpp"
#include "core/semantics/semantic_transport.hpp"
#include "core/semantics/shared_segment.hpp"
#include "core/topology_choice.hpp"
#include "gpu/channel_descriptor.hpp"

namespace courier {

namespace {

// The longest an idle proxy thread blocks before it polls again: bounds the
// wait of the first commands from a kernel nobody rang for (docs/
// fifo-and-proxy.md, "Idle proxies").
constexpr uint64_t kMaxProxySleepNs = 20'000'000;
// Once the job failed, how long a proxy thread may take to answer a task or
// to stop before it is given up on (ProxyOptions::after_failure_wait_ns):
// a live one answers within milliseconds even on a crowded machine.
constexpr uint64_t kAfterFailureWaitNs = 2'000'000'000;
// Producers wait this much longer than COURIER_TIMEOUT_S (see channel()).
constexpr uint64_t kProducerGraceS = 1;
// How long a proxy's stall whose suspect is a tie waits for another rank
// to name one (ProxyOptions::stall_tie_wait_ns).
constexpr uint64_t kStallTieWaitNs = 500'000'000;

EnvLookup with_overrides(const ContextOptions& options) {
  std::map<std::string, std::string, std::less<>> overrides(options.env.begin(), options.env.end());
  EnvLookup process = process_env();
  return [overrides = std::move(overrides),
          process](std::string_view name) -> std::optional<std::string> {
    auto it = overrides.find(name);
    if (it != overrides.end()) return it->second;
    return process(name);
  };
}

// CPU time of the whole process so far (every thread), in milliseconds.
double process_cpu_ms() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) * 1e3 + static_cast<double>(t.tv_nsec) / 1e6;
}

}  // namespace

struct Context::Impl {
  // When construction began (Context::footprint), first of all.
  const std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();
  const double started_cpu_ms = process_cpu_ms();
  // Context::copy calls so far (copy_stats).
  std::atomic<uint64_t> copies{0}, copied_bytes{0};
  EnvLookup env;
  Config config;
  Logger log;
  Registry registry;
  HostServices host;
  std::unique_ptr<GpuBackend> gpu;
  int device = 0;  // this rank's GPU (core/device_choice.hpp)
  std::unique_ptr<NicBackend> nic;
  std::shared_ptr<Bootstrap> bootstrap;

  // The FIFO channels. Members are destroyed in reverse order: proxies stop
  // before endpoints close, before the memory they use is freed.
  FifoChannels channels;
  // Memory the endpoints register outlives them (declared before them).
  // Emulated-atomic mailboxes, one per proxy thread (COURIER_ATOMICS=imm).
  std::vector<std::unique_ptr<AtomicMailbox>> mailboxes;
  // BARRIER: where this rank sits, the host's shared segment, and per proxy
  // thread the slots barrier messages are sent from and land in.
  BarrierTopology barrier_topology;
  SharedSegment barrier_segment;
  // Per rank: the doorbell its idle proxy threads sleep on, in the host's
  // segment (invalid for ranks on other hosts). This rank's own is
  // doorbells[rank].
  std::vector<Doorbell> doorbells;
  std::vector<uint32_t> rank_hosts;  // Context::rank_hosts
  std::vector<std::unique_ptr<uint64_t[]>> barrier_staging, barrier_landing;
  // Tripped with the first failure the Context learns of: from then on the
  // proxies and their retries post nothing (core/proxy/job_failure.hpp).
  // Declared before what reads it.
  JobFailure job_failure;
  std::vector<std::unique_ptr<NicEndpoint>> endpoints;
  // What each proxy thread drives: retries (and injected faults) over its endpoint.
  std::vector<std::unique_ptr<ProxyTransport>> transports;
  AtomicStrategies atomics;  // how each atomic op is carried out
  std::vector<std::unique_ptr<ProxyThread>> proxies;
  // Each proxy thread's semantics layer, the top of its transport stack
  // (owned by the thread; touched only in tasks it runs).
  std::vector<SemanticTransport*> semantic_layers;
  std::array<bool, kUserWindows> window_used{};  // user window ids in use
  struct Source {
    const void* base = nullptr;
    size_t bytes = 0;
  };
  std::array<Source, kCmdSources> sources{};  // set_source's registrations
  // Bytes registered per window id, summed over the endpoints, and the
  // most registered at once (footprint).
  std::map<uint32_t, uint64_t> registered;
  uint64_t registered_peak = 0;
  void set_registered(uint32_t window, uint64_t bytes) {
    if (bytes == 0) {
      registered.erase(window);
    } else {
      registered[window] = bytes;
    }
    uint64_t total = 0;
    for (const auto& entry : registered) total += entry.second;
    registered_peak = std::max(registered_peak, total);
  }
  Context::Footprint footprint;  // the constructor's phases, set as it goes
  // This rank's share of the CPUs: its proxies, and its host kernels.
  std::vector<int32_t> rank_cpus;
  TopologyChoice topology;  // proxy CPUs and the NIC backend to try first
  // A peer's death, reported by the bootstrap's liveness monitor. The watch
  // is the last member: cancelled first, before the channels it fails.
  mutable std::mutex peer_mutex;
  std::optional<PeerFailure> peer_failure;
  std::atomic<bool> transport_failed{false};
  PeerWatch peer_watch;

  explicit Impl(const ContextOptions& options)
      : env(with_overrides(options)),
        // With a bootstrap given, the job is joined already: the launcher's
        // variables still place the rank (its GPU), but no rendezvous or
        // COURIER_JOB_TOKEN is needed.
        config(Config::load(env, /*need_job=*/true, /*need_rendezvous=*/!options.bootstrap)),
        log(config.log_level),
        registry(config.backend_path, log),
        host(log, env) {
    log.set_rank(options.bootstrap ? options.bootstrap->rank() : config.job.rank);
    for (const std::string& name :
         Config::unknown_variables(process_env_names(), registry.declared_knob_names())) {
      log.warn("config", "{} is not a Courier variable (misspelt?); it is ignored", name);
    }
    gpu = open_gpu_backend(registry, config.gpu_backend, host, log);
    if (gpu->props().device_count == 0) {
      // A broken plugin file may be why a better backend was not chosen.
      std::string rejected;
      for (const PluginCandidate& c : registry.candidates()) {
        if (c.kind == PluginKind::gpu && !c.usable) {
          rejected += fmt::format("{}{} ({})", rejected.empty() ? "" : ", ", c.path, c.reason);
        }
      }
      fail("GPU backend '{}' found no device: {}{}", gpu->plugin().name,
           gpu->props().no_device_reason,
           rejected.empty() ? "" : fmt::format(" (GPU plugin files rejected: {})", rejected));
    }
    device = choose_and_announce_gpu_device(config, *gpu, host);
    topology = choose_from_topology(config, nic_backend_claims(registry.nic_plugins()), device,
                                    gpu->props().mem_kind != COURIER_MEM_HOST);
    if (config.nic_backend.empty() && !topology.nic_backend.empty()) {
      log.info("context", "topology: NIC backend {} first ({})", topology.nic_backend,
               topology.nic_why);
    }
    // NIC backends register GPU memory through the host services' dmabuf_export,
    // which asks this GPU backend (it outlives the NIC backend: members are
    // destroyed in reverse order).
    host.lend_gpu(gpu.get());
    // RDMA backends open the NIC topology paired with this rank's GPU unless
    // their own knob names a device.
    if (!topology.nics.empty()) {
      std::string paired;
      for (const std::string& name : topology.nics) paired += (paired.empty() ? "" : ",") + name;
      host.derive("COURIER_PAIRED_NICS", paired);
      log.info("context", "topology: NICs paired with GPU {}: {}", device, paired);
    }
    nic = open_nic_backend(registry, config.nic_backend, host, log, topology.nic_backend);
    if ((nic->props().caps & COURIER_NIC_CAP_DELIVERY_COMPLETE) == 0) {
      log.warn("context",
               "NIC backend '{}' does not report delivery-complete: a completed WRITE (and so "
               "a returned DRAIN) means the data left this rank, not that it is visible at "
               "the target",
               nic->plugin().name);
    }
    atomics = choose_atomic_strategies(config, *nic, log);
    auto phase_done = [this, last = started, last_cpu = started_cpu_ms](double* ms,
                                                                        double* cpu_ms) mutable {
      const auto now = std::chrono::steady_clock::now();
      *ms = std::chrono::duration<double, std::milli>(now - last).count();
      last = now;
      const double cpu = process_cpu_ms();
      *cpu_ms = cpu - last_cpu;
      last_cpu = cpu;
    };
    phase_done(&footprint.backends_ms, &footprint.backends_cpu_ms);
    bootstrap = options.bootstrap ? options.bootstrap
                                  : std::shared_ptr<Bootstrap>(join_job(
                                        config.job, static_cast<int>(config.timeout_s), log));
    check_job_shape(*bootstrap,
                    {nic->plugin().name, nic->props().max_ep_name, config.proxy_threads, atomics});
    phase_done(&footprint.join_ms, &footprint.join_cpu_ms);
    channels = FifoChannels(*gpu, device, config.channels, config.fifo_depth);
    setup_barriers();
    check_nic_reach();
    phase_done(&footprint.setup_ms, &footprint.setup_cpu_ms);
    open_endpoints();
    phase_done(&footprint.connect_ms, &footprint.connect_cpu_ms);
    start_proxies();
    register_mailboxes();
    register_barrier_slots();
    phase_done(&footprint.windows_ms, &footprint.windows_cpu_ms);
    footprint.total_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started)
            .count();
    footprint.proxy_threads = config.proxy_threads;
    footprint.peers_per_endpoint = static_cast<uint32_t>(bootstrap->size());
    peer_watch = bootstrap->watch_peers(
        [this](int rank, const std::string& reason) { on_peer_failure(rank, reason); });
  }

  // Stops every proxy thread, all at once, before anything they use goes
  // away. False when one did not stop in time (ProxyThread::try_stop: at
  // most COURIER_TIMEOUT_S, a few seconds once the job failed): the caller
  // must then leak this Impl rather than destroy it.
  bool stop_proxies() {
    for (auto& proxy : proxies) proxy->request_stop();
    std::string stuck;
    for (auto& proxy : proxies) {
      std::string why;
      if (!proxy->try_stop(&why)) stuck += (stuck.empty() ? "" : "; ") + why;
    }
    if (stuck.empty()) return true;
    log.error("context",
              "destroying the Context: {}. Its proxy threads, NIC endpoints, FIFO memory and "
              "backends are leaked, not freed: the stuck thread may still use them, and "
              "waiting for it could take forever",
              stuck);
    return false;
  }

  // Nothing that involves a dead rank can complete: fail every channel now,
  // so producers stop at once instead of at COURIER_TIMEOUT_S.
  void on_peer_failure(int rank, const std::string& reason) {
    {
      std::lock_guard lock(peer_mutex);
      if (peer_failure) return;
      peer_failure = PeerFailure{rank, reason};
    }
    // First: a proxy thread about to post to the dead rank must not.
    job_failure.trip(rank, reason);
    log.error("context", "rank {} is gone or failed; failing all {} channels of this rank: {}",
              rank, channels.size(), reason);
    for (size_t c = 0; c < channels.size(); ++c) {
      ProxyChannel* channel = &channels[c];
      mark_channel_fatal(*channel->control, static_cast<uint64_t>(rank),
                         ChannelErrorCode::peer_failed);
      wake_producers(*channel->control);  // blocked producers re-check
    }
  }

  // The transport failed a command for good (a proxy thread calls this): the
  // peers would wait for its bytes until COURIER_TIMEOUT_S. Made the job's
  // failure at once, through the path a death takes, naming the peer the
  // command was for as the suspect.
  void on_transport_failure(int peer, const std::string& what) {
    if (transport_failed.exchange(true)) return;
    const std::string message = fmt::format("rank {}: {}", bootstrap->rank(), what);
    log.error("context", "{}; telling every rank", message);
    bootstrap->report_failure(peer, message);
    on_peer_failure(peer >= 0 ? peer : bootstrap->rank(), message);
  }

  void open_endpoints() {
    const uint32_t threads = config.proxy_threads;
    const uint32_t channels_per_thread = (config.channels + threads - 1) / threads;
    courier_nic_ep_attr_v1 attr{};
    attr.struct_size = sizeof attr;
    // The FIFO may hold more commands than the NIC keeps in flight: producers
    // run ahead by COURIER_MAX_INFLIGHT, the proxy posts COURIER_NIC_WINDOW.
    attr.tx_depth =
        config.nic_window != 0 ? config.nic_window : config.max_inflight * channels_per_thread;
    attr.rx_depth = 4096;
    if (atomics.uses(AtomicStrategyKind::hw)) attr.flags |= COURIER_NIC_EP_ATOMICS;
    // Derived (COURIER_NIC_WINDOW unset), the window is a wish: a backend
    // whose queues are smaller (libfabric shm takes 1024) gets the largest
    // power-of-two share it accepts, down to 64, and the log says so. The
    // proxy keeps the rest of the FIFO's commands until there is room.
    const uint32_t wanted = attr.tx_depth;
    for (uint32_t i = 0; i < threads; ++i) {
      for (;;) {
        try {
          endpoints.push_back(std::make_unique<NicEndpoint>(*nic, attr, bootstrap->size()));
          break;
        } catch (const Error& e) {
          if (config.nic_window != 0 || attr.tx_depth <= 64) throw;
          if (attr.tx_depth == wanted) {
            log.debug("context", "NIC window {} refused ({}); trying smaller", wanted, e.what());
          }
          attr.tx_depth /= 2;
        }
      }
    }
    if (attr.tx_depth != wanted) {
      log.info("context",
               "NIC window: {} writes in flight per endpoint; the {} derived from "
               "COURIER_MAX_INFLIGHT x channels per proxy thread is more than NIC backend '{}' "
               "accepts (COURIER_NIC_WINDOW sets it)",
               attr.tx_depth, wanted, nic->plugin().name);
    }
    // One all-gather carries every thread's endpoint name.
    const size_t stride = nic->props().max_ep_name;
    std::vector<std::byte> mine;
    for (auto& ep : endpoints) {
      std::vector<std::byte> name = ep->name();
      mine.insert(mine.end(), name.begin(), name.end());
    }
    std::vector<std::byte> all = bootstrap->allgather(mine);
    const size_t per_rank = stride * threads;
    for (uint32_t i = 0; i < threads; ++i) {
      std::vector<std::byte> names(stride * bootstrap->size());
      for (int r = 0; r < bootstrap->size(); ++r) {
        std::memcpy(names.data() + r * stride, all.data() + r * per_rank + i * stride, stride);
      }
      endpoints[i]->connect(names, stride);
    }
  }

  // Registers one region per proxy endpoint as `window` and exchanges the
  // keys with every rank (collective). User windows also tell the semantics
  // layer where they live, for atomics applied here.
  struct Region {
    void* base;
    size_t bytes;
  };
  void register_on_endpoints(uint32_t window, const std::vector<Region>& regions,
                             uint32_t mem_kind) {
    const uint32_t threads = config.proxy_threads;
    // Mine: size, then one key per proxy endpoint.
    std::vector<RemoteWindow> mine(threads);
    for (uint32_t i = 0; i < threads; ++i) {
      proxies[i]->run([&] {
        mine[i].key =
            endpoints[i]->register_window(window, regions[i].base, regions[i].bytes, mem_kind);
        mine[i].bytes = regions[i].bytes;
        if (window < kUserWindows) {
          semantic_layers[i]->set_local_window(window, regions[i].base, regions[i].bytes);
        }
      });
    }
    std::vector<std::byte> all =
        bootstrap->allgather(std::as_bytes(std::span<const RemoteWindow>(mine)));
    for (uint32_t i = 0; i < threads; ++i) {
      std::vector<RemoteWindow> peers(bootstrap->size());
      for (int r = 0; r < bootstrap->size(); ++r) {
        std::memcpy(&peers[r], all.data() + (r * threads + i) * sizeof(RemoteWindow),
                    sizeof(RemoteWindow));
      }
      proxies[i]->run([&] { endpoints[i]->set_remote_window(window, std::move(peers)); });
    }
    uint64_t bytes = 0;
    for (const Region& region : regions) bytes += region.bytes;
    set_registered(window, bytes);
  }

  // Emulated atomics need a mailbox per proxy endpoint, registered like a
  // window on every rank.
  void register_mailboxes() {
    if (!atomics.uses(AtomicStrategyKind::imm)) return;
    for (uint32_t window = kRequestMailboxWindow; window <= kReplyStagingWindow; ++window) {
      std::vector<Region> regions;
      for (auto& mailbox : mailboxes)
        regions.push_back({mailbox->base(window), mailbox->bytes(window)});
      register_on_endpoints(window, regions, COURIER_MEM_HOST);
    }
  }

  // Which ranks share this host (hostname and boot id), the host's shared
  // segment for the node-local phase, and the message slots of each thread.
  void setup_barriers() {
    const HostMap hosts = discover_hosts(*bootstrap, config);
    const std::vector<std::string>& keys = hosts.keys;
    barrier_topology = make_barrier_topology(static_cast<uint32_t>(bootstrap->rank()), keys);
    BarrierTopology& t = barrier_topology;
    {
      std::vector<int> host_ranks;  // the ranks sharing this rank's host
      for (size_t r = 0; r < keys.size(); ++r) {
        if (keys[r] == keys[static_cast<size_t>(bootstrap->rank())])
          host_ranks.push_back(static_cast<int>(r));
      }
      log.info("context",
               "hosts: {} ({}); this host '{}' has ranks {} (local index {} of {}, "
               "host leader {}); host leaders {}",
               t.host_leaders.size(), hosts.how, hosts.this_host, fmt::join(host_ranks, ","),
               t.local_index, t.local_size, t.host_leader, fmt::join(t.host_leaders, ","));
    }
    t.block_bytes = barrier_block_bytes(t.local_size);
    const std::string name = host_segment_name(hosts, t.host_leader);
    // The host's ranks' doorbells follow the barrier blocks.
    const size_t doorbells_at = (t.block_bytes * channels.size() + alignof(DoorbellWord) - 1) /
                                alignof(DoorbellWord) * alignof(DoorbellWord);
    barrier_segment = SharedSegment(name, doorbells_at + t.local_size * sizeof(DoorbellWord));
    t.segment = barrier_segment.data();
    auto* words = reinterpret_cast<DoorbellWord*>(barrier_segment.data() + doorbells_at);
    rank_hosts.assign(keys.size(), 0);
    for (size_t r = 0; r < keys.size(); ++r) {
      // Host leaders are ascending: a rank's host is the position of the
      // lowest rank with its key among them.
      size_t leader = 0;
      while (keys[leader] != keys[r]) ++leader;
      rank_hosts[r] = static_cast<uint32_t>(
          std::find(t.host_leaders.begin(), t.host_leaders.end(), leader) - t.host_leaders.begin());
    }
    doorbells.assign(keys.size(), Doorbell{});
    for (size_t r = 0, local = 0; r < keys.size(); ++r) {
      if (keys[r] == keys[static_cast<size_t>(bootstrap->rank())]) {
        doorbells[r] = Doorbell(words + local++);
      }
    }
    bootstrap->barrier();  // every rank of every host mapped its segment
    if (bootstrap->rank() == static_cast<int>(t.host_leader)) barrier_segment.unlink();
    const size_t slots = static_cast<size_t>(bootstrap->size()) * channels.size();
    for (uint32_t i = 0; i < config.proxy_threads; ++i) {
      barrier_staging.push_back(std::make_unique<uint64_t[]>(slots));
      barrier_landing.push_back(std::make_unique<uint64_t[]>(slots));
    }
  }

  // A backend that reaches only peers on its host (COURIER_NIC_CAP_HOST_LOCAL)
  // cannot serve a job that spans hosts; every rank sees the same topology,
  // so every rank fails with the same message.
  void check_nic_reach() const {
    const size_t hosts = barrier_topology.host_leaders.size();
    if ((nic->props().caps & COURIER_NIC_CAP_HOST_LOCAL) != 0 && hosts > 1) {
      fail(
          "NIC backend '{}' reaches only ranks on its own host, but the job spans {} hosts; "
          "choose another with COURIER_NIC_BACKEND",
          nic->plugin().name, hosts);
    }
  }

  void register_barrier_slots() {
    const size_t bytes = static_cast<size_t>(bootstrap->size()) * channels.size() * 8;
    std::vector<Region> staging, landing;
    for (uint32_t i = 0; i < config.proxy_threads; ++i) {
      staging.push_back({barrier_staging[i].get(), bytes});
      landing.push_back({barrier_landing[i].get(), bytes});
    }
    register_on_endpoints(kBarrierStagingWindow, staging, COURIER_MEM_HOST);
    register_on_endpoints(kBarrierLandingWindow, landing, COURIER_MEM_HOST);
  }

  void start_proxies() {
    SemanticsOptions layer;
    layer.add_u64 = atomics.add_u64;
    layer.add_u32 = atomics.add_u32;
    layer.rank = static_cast<uint32_t>(bootstrap->rank());
    layer.world_size = static_cast<uint32_t>(bootstrap->size());
    layer.barrier = &barrier_topology;
    layer.malform = config.faults.malform;
    layer.fault_seed = config.faults.seed;
    layer.channels = static_cast<uint32_t>(channels.size());
    layer.job_failure = &job_failure;
    ProxyOptions options;
    options.world_size = layer.world_size;
    options.poll_batch = config.drain_batch;
    // A visit takes what a channel can hold in flight: a kernel's burst
    // reaches the transport whole, which may merge it (nic-ce turns a
    // region pushed in pieces by many blocks into a few copies).
    options.dequeue_batch = config.max_inflight;
    options.coalesce_bytes = config.coalesce_bytes;
    options.stall_timeout_ns = uint64_t{config.timeout_s} * 1'000'000'000u;
    // Well inside the producers' extra second (kProducerGraceS), so that
    // they still fail with the rank a tie's wait lets another rank name.
    options.stall_tie_wait_ns = std::min<uint64_t>(kStallTieWaitNs, options.stall_timeout_ns / 4);
    options.job_failure = &job_failure;
    options.after_failure_wait_ns = config.timeout_s == 0
                                        ? kAfterFailureWaitNs
                                        : std::min(kAfterFailureWaitNs, options.stall_timeout_ns);
    options.may_sleep = (nic->props().caps & COURIER_NIC_CAP_PASSIVE_TARGET) != 0;
    const bool sleeps = config.proxy_sleep_ms != 0;
    if (sleeps) {
      options.sleep_after_ns = uint64_t{config.proxy_sleep_ms} * 1'000'000u;
      options.max_sleep_ns = kMaxProxySleepNs;
      options.doorbell = doorbells[static_cast<size_t>(bootstrap->rank())];
    }
    // The peers on this host, rung after every post to them (not this rank:
    // a proxy thread posting is awake, and so is the rank).
    std::vector<Doorbell> peers = doorbells;
    peers[static_cast<size_t>(bootstrap->rank())] = Doorbell{};
    options.on_transport_failure = [this](int peer, const std::string& what) {
      on_transport_failure(peer, what);
    };
    const uint32_t threads = config.proxy_threads;
    rank_cpus = topology.proxy_cpus;
    if (!rank_cpus.empty()) {
      log.info("context", "proxy threads on CPUs {} ({})", fmt::join(rank_cpus, ","),
               topology.proxy_why);
    }
    for (uint32_t i = 0; i < threads; ++i) {
      if (!rank_cpus.empty()) options.cpu = rank_cpus[i % rank_cpus.size()];
      std::vector<ProxyChannel*> mine;
      for (uint32_t c = i; c < channels.size(); c += threads) mine.push_back(&channels[c]);
      transports.push_back(make_transport_chain(*endpoints[i], config, i, log, &job_failure));
      if (sleeps) {
        transports.back() = std::make_unique<RingingTransport>(std::move(transports.back()), peers);
      }
      AtomicMailbox* mailbox = nullptr;
      if (atomics.uses(AtomicStrategyKind::imm)) {
        mailboxes.push_back(std::make_unique<AtomicMailbox>(bootstrap->size()));
        mailbox = mailboxes.back().get();
      }
      layer.barrier_staging = barrier_staging[i].get();
      layer.barrier_landing = barrier_landing[i].get();
      // The semantics layer goes on top of the thread's failure watch.
      options.upper_layers = [this, layer, mailbox](ProxyTransport& below) {
        auto top = std::make_unique<SemanticTransport>(below, layer, mailbox, log);
        semantic_layers.push_back(top.get());
        return top;
      };
      proxies.push_back(std::make_unique<ProxyThread>(i, *transports[i], mine, options, log));
    }
    for (auto& proxy : proxies) proxy->start();
  }
};

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) owner_->free_device(data_);
    owner_ = std::exchange(other.owner_, nullptr);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

DeviceBuffer::~DeviceBuffer() {
  if (data_ != nullptr) owner_->free_device(data_);
}

Context::Context(const ContextOptions& options) : impl_(std::make_unique<Impl>(options)) {}

Context::~Context() {
  if (impl_ != nullptr && !impl_->stop_proxies()) {
    // Deliberately leaked (stop_proxies logged why): a proxy thread that
    // never returns from a provider call may still touch its endpoint, the
    // FIFO memory, the backends' code and this Impl, so none of it may be
    // freed or unloaded; waiting for it could take forever.
    static_cast<void>(impl_.release());
  }
}

int Context::rank() const { return impl_->bootstrap->rank(); }
int Context::world_size() const { return impl_->bootstrap->size(); }
std::string Context::gpu_backend() const { return impl_->gpu->plugin().name; }
std::string Context::nic_backend() const { return impl_->nic->plugin().name; }

DeviceBuffer Context::alloc(size_t bytes) const {
  void* ptr = nullptr;
  if (impl_->gpu->runtime().mem_alloc(impl_->gpu->handle(), impl_->device, bytes, &ptr) != 0) {
    fail("GPU backend '{}': allocating {} bytes failed: {}", gpu_backend(), bytes,
         impl_->gpu->last_error());
  }
  return DeviceBuffer(this, ptr, bytes);
}

void Context::free_device(void* ptr) const {
  impl_->gpu->runtime().mem_free(impl_->gpu->handle(), impl_->device, ptr);
}

void Context::copy(void* dst, const void* src, size_t bytes) const {
  impl_->copies.fetch_add(1, std::memory_order_relaxed);
  impl_->copied_bytes.fetch_add(bytes, std::memory_order_relaxed);
  if (impl_->gpu->runtime().memcpy_sync(impl_->gpu->handle(), dst, src, bytes) != 0) {
    fail("GPU backend '{}': copying {} bytes failed: {}", gpu_backend(), bytes,
         impl_->gpu->last_error());
  }
}

uint32_t Context::register_window(void* base, size_t bytes) {
  Impl& s = *impl_;
  // The lowest free id: every rank registers and deregisters in the same
  // order, so every rank picks the same one.
  uint32_t window = 0;
  while (window < kUserWindows && s.window_used[window]) ++window;
  if (window == kUserWindows) {
    fail("register_window: all {} windows are in use", kUserWindows);
  }
  if (bytes > TransferCmd::kMaxOffset + 1) {
    fail("register_window: {} bytes exceed the 4 GiB a window offset can address", bytes);
  }
  std::vector<Impl::Region> regions(s.config.proxy_threads, {base, bytes});
  s.register_on_endpoints(window, regions, s.gpu->props().mem_kind);
  s.window_used[window] = true;
  return window;
}

void Context::deregister_window(uint32_t window) {
  Impl& s = *impl_;
  if (window >= kUserWindows || !s.window_used[window]) {
    fail("deregister_window: window {} is not registered", window);
  }
  // After a peer failed (or this rank's transport did), the job is over: a
  // collective could only wait COURIER_TIMEOUT_S for a rank that will not
  // come (one cut off from rank 0 by a partition would wait twice), so the
  // window is withdrawn here alone. Every channel is failed, so nothing of
  // ours is in flight; a peer's late write meets a withdrawn registration.
  bool failed = false;
  {
    std::lock_guard lock(s.peer_mutex);
    failed = s.peer_failure.has_value();
  }
  // Nobody may still be writing into it: every rank got here first.
  if (!failed) s.bootstrap->barrier();
  bool leaked = false;
  for (uint32_t i = 0; i < s.config.proxy_threads; ++i) {
    try {
      s.proxies[i]->run([&] {
        s.endpoints[i]->deregister_window(window);
        s.semantic_layers[i]->set_local_window(window, nullptr, 0);
      });
    } catch (const ProxyUnresponsive& e) {
      // The thread did not take the task in time (a dead rank can keep a
      // provider call from ever returning), and the task was withdrawn: the
      // registration stays on that endpoint, leaked rather than waited for,
      // and the id stays taken. The caller may free the memory: a peer's
      // write could land in it only if that peer still posted after the
      // failure (each stops once it learns of it, milliseconds after), and
      // on a provider that moves data only while the target polls, only
      // through this thread, which is stuck.
      leaked = true;
      s.log.error("context",
                  "deregister_window: window {} stays registered on proxy thread {}'s endpoint "
                  "(leaked) because the thread does not answer: {}",
                  window, i, e.what());
      if (!s.job_failure.tripped()) {
        // A thread stuck for COURIER_TIMEOUT_S is this rank's failure: the
        // peers learn it now instead of timing out at the barrier below.
        s.on_transport_failure(e.peer() >= 0 ? e.peer() : rank(), e.what());
      }
    }
  }
  // And every rank withdrew it before anyone registers the next one (a
  // backend may then release what it held for the peers' old regions).
  if (!failed && !s.job_failure.tripped()) s.bootstrap->barrier();
  if (!leaked) {
    s.window_used[window] = false;
    s.set_registered(window, 0);
  }
}

Context::Footprint Context::footprint() const {
  Footprint f = impl_->footprint;
  for (const auto& [window, bytes] : impl_->registered) {
    f.registered_bytes += bytes;
    f.registrations += f.proxy_threads;
  }
  f.registered_bytes_peak = impl_->registered_peak;
  return f;
}

void Context::set_source(uint32_t slot, const void* base, size_t bytes) {
  Impl& s = *impl_;
  if (slot >= kCmdSources) {
    fail("set_source: source {} is outside [0, {})", slot, kCmdSources);
  }
  if (base == nullptr || bytes == 0) {
    fail("set_source: source {}: an empty range ({} bytes at {})", slot, bytes, base);
  }
  if (bytes > TransferCmd::kMaxOffset + 1) {
    fail("set_source: source {}: {} bytes exceed the 4 GiB a source offset can address", slot,
         bytes);
  }
  Impl::Source& source = s.sources[slot];
  if (source.base == base && source.bytes == bytes) return;
  source = {};  // until every endpoint has the new one
  const uint32_t window = kFirstSourceWindow + slot;
  for (uint32_t i = 0; i < s.config.proxy_threads; ++i) {
    s.proxies[i]->run([&] {
      s.endpoints[i]->deregister_window(window);  // the old one, if any
      // A NIC registers for reading and writing alike; nothing writes here.
      s.endpoints[i]->register_window(window, const_cast<void*>(base), bytes,
                                      s.gpu->props().mem_kind);
    });
  }
  source = {base, bytes};
  s.set_registered(window, uint64_t{bytes} * s.config.proxy_threads);
}

uint32_t Context::num_channels() const { return static_cast<uint32_t>(impl_->channels.size()); }

DeviceChannel Context::channel(uint32_t index) const {
  const Impl& s = *impl_;
  if (index >= s.channels.size()) {
    fail("channel {} does not exist: COURIER_CHANNELS={}", index, s.channels.size());
  }
  // A second longer than the proxy's own stall bound: when a peer stops
  // answering, the proxy's diagnosis (the channel failed, naming the rank)
  // reaches the producer before the producer gives up on its own, with a
  // bare "timed out".
  return s.channels.device_channel(index, s.config.max_inflight,
                                   ContextInternals::proxy_wait_ns(*this));
}

ChannelStats Context::channel_stats(uint32_t index) const {
  if (index >= impl_->channels.size()) {
    fail("channel {} does not exist: COURIER_CHANNELS={}", index, impl_->channels.size());
  }
  const ProxyChannel& channel = impl_->channels[index];
  ChannelStats stats;
  stats.commands = channel.commands.load();
  stats.errors = channel.errors.load();
  stats.coalesced = channel.coalesced.load();
  stats.completed = std::atomic_ref<uint64_t>(channel.control->completed).load();
  stats.first_error =
      describe_channel_error(std::atomic_ref<uint64_t>(channel.control->error).load());
  return stats;
}

void Context::launch_host_kernel(uint32_t grid, uint32_t block, courier_host_kernel_fn fn,
                                 void* arg) const {
  const GpuBackend& gpu = *impl_->gpu;
  if (!gpu.supports(GpuFeature::host_kernels)) {
    fail("GPU backend '{}' cannot run host kernels (no host_kernels capability)",
         gpu.plugin().name);
  }
  wake_proxies();  // the kernel's pushes may find them asleep
  courier_host_kernel_launch_v1 launch{};
  launch.struct_size = sizeof launch;
  launch.grid_dim = grid;
  launch.block_dim = block;
  launch.fn = fn;
  launch.arg = arg;
  launch.cpus = impl_->rank_cpus.data();
  launch.num_cpus = static_cast<uint32_t>(impl_->rank_cpus.size());
  if (gpu.runtime().launch_host_kernel(gpu.handle(), &launch) != 0) {
    fail("GPU backend '{}': launching {}x{} host threads failed: {}", gpu.plugin().name, grid,
         block, gpu.last_error());
  }
}

const GpuBackend& ContextInternals::gpu(const Context& context) { return *context.impl_->gpu; }

int ContextInternals::device(const Context& context) { return context.impl_->device; }

const Config& ContextInternals::config(const Context& context) { return context.impl_->config; }
uint64_t ContextInternals::proxy_wait_ns(const Context& context) {
  return (uint64_t{context.impl_->config.timeout_s} + kProducerGraceS) * 1'000'000'000u;
}

const NicBackend& ContextInternals::nic(const Context& context) { return *context.impl_->nic; }

Logger& ContextInternals::log(Context& context) { return context.impl_->log; }

void ContextInternals::report_failure(Context& context, int suspect, const std::string& what) {
  context.impl_->on_transport_failure(suspect, what);
}

size_t ContextInternals::hosts(const Context& context) {
  return context.impl_->barrier_topology.host_leaders.size();
}

Context::CopyStats Context::copy_stats() const {
  return {impl_->copies.load(std::memory_order_relaxed),
          impl_->copied_bytes.load(std::memory_order_relaxed)};
}

void Context::run_device_commands(std::vector<DeviceCommandList>& lists) const {
  const GpuBackend& gpu = *impl_->gpu;
  if (!gpu.supports(GpuFeature::fifo_kernels)) {
    fail("GPU backend '{}' cannot push commands from the device (no fifo_kernels capability)",
         gpu.plugin().name);
  }
  if (lists.empty()) return;
  wake_proxies();
  std::vector<courier_gpu_command_list_v1> c_lists(lists.size());
  for (size_t i = 0; i < lists.size(); ++i) {
    c_lists[i].channel = to_abi(channel(lists[i].channel));
    c_lists[i].commands = lists[i].commands.data();
    c_lists[i].count = static_cast<uint32_t>(lists[i].commands.size());
  }
  courier_gpu_command_lists_v1 job{};
  job.struct_size = sizeof job;
  job.device = impl_->device;
  job.lists = c_lists.data();
  job.num_lists = static_cast<uint32_t>(c_lists.size());
  if (gpu.selftest().run_command_lists(gpu.handle(), &job) != 0) {
    fail("GPU backend '{}': pushing {} command list(s) from the device failed: {}",
         gpu.plugin().name, lists.size(), gpu.last_error());
  }
  for (size_t i = 0; i < lists.size(); ++i) {
    lists[i].status = static_cast<PushStatus>(c_lists[i].push_status);
  }
}

void Context::wake_proxies() const {
  if (!impl_->doorbells.empty()) impl_->doorbells[static_cast<size_t>(rank())].ring();
}

void Context::barrier() {
  impl_->bootstrap->barrier();
  // Peers' writes into this rank were carried out by this rank's proxy
  // threads (providers with manual progress move data while the target
  // polls). A round trip through each of them orders everything they did
  // before the barrier returned before whatever the caller does next.
  for (auto& proxy : impl_->proxies) proxy->run([] {});
}
Bootstrap& Context::bootstrap() { return *impl_->bootstrap; }

const std::vector<uint32_t>& Context::rank_hosts() const { return impl_->rank_hosts; }

std::optional<PeerFailure> Context::failed_peer() const {
  std::lock_guard lock(impl_->peer_mutex);
  return impl_->peer_failure;
}

uint64_t Context::imm_received() const {
  uint64_t total = 0;
  for (const auto& proxy : impl_->proxies) total += proxy->imm_received();
  return total;
}

Context::AtomicStats Context::atomic_stats() const {
  AtomicStats total;
  total.add_u64 = to_string(impl_->atomics.add_u64);
  total.add_u32 = to_string(impl_->atomics.add_u32);
  for (size_t i = 0; i < impl_->proxies.size(); ++i) {
    SemanticsStats s;
    // Owned by the proxy thread.
    impl_->proxies[i]->run([&] { s = impl_->semantic_layers[i]->stats(); });
    total.atomics_applied += s.atomics_applied;
    total.atomics_rejected += s.atomics_rejected;
    total.duplicates += s.duplicates;
    total.held_back += s.held_back;
    total.fenced += s.fenced;
  }
  return total;
}

uint64_t Context::imm_failed() const {
  uint64_t total = 0;
  for (const auto& proxy : impl_->proxies) total += proxy->imm_failed();
  return total;
}

const char* to_string(PushStatus status) {
  switch (status) {
    case PushStatus::ok:
      return "ok";
    case PushStatus::batch_too_large:
      return "batch larger than 8 commands or max_inflight";
    case PushStatus::timed_out:
      return "timed out waiting for the proxy (COURIER_TIMEOUT_S)";
    case PushStatus::channel_failed:
      return "the proxy recorded an error on this channel";
    case PushStatus::invalid_argument:
      return "a command could not be encoded (invalid argument)";
  }
  return "unknown";
}

}  // namespace courier
