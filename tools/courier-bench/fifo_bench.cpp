#include "fifo_bench.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "completing_sink.hpp"
#include "core/config.hpp"
#include "core/log.hpp"
#include "core/proxy/fifo_consumer.hpp"
#include "core/proxy/proxy_thread.hpp"
#include "core/semantics/semantic_transport.hpp"
#include "gpu/fifo_push.hpp"

namespace courier::bench {

namespace {

struct Ring {
  explicit Ring(const FifoBenchOptions& o)
      : slots(o.depth), control(std::make_unique<FifoControl>()) {
    ch.slots = slots.data();
    ch.control = control.get();
    ch.head = &head;
    ch.completed_cache = &completed_cache;
    ch.depth_mask = o.depth - 1;
    ch.max_inflight = o.max_inflight;
    ch.timeout_ns = 60'000'000'000ull;
  }
  std::vector<TransferCmd> slots;
  std::unique_ptr<FifoControl> control;
  alignas(64) uint64_t head = 0;
  alignas(64) uint64_t completed_cache = 0;
  DeviceChannel ch;
};

// Runs the producers against `ring` and returns the seconds until every
// command completed.
double produce(Ring& ring, const FifoBenchOptions& o) {
  WriteCmdArgs args;
  args.dst_rank = 1;
  args.length = 16;
  TransferCmd cmd;
  encode_write(args, &cmd);
  std::atomic<uint32_t> ready{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> producers;
  const uint64_t per_producer = o.commands / o.producers;
  for (uint32_t p = 0; p < o.producers; ++p) {
    producers.emplace_back([&] {
      TransferCmd batch[kMaxBatch];
      for (auto& c : batch) c = cmd;
      ready.fetch_add(1);
      while (!go.load()) std::this_thread::yield();
      for (uint64_t sent = 0; sent < per_producer; sent += o.batch) {
        device::push_batch(ring.ch, batch, o.batch, nullptr);
      }
    });
  }
  while (ready.load() < o.producers) std::this_thread::yield();
  auto start = std::chrono::steady_clock::now();
  go.store(true);
  for (auto& t : producers) t.join();
  device::wait_completed(ring.ch, device::load_relaxed(ring.ch.head));
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Prefilled: per round, this thread fills the ring while nothing consumes
// it, then `start` starts the consumer and `stop` stops it once every
// command completed; only that drain is timed.
template <class Start, class Stop>
double drain_prefilled(Ring& ring, const FifoBenchOptions& o, Start start, Stop stop) {
  WriteCmdArgs args;
  args.dst_rank = 1;
  args.length = 16;
  TransferCmd batch[kMaxBatch];
  for (auto& c : batch) encode_write(args, &c);
  ring.ch.max_inflight = o.depth;  // a whole ring without waiting
  double seconds = 0;
  for (uint64_t done = 0; done < o.commands; done += o.depth) {
    for (uint32_t pushed = 0; pushed < o.depth; pushed += o.batch) {
      device::push_batch(ring.ch, batch, std::min(o.batch, o.depth - pushed), nullptr);
    }
    auto begin = std::chrono::steady_clock::now();
    start();
    device::wait_completed(ring.ch, done + o.depth);
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
    stop();
  }
  return seconds;
}

// The baseline: the same ring drained by a bare consume-and-complete loop.
double run_bare_ring(const FifoBenchOptions& o) {
  Ring ring(o);
  std::atomic<bool> stop{false};
  if (o.prefilled) {
    FifoConsumer fifo(ring.slots.data(), o.depth, 0);
    CompletionTracker tracker(o.depth);
    std::thread consumer;
    return drain_prefilled(
        ring, o,
        [&] {
          stop.store(false);
          consumer = std::thread([&] {
            TransferCmd batch[64];
            while (!stop.load(std::memory_order_relaxed)) {
              uint64_t first = fifo.next_ticket();
              uint32_t n = fifo.poll(batch, 64);
              if (n == 0) {
                std::this_thread::yield();
                continue;
              }
              for (uint32_t i = 0; i < n; ++i) tracker.complete(first + i);
              publish_completed(*ring.control, tracker.prefix());
            }
          });
        },
        [&] {
          stop.store(true);
          consumer.join();
        });
  }
  std::thread consumer([&] {
    FifoConsumer fifo(ring.slots.data(), o.depth, 0);
    CompletionTracker tracker(o.depth);
    TransferCmd batch[64];
    while (!stop.load(std::memory_order_relaxed)) {
      uint64_t first = fifo.next_ticket();
      uint32_t n = fifo.poll(batch, 64);
      if (n == 0) {
        std::this_thread::yield();
        continue;
      }
      for (uint32_t i = 0; i < n; ++i) tracker.complete(first + i);
      publish_completed(*ring.control, tracker.prefix());
    }
  });
  double seconds = produce(ring, o);
  stop.store(true);
  consumer.join();
  return seconds;
}

double run_proxy(const FifoBenchOptions& o) {
  Ring ring(o);
  Logger log(LogLevel::error);
  ProxyChannel channel(0, ring.slots.data(), ring.control.get(), o.depth);
  CompletingSink sink(o.max_inflight);
  ProxyOptions options;
  options.world_size = 2;  // the commands write to rank 1
  // As a Context stacks it: the semantics layer over the thread's transport.
  SemanticsOptions semantics;
  semantics.world_size = options.world_size;
  options.upper_layers = [&](ProxyTransport& below) {
    return std::make_unique<SemanticTransport>(below, semantics, nullptr, log);
  };
  // As a Context would run it (these commands never merge: all write offset 0).
  options.coalesce_bytes = Config::load(process_env(), /*need_job=*/false).coalesce_bytes;
  ProxyThread proxy(0, sink, {&channel}, options, log);
  if (o.prefilled) {
    return drain_prefilled(
        ring, o, [&] { proxy.start(); }, [&] { proxy.stop(); });
  }
  proxy.start();
  double seconds = produce(ring, o);
  proxy.stop();
  return seconds;
}

BenchResult result_of(const FifoBenchOptions& o, const char* path, double seconds) {
  BenchResult r;
  r.bench = "fifo";
  r.path = path;
  r.op = "push";
  r.size = sizeof(TransferCmd);
  r.window = o.max_inflight;
  r.fifo_inflight = o.max_inflight;
  r.iters = o.prefilled ? o.commands : o.commands / o.producers * o.producers;
  r.threads = o.prefilled ? 0 : o.producers;  // prefilled: no producer runs meanwhile
  r.seconds = seconds;
  r.msgs_per_s = static_cast<double>(r.iters) / seconds;
  r.gbytes_per_s = r.msgs_per_s * static_cast<double>(r.size) / 1e9;
  return r;
}

}  // namespace

std::vector<BenchResult> run_fifo_bench(const FifoBenchOptions& options) {
  FifoBenchOptions o = options;
  o.commands = o.prefilled ? std::max<uint64_t>(o.commands / o.depth, 1) * o.depth
                           : o.commands / (uint64_t{o.batch} * o.producers) * o.batch * o.producers;
  // Alternate the two paths and keep each one's median run.
  std::vector<double> ring, proxy;
  for (uint32_t i = 0; i < o.repeats; ++i) {
    ring.push_back(run_bare_ring(o));
    proxy.push_back(run_proxy(o));
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  BenchResult r = result_of(o, "ring", median(ring));
  BenchResult c = result_of(o, "courier", median(proxy));
  r.repeats = c.repeats = o.repeats;
  return {r, c};
}

}  // namespace courier::bench
