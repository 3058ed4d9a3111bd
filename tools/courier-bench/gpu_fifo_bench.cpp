#include "gpu_fifo_bench.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "completing_sink.hpp"
#include "core/backend_instance.hpp"
#include "core/config.hpp"
#include "core/log.hpp"
#include "core/proxy/fifo_consumer.hpp"
#include "core/proxy/proxy_thread.hpp"
#include "core/registry.hpp"
#include "core/semantics/semantic_transport.hpp"
#include "courier/context.hpp"
#include "courier/error.hpp"
#include "gpu/fifo_selftest.hpp"

namespace courier::bench {

namespace {

using Clock = std::chrono::steady_clock;
constexpr uint32_t kDstRank = 1;
constexpr uint64_t kTimeoutNs = 60'000'000'000ull;

template <class... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

// The backend chosen by --gpu, opened the way a Context opens it.
struct OpenGpu {
  explicit OpenGpu(const std::string& choice)
      : log(LogLevel::warn),
        env(process_env()),
        config(Config::load(env, /*need_job=*/false)),
        registry(config.backend_path, log),
        host(log, env),
        gpu(open_gpu_backend(registry, choice, host, log)) {
    const courier_gpu_props_v1& props = gpu->props();
    if (props.device_count == 0) {
      fail("GPU backend '{}' found no device: {}", gpu->plugin().name, props.no_device_reason);
    }
    if (!gpu->supports(GpuFeature::fifo_kernels)) {
      fail("GPU backend '{}' has no FIFO self-test kernels (capability fifo_kernels)",
           gpu->plugin().name);
    }
  }
  const courier_gpu_runtime_part_v1& runtime() const { return gpu->runtime(); }
  const courier_gpu_selftest_part_v1& selftest() const { return gpu->selftest(); }
  void check(int rc, const char* what) const {
    if (rc != 0)
      fail("GPU backend '{}': {} failed: {}", gpu->plugin().name, what, gpu->last_error());
  }

  Logger log;
  EnvLookup env;
  Config config;
  Registry registry;
  HostServices host;
  std::unique_ptr<GpuBackend> gpu;
};

// Mapped host memory (host and device address) or device memory from the
// backend, freed on every path.
class GpuAllocation {
 public:
  GpuAllocation(const OpenGpu& gpu, size_t bytes, bool mapped_host)
      : gpu_(gpu), bytes_(bytes), mapped_(mapped_host) {
    if (mapped_) {
      gpu.check(gpu.runtime().host_alloc_mapped(gpu.gpu->handle(), bytes, &host_, &device_),
                "host_alloc_mapped");
    } else {
      gpu.check(gpu.runtime().mem_alloc(gpu.gpu->handle(), 0, bytes, &device_), "mem_alloc");
    }
  }
  ~GpuAllocation() {
    if (mapped_) {
      gpu_.runtime().host_free_mapped(gpu_.gpu->handle(), host_);
    } else {
      gpu_.runtime().mem_free(gpu_.gpu->handle(), 0, device_);
    }
  }
  GpuAllocation(const GpuAllocation&) = delete;
  GpuAllocation& operator=(const GpuAllocation&) = delete;

  template <class T = void>
  T* host(size_t offset = 0) const {
    return reinterpret_cast<T*>(static_cast<std::byte*>(host_) + offset);
  }
  template <class T = void>
  T* device(size_t offset = 0) const {
    return reinterpret_cast<T*>(static_cast<std::byte*>(device_) + offset);
  }
  // Zeroes the memory (through the backend for device memory).
  void clear() const {
    if (mapped_) {
      std::memset(host_, 0, bytes_);
    } else {
      std::vector<std::byte> zeros(bytes_);
      gpu_.check(gpu_.runtime().memcpy_sync(gpu_.gpu->handle(), device_, zeros.data(), bytes_),
                 "memcpy_sync");
    }
  }

 private:
  const OpenGpu& gpu_;
  size_t bytes_;
  bool mapped_;
  void* host_ = nullptr;
  void* device_ = nullptr;
};

// FIFO channels as a Context lays them out: slots and control block in
// mapped host memory, ticket counter and completion cache in device memory.
class GpuRings {
 public:
  GpuRings(const OpenGpu& gpu, uint32_t channels, uint32_t depth, uint32_t max_inflight)
      : channels_(channels),
        depth_(depth),
        max_inflight_(max_inflight),
        ring_stride_(depth * sizeof(TransferCmd) + sizeof(FifoControl)),
        rings_(gpu, ring_stride_ * channels, true),
        counters_(gpu, kCounterStride * channels, false) {}

  void clear() const {
    rings_.clear();
    counters_.clear();
  }
  TransferCmd* host_slots(uint32_t c) const { return rings_.host<TransferCmd>(c * ring_stride_); }
  FifoControl* host_control(uint32_t c) const {
    return rings_.host<FifoControl>(c * ring_stride_ + depth_ * sizeof(TransferCmd));
  }
  courier_gpu_channel_v1 channel(uint32_t c) const {
    courier_gpu_channel_v1 ch{};
    ch.slots = rings_.device(c * ring_stride_);
    ch.control = rings_.device(c * ring_stride_ + depth_ * sizeof(TransferCmd));
    ch.head = counters_.device<uint64_t>(c * kCounterStride);
    ch.completed_cache = counters_.device<uint64_t>(c * kCounterStride + 64);
    ch.depth_mask = depth_ - 1;
    ch.max_inflight = max_inflight_;
    ch.channel_id = c;
    ch.timeout_ns = kTimeoutNs;
    return ch;
  }
  uint32_t size() const { return channels_; }
  uint32_t depth() const { return depth_; }

 private:
  static constexpr size_t kCounterStride = 128;
  uint32_t channels_, depth_, max_inflight_;
  size_t ring_stride_;
  GpuAllocation rings_;
  GpuAllocation counters_;
};

// Verifies every command a proxy sees against gpu/fifo_selftest.hpp's
// pattern. Producers map to exactly one channel, so each entry of next_ is
// touched by one proxy thread only.
class CommandChecker {
 public:
  explicit CommandChecker(uint32_t producers) : next_(producers, 0) {}

  void check(const WriteRequest& w) {
    checked_.fetch_add(1, std::memory_order_relaxed);
    if (w.src_offset >= next_.size()) {
      return violation(
          fmt::format("a command names producer {}, but there are {}", w.src_offset, next_.size()));
    }
    const auto producer = static_cast<uint32_t>(w.src_offset);
    uint64_t& next = next_[producer];
    if (w.dst_offset != next) {
      violation(
          fmt::format("producer {}: command {} arrived where {} was due (lost, duplicated "
                      "or reordered)",
                      producer, w.dst_offset, next));
    } else if (w.length != device::selftest_length(producer, static_cast<uint32_t>(w.dst_offset)) ||
               w.peer != kDstRank || w.src_window != 0 || w.dst_window != 0) {
      violation(fmt::format("producer {}: command {} is torn (length {}, peer {})", producer,
                            w.dst_offset, w.length, w.peer));
    }
    next = w.dst_offset + 1;
  }
  // Producers that did not deliver all `per_producer` commands.
  void check_complete(uint64_t per_producer) {
    for (size_t p = 0; p < next_.size(); ++p) {
      if (next_[p] != per_producer) {
        violation(fmt::format("producer {}: {} of {} commands arrived", p, next_[p], per_producer));
      }
    }
  }
  uint64_t checked() const { return checked_.load(); }
  uint64_t violations() const { return violations_.load(); }
  std::string first_violation() const {
    std::lock_guard lock(mutex_);
    return first_;
  }

 private:
  void violation(std::string what) {
    if (violations_.fetch_add(1) == 0) {
      std::lock_guard lock(mutex_);
      first_ = std::move(what);
    }
  }
  std::vector<uint64_t> next_;
  std::atomic<uint64_t> checked_{0};
  std::atomic<uint64_t> violations_{0};
  mutable std::mutex mutex_;
  std::string first_;
};

// The consumers of one run: Courier proxy threads, or the bare loops of the
// baseline; both stop on destruction.
class Consumers {
 public:
  virtual ~Consumers() = default;
};

class ProxyConsumers final : public Consumers {
 public:
  ProxyConsumers(const GpuRings& rings, uint32_t threads, uint32_t max_inflight,
                 CommandChecker* checker, Logger& log) {
    for (uint32_t c = 0; c < rings.size(); ++c) {
      channels_.push_back(std::make_unique<ProxyChannel>(c, rings.host_slots(c),
                                                         rings.host_control(c), rings.depth()));
    }
    for (uint32_t t = 0; t < threads; ++t) {
      CompletingSink::OnWrite on_write;
      if (checker != nullptr) on_write = [checker](const WriteRequest& w) { checker->check(w); };
      sinks_.push_back(std::make_unique<CompletingSink>(max_inflight, on_write));
      std::vector<ProxyChannel*> mine;
      for (uint32_t c = t; c < rings.size(); c += threads) mine.push_back(channels_[c].get());
      ProxyOptions options;
      options.world_size = kDstRank + 1;  // the commands' peer must exist
      // As a Context stacks it: the semantics layer over the thread's transport.
      options.upper_layers = [&log, world = options.world_size](ProxyTransport& below) {
        SemanticsOptions semantics;
        semantics.world_size = world;
        return std::make_unique<SemanticTransport>(below, semantics, nullptr, log);
      };
      proxies_.push_back(std::make_unique<ProxyThread>(t, *sinks_.back(), mine, options, log));
    }
    for (auto& proxy : proxies_) proxy->start();
  }
  ~ProxyConsumers() override {
    for (auto& proxy : proxies_) proxy->stop();
  }

 private:
  std::vector<std::unique_ptr<ProxyChannel>> channels_;
  std::vector<std::unique_ptr<CompletingSink>> sinks_;
  std::vector<std::unique_ptr<ProxyThread>> proxies_;
};

class BareConsumers final : public Consumers {
 public:
  BareConsumers(const GpuRings& rings, uint32_t threads) {
    for (uint32_t t = 0; t < threads; ++t) {
      loops_.emplace_back([this, &rings, t, threads] {
        struct Channel {
          FifoConsumer fifo;
          CompletionTracker tracker;
          FifoControl* control;
        };
        std::vector<Channel> mine;
        for (uint32_t c = t; c < rings.size(); c += threads) {
          mine.push_back({FifoConsumer(rings.host_slots(c), rings.depth(), c),
                          CompletionTracker(rings.depth()), rings.host_control(c)});
        }
        TransferCmd batch[64];
        while (!stop_.load(std::memory_order_relaxed)) {
          for (Channel& ch : mine) {
            uint64_t first = ch.fifo.next_ticket();
            uint32_t n = ch.fifo.poll(batch, 64);
            if (n == 0) continue;
            for (uint32_t i = 0; i < n; ++i) ch.tracker.complete(first + i);
            publish_completed(*ch.control, ch.tracker.prefix());
          }
        }
      });
    }
  }
  ~BareConsumers() override {
    stop_.store(true);
    for (auto& loop : loops_) loop.join();
  }

 private:
  std::atomic<bool> stop_{false};
  std::vector<std::thread> loops_;
};

// Waits until channel c's completion count reached expected[c] for all c.
void wait_all_completed(const GpuRings& rings, const std::vector<uint64_t>& expected) {
  const auto deadline = Clock::now() + std::chrono::nanoseconds(kTimeoutNs);
  for (uint32_t c = 0; c < rings.size(); ++c) {
    std::atomic_ref<uint64_t> completed(rings.host_control(c)->completed);
    while (completed.load() < expected[c]) {
      if (Clock::now() > deadline) {
        fail("channel {}: {} of {} commands completed after {} s", c, completed.load(), expected[c],
             kTimeoutNs / 1'000'000'000);
      }
      std::this_thread::yield();
    }
  }
}

double median_of(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

class Runner {
 public:
  Runner(const GpuFifoOptions& o, const OpenGpu& gpu)
      : o_(o),
        gpu_(gpu),
        channels_(o.channels != 0 ? o.channels : o.proxy_threads),
        producers_(o.blocks * o.threads),
        per_producer_(o.commands / producers_),
        rings_(gpu, channels_, o.depth, o.max_inflight),
        expected_(channels_, 0) {
    for (uint32_t b = 0; b < o.blocks; ++b) expected_[b % channels_] += o.threads * per_producer_;
  }

  uint64_t total() const { return per_producer_ * producers_; }

  // One run through proxies (courier) or bare loops; returns seconds from
  // the launch to the last completion.
  double run_once(bool through_proxy, CommandChecker* checker) {
    rings_.clear();
    Logger log(LogLevel::error);
    std::unique_ptr<Consumers> consumers;
    if (through_proxy) {
      consumers =
          std::make_unique<ProxyConsumers>(rings_, o_.proxy_threads, o_.max_inflight, checker, log);
    } else {
      consumers = std::make_unique<BareConsumers>(rings_, o_.proxy_threads);
    }
    std::vector<courier_gpu_channel_v1> channels;
    for (uint32_t c = 0; c < channels_; ++c) channels.push_back(rings_.channel(c));
    courier_gpu_fifo_producers_v1 job{};
    job.struct_size = sizeof job;
    job.device = 0;
    job.channels = channels.data();
    job.num_channels = channels_;
    job.blocks = o_.blocks;
    job.threads = o_.threads;
    job.mode = o_.warp_push ? COURIER_GPU_PUSH_WARP : COURIER_GPU_PUSH_THREAD;
    job.commands_per_thread = per_producer_;
    job.dst_rank = kDstRank;
    job.use_graph = o_.graph ? 1 : 0;
    auto start = Clock::now();
    gpu_.check(gpu_.selftest().run_fifo_producers(gpu_.gpu->handle(), &job), "run_fifo_producers");
    if (job.push_status != 0) {
      fail("the producer kernel could not push: {}",
           to_string(static_cast<PushStatus>(job.push_status)));
    }
    wait_all_completed(rings_, expected_);
    double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    consumers.reset();
    return seconds;
  }

  BenchResult row(const char* path, double seconds) const {
    BenchResult r;
    r.bench = "fifo";
    r.path = path;
    r.op = o_.warp_push ? "push_warp" : "push";
    r.provider = gpu_.gpu->plugin().name;
    r.size = sizeof(TransferCmd);
    r.window = o_.max_inflight;
    r.fifo_inflight = o_.max_inflight;
    r.iters = total();
    r.threads = producers_;
    r.repeats = o_.repeats;
    r.seconds = seconds;
    r.msgs_per_s = static_cast<double>(r.iters) / seconds;
    r.gbytes_per_s = r.msgs_per_s * static_cast<double>(r.size) / 1e9;
    return r;
  }

  // The round trips of one command through a proxy, and the bare flag
  // ping-pong, each `iterations` long.
  std::vector<LatencyRow> round_trips(uint32_t iterations) {
    GpuAllocation samples(gpu_, iterations * sizeof(uint64_t), false);
    std::vector<LatencyRow> rows;
    {
      GpuAllocation flags(gpu_, 256, true);  // ping at 0, pong at 128
      flags.clear();
      std::atomic<bool> stop{false};
      std::thread echo([&] {
        std::atomic_ref<uint64_t> ping(*flags.host<uint64_t>(0));
        std::atomic_ref<uint64_t> pong(*flags.host<uint64_t>(128));
        uint64_t last = 0;
        while (!stop.load(std::memory_order_relaxed)) {
          uint64_t seen = ping.load(std::memory_order_acquire);
          if (seen != last) {
            pong.store(seen, std::memory_order_release);
            last = seen;
          }
        }
      });
      courier_gpu_fifo_round_trips_v1 job{};
      job.struct_size = sizeof job;
      job.mode = COURIER_GPU_ROUND_TRIP_FLAG;
      job.iterations = iterations;
      job.ping = flags.device<uint64_t>(0);
      job.pong = flags.device<uint64_t>(128);
      job.samples = samples.device<uint64_t>();
      job.channel.timeout_ns = kTimeoutNs;
      int rc = gpu_.selftest().run_fifo_round_trips(gpu_.gpu->handle(), &job);
      stop.store(true);
      echo.join();
      gpu_.check(rc, "run_fifo_round_trips (flag)");
      rows.push_back(latency_row("flag", job, samples));
    }
    {
      rings_.clear();
      Logger log(LogLevel::error);
      ProxyConsumers proxy(rings_, 1, o_.max_inflight, nullptr, log);
      courier_gpu_fifo_round_trips_v1 job{};
      job.struct_size = sizeof job;
      job.mode = COURIER_GPU_ROUND_TRIP_COMMAND;
      job.iterations = iterations;
      job.channel = rings_.channel(0);
      job.samples = samples.device<uint64_t>();
      gpu_.check(gpu_.selftest().run_fifo_round_trips(gpu_.gpu->handle(), &job),
                 "run_fifo_round_trips (command)");
      rows.push_back(latency_row("courier", job, samples));
    }
    return rows;
  }

 private:
  LatencyRow latency_row(const char* path, const courier_gpu_fifo_round_trips_v1& job,
                         const GpuAllocation& samples) const {
    if (job.push_status != 0) {
      fail("the {} round-trip kernel failed: {}", path,
           to_string(static_cast<PushStatus>(job.push_status)));
    }
    std::vector<uint64_t> ns(job.iterations);
    gpu_.check(gpu_.runtime().memcpy_sync(gpu_.gpu->handle(), ns.data(), samples.device(),
                                          ns.size() * sizeof(uint64_t)),
               "memcpy_sync of the round-trip samples");
    std::sort(ns.begin(), ns.end());
    LatencyRow row;
    row.path = path;
    row.iters = job.iterations;
    row.median_us = static_cast<double>(ns[ns.size() / 2]) / 1000.0;
    row.p99_us = static_cast<double>(ns[std::min(ns.size() - 1, ns.size() * 99 / 100)]) / 1000.0;
    return row;
  }

  const GpuFifoOptions& o_;
  const OpenGpu& gpu_;
  uint32_t channels_;
  uint32_t producers_;
  uint64_t per_producer_;
  GpuRings rings_;
  std::vector<uint64_t> expected_;
};

}  // namespace

GpuFifoRun run_gpu_fifo_bench(const GpuFifoOptions& o) {
  const uint64_t producers = uint64_t{o.blocks} * o.threads;
  if (o.commands < producers) {
    fail("--commands {} is fewer than the {} producers (--blocks x --threads)", o.commands,
         producers);
  }
  if (o.commands / producers > 0xFFFFFFFFull) {
    fail("--commands {} gives more than 2^32 commands per producer", o.commands);
  }
  OpenGpu gpu(o.gpu);
  const uint32_t lanes = gpu.gpu->props().warp_size;
  if (o.warp_push && lanes > o.max_inflight) {
    fail("--inflight {} is below the backend's warp of {} lanes", o.max_inflight, lanes);
  }
  Runner runner(o, gpu);
  GpuFifoRun run;
  run.device = gpu.gpu->props().device_name;
  std::vector<double> ring, proxy;
  for (uint32_t i = 0; i < o.repeats; ++i) {
    ring.push_back(runner.run_once(false, nullptr));
    std::unique_ptr<CommandChecker> checker;
    if (o.check) checker = std::make_unique<CommandChecker>(static_cast<uint32_t>(producers));
    proxy.push_back(runner.run_once(true, checker.get()));
    if (checker) {
      checker->check_complete(runner.total() / producers);
      run.checked += checker->checked();
      run.violations += checker->violations();
      if (run.first_violation.empty()) run.first_violation = checker->first_violation();
    }
  }
  run.rows.push_back(runner.row("ring", median_of(ring)));
  run.rows.push_back(runner.row("courier", median_of(proxy)));
  if (o.round_trips > 0) run.latency = runner.round_trips(o.round_trips);
  return run;
}

}  // namespace courier::bench
