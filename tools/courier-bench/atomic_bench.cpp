#include "atomic_bench.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "core/bootstrap/bootstrap.hpp"
#include "core/check.hpp"
#include "gpu/fifo_push.hpp"

namespace courier::bench {

namespace {

// Window 0: [sender][slot] blocks written here by peers, then (a WRITE names
// one window for both ends) [peer][slot] blocks this rank sends.
constexpr uint32_t kPayloadWindow = 0;
constexpr uint32_t kCounterWindow = 1;  // [sender] 64-bit counters peers add to

// Block b (0, 1, ...) of a sender->receiver stream lives in slot b % slots
// and carries stamp b + 1 in its first and last 8 bytes.
uint64_t read_stamp(const std::byte* p) {
  return std::atomic_ref<const uint64_t>(*reinterpret_cast<const uint64_t*>(p))
      .load(std::memory_order_relaxed);
}

struct Stream {
  uint32_t peer = 0;
  DeviceChannel channel;
  uint64_t groups = 0;  // groups of writes_per_atomic WRITEs + one ATOMIC
  PushStatus status = PushStatus::ok;
};

struct KernelArgs {
  const AtomicOptions* options;
  uint32_t rank;
  std::byte* source;       // the outgoing half of window 0
  uint64_t source_offset;  // its offset in window 0
  std::vector<Stream> streams;
};

// One "GPU thread" per peer: fills a source block, WRITEs it, and after
// writes_per_atomic of them adds that many to its counter at the peer.
void producer_kernel(const courier_host_thread_v1* self, void* raw) {
  auto& a = *static_cast<KernelArgs*>(raw);
  Stream& s = a.streams[self->thread_idx];
  const AtomicOptions& o = *a.options;
  const uint64_t slot_bytes = o.block;
  std::byte* ring = a.source + uint64_t{s.peer} * o.slots * slot_bytes;
  std::vector<uint64_t> ticket_of_slot(o.slots, 0);  // ticket + 1 of the slot's last WRITE
  uint64_t block = 0;
  for (uint64_t g = 0; g < s.groups; ++g) {
    TransferCmd batch[kMaxBatch];
    uint32_t n = 0;
    std::vector<uint32_t> used;
    for (uint32_t w = 0; w < o.writes_per_atomic; ++w, ++block) {
      const uint32_t slot = static_cast<uint32_t>(block % o.slots);
      // The source slot is reused only after its previous WRITE completed.
      if (ticket_of_slot[slot] != 0) {
        s.status = device::wait_completed(s.channel, ticket_of_slot[slot]);
        if (s.status != PushStatus::ok) return;
      }
      std::byte* p = ring + slot * slot_bytes;
      const uint64_t stamp = block + 1;
      std::memset(p + 8, static_cast<int>(stamp & 0xff), slot_bytes - 16);
      std::memcpy(p, &stamp, 8);
      std::memcpy(p + slot_bytes - 8, &stamp, 8);
      WriteCmdArgs wa;
      wa.dst_rank = s.peer;
      wa.window = kPayloadWindow;
      wa.src_offset = a.source_offset + (uint64_t{s.peer} * o.slots + slot) * slot_bytes;
      wa.dst_offset = (uint64_t{a.rank} * o.slots + slot) * slot_bytes;
      wa.length = slot_bytes;
      if (encode_write(wa, &batch[n]) != CmdStatus::ok) fail("cannot encode a WRITE");
      used.push_back(slot);
      ++n;
    }
    if (encode_atomic(s.peer, kCounterWindow, uint64_t{a.rank} * 8, AtomicOp::add_u64,
                      o.writes_per_atomic, &batch[n]) != CmdStatus::ok) {
      fail("cannot encode an ATOMIC");
    }
    ++n;
    uint64_t first = 0;
    s.status = device::push_batch(s.channel, batch, n, &first);
    if (s.status != PushStatus::ok) return;
    for (uint32_t i = 0; i < used.size(); ++i) ticket_of_slot[used[i]] = first + i + 1;
  }
  s.status = device::drain(s.channel);
}

}  // namespace

AtomicRun run_atomic_bench(Context& ctx, const AtomicOptions& o) {
  const uint32_t world = static_cast<uint32_t>(ctx.world_size());
  const uint32_t me = static_cast<uint32_t>(ctx.rank());
  if (world < 2) fail("the atomic benchmark needs at least 2 ranks");
  const uint64_t region = uint64_t{world} * o.slots * o.block;
  DeviceBuffer payload = ctx.alloc(2 * region);
  DeviceBuffer counters = ctx.alloc(uint64_t{world} * 8);
  std::memset(payload.data(), 0, payload.size());
  std::memset(counters.data(), 0, counters.size());
  if (ctx.register_window(payload.data(), payload.size()) != kPayloadWindow ||
      ctx.register_window(counters.data(), counters.size()) != kCounterWindow) {
    fail("the atomic benchmark needs a Context without other windows");
  }
  const uint64_t per_peer = o.ops / (world - 1);
  const uint64_t groups = per_peer / (o.writes_per_atomic + 1);

  KernelArgs args{&o, me, static_cast<std::byte*>(payload.data()) + region, region, {}};
  for (uint32_t i = 1; i < world; ++i) {
    Stream s;
    s.peer = (me + i) % world;
    s.channel = ctx.channel((i - 1) % ctx.num_channels());
    s.groups = groups;
    args.streams.push_back(s);
  }

  // The checker: counter value k from sender s means blocks [0, k) of s are
  // complete here (the last `slots` of them are still in their slots).
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> violations{0};
  std::string first_violation;
  auto check_pass = [&](bool final_pass) {
    const auto* base = static_cast<const std::byte*>(payload.data());
    const auto* count = static_cast<const uint64_t*>(counters.data());
    for (uint32_t s = 0; s < world; ++s) {
      if (s == me) continue;
      const uint64_t k = std::atomic_ref<const uint64_t>(count[s]).load(std::memory_order_acquire);
      const uint64_t from = k > o.slots ? k - o.slots : 0;
      for (uint64_t b = from; b < k; ++b) {
        const std::byte* p = base + (uint64_t{s} * o.slots + b % o.slots) * o.block;
        const uint64_t head = read_stamp(p), tail = read_stamp(p + o.block - 8);
        // A newer block in the slot is fine (the sender went on); an older
        // one, or a torn one, means the counter ran ahead of the data.
        if (head < b + 1 || tail < b + 1 || (final_pass && (head != tail))) {
          if (violations.fetch_add(1) == 0) {
            first_violation =
                fmt::format("counter from rank {} read {}, but block {} holds stamps {} / {}", s, k,
                            b, head, tail);
          }
        }
      }
    }
  };
  std::thread checker;
  if (o.check) {
    checker = std::thread([&] {
      while (!stop.load(std::memory_order_relaxed)) {
        check_pass(false);
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
    });
  }

  ctx.barrier();
  const auto start = std::chrono::steady_clock::now();
  ctx.launch_host_kernel(1, world - 1, producer_kernel, &args);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (const Stream& s : args.streams) {
    if (s.status != PushStatus::ok) {
      stop = true;
      if (checker.joinable()) checker.join();
      fail("rank {}: streaming to rank {} failed: {}", me, s.peer, to_string(s.status));
    }
  }
  ctx.barrier();  // every rank's DRAINs returned: all atomics are confirmed
  stop = true;
  if (checker.joinable()) checker.join();

  // Final state: each sender's counter holds all its blocks.
  const uint64_t expected = groups * o.writes_per_atomic;
  const auto* count = static_cast<const uint64_t*>(counters.data());
  for (uint32_t s = 0; s < world; ++s) {
    if (s == me) continue;
    if (count[s] != expected) {
      if (violations.fetch_add(1) == 0) {
        first_violation =
            fmt::format("counter from rank {} ends at {}, expected {}", s, count[s], expected);
      }
    }
  }
  if (o.check) check_pass(true);
  if (violations.load() != 0) {
    fmt::print(stderr, "[rank {}] first violation: {}\n", me, first_violation);
  }

  // Sum over ranks: violations, and the slowest rank's time.
  struct Mine {
    uint64_t violations;
    double seconds;
  } mine{violations.load(), seconds};
  std::vector<std::byte> all =
      ctx.bootstrap().allgather(std::as_bytes(std::span<const Mine, 1>(&mine, 1)));
  AtomicRun run;
  double slowest = 0;
  for (uint32_t r = 0; r < world; ++r) {
    Mine theirs;
    std::memcpy(&theirs, all.data() + r * sizeof(Mine), sizeof(Mine));
    run.violations += theirs.violations;
    slowest = std::max(slowest, theirs.seconds);
  }
  run.stats = ctx.atomic_stats();
  BenchResult& r = run.result;
  r.bench = "atomic";
  r.path = run.stats.add_u64;
  r.op = "add_u64";
  r.provider = ctx.nic_backend() == "ofi" ? o.provider : ctx.nic_backend();
  r.size = o.block;
  r.window = 0;
  r.iters = groups * (world - 1) * world;  // atomics in the whole job
  r.threads = world - 1;
  r.seconds = slowest;
  r.msgs_per_s = static_cast<double>(r.iters) / slowest;
  r.gbytes_per_s = r.msgs_per_s * o.writes_per_atomic * o.block / 1e9;
  return run;
}

}  // namespace courier::bench
