// courier-semantics-check: the semantic level of the conformance suite
// (docs/conformance.md, "Semantic level"). Run under courier-run with N >= 2
// ranks; it creates a courier::Context from the environment (NIC backend,
// provider, atomics strategy, faults) and runs every case collectively on
// every rank, in order:
//   write               WRITEs of 1 B .. 64 KiB to every peer, every byte checked
//   write-imm           write with immediate data: notifications counted exactly
//   atomic-add-u64/u32  known values, +5 / -3, sign extension, no carry out of a
//                       32-bit word, concurrent adds from every peer sum exactly
//   write-then-atomic   a counter value k implies blocks 0..k-1 are complete
//   drain               after DRAIN returns, the data is visible at the target
//   barrier-world/rail  nobody leaves barrier i before the last rank entered it
//   error-*             bad rank, unregistered window, past the remote window's
//                       end: the channel fails with exactly one error
// Each rank prints "[PASS|FAIL|SKIP] <case>: <detail>" per case and
// "semantics: P passed, F failed, S skipped"; it exits 1 if a case failed.
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "core/bootstrap/bootstrap.hpp"
#include "courier/context.hpp"
#include "gpu/fifo_push.hpp"

namespace {

using courier::PushStatus;
using courier::TransferCmd;
using Clock = std::chrono::steady_clock;

enum class Verdict { pass, fail, skip };

struct Outcome {
  Verdict verdict = Verdict::pass;
  std::string detail;
};

// Collects the first few failed checks of a case.
class Checks {
 public:
  void expect(bool ok, const std::string& what) {
    if (ok) return;
    if (failed_ < 3) messages_ += (failed_ == 0 ? "" : "; ") + what;
    ++failed_;
  }
  bool ok() const { return failed_ == 0; }
  Outcome outcome(const std::string& pass_detail) const {
    if (ok()) return {Verdict::pass, pass_detail};
    return {Verdict::fail, fmt::format("{} failed check(s): {}", failed_, messages_)};
  }

 private:
  uint64_t failed_ = 0;
  std::string messages_;
};

// Window 0 ("data"): world inbound areas, one per sender, then world
// outbound areas, one per receiver (a WRITE names one window for both ends).
constexpr uint64_t kArea = 128 * 1024;
// Inside an area: the slices of the write and drain cases, then the
// immediate-data writes at kImmBase.
constexpr uint32_t kSizes[] = {1, 7, 64, 4096, 7168, 65536};
constexpr uint64_t kImmBase = 96 * 1024;
constexpr uint32_t kImmWrites = 16;  // per sender and receiver
constexpr uint32_t kImmLength = 8;

struct Slice {
  uint64_t offset;
  uint32_t length;
};

// Odd offsets and 64-byte gaps (which must stay zero) between slices.
std::vector<Slice> slices() {
  std::vector<Slice> out;
  uint64_t cursor = 0;
  for (uint32_t i = 0; i < std::size(kSizes); ++i) {
    const uint64_t offset = cursor + 2 * i + 1;
    out.push_back({offset, kSizes[i]});
    cursor = (offset + kSizes[i] + 64 + 63) / 64 * 64;
  }
  return out;
}

// Never zero, so a byte no write reached shows up against the zeroed window.
uint8_t pattern(uint64_t seed, uint64_t sender, uint64_t receiver, uint64_t offset) {
  uint64_t x = (offset + 1) * 0x9E3779B97F4A7C15ull ^ (seed << 40) ^ (sender << 24) ^
               (receiver * 0x85EBCA6Bull);
  x ^= x >> 29;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 32;
  const auto v = static_cast<uint8_t>(x);
  return v == 0 ? 0x5A : v;
}

// Window 1 ("counters"): per-sender blocks of the exact-value atomics, the
// shared counters every peer adds to, and the write-then-atomic counters.
constexpr uint64_t kCounterBlock = 64;
constexpr uint64_t kMaxRanks = 64;
constexpr uint64_t kExactBase = 0;                                      // [sender] block
constexpr uint64_t kShared64 = kExactBase + kMaxRanks * kCounterBlock;  // u64
constexpr uint64_t kShared32 = kShared64 + 8;  // u32, then a zero u32 guard
constexpr uint64_t kWtaBase = kShared64 + 64;  // [sender] u64
constexpr uint64_t kCountersBytes = kWtaBase + kMaxRanks * 8;
constexpr uint32_t kSharedAdds = 100;  // per peer and width

// Window 2 ("wta"): write-then-atomic blocks, inbound [sender][slot] then
// outbound [receiver][slot].
constexpr uint32_t kWtaSlots = 8;
constexpr uint32_t kWtaBlock = 512;
constexpr uint32_t kWtaWritesPerAtomic = 4;
constexpr uint32_t kWtaGroups = 300;  // per peer: 1500 commands

constexpr uint32_t kDataWindow = 0, kCounterWindow = 1, kWtaWindow = 2, kWindows = 3;

uint32_t operand(int32_t value) { return static_cast<uint32_t>(value); }

TransferCmd write_cmd(uint32_t rank, uint32_t window, uint64_t src, uint64_t dst, uint32_t length,
                      uint8_t flags = 0) {
  courier::WriteCmdArgs a;
  a.dst_rank = rank;
  a.window = window;
  a.src_offset = src;
  a.dst_offset = dst;
  a.length = length;
  a.flags = flags;
  TransferCmd cmd;
  if (courier::encode_write(a, &cmd) != courier::CmdStatus::ok) throw std::runtime_error("encode");
  return cmd;
}

template <typename T>
T load(const void* p) {
  return std::atomic_ref<const T>(*static_cast<const T*>(p)).load(std::memory_order_acquire);
}

class Suite {
 public:
  Suite()
      : me_(static_cast<uint32_t>(ctx_.rank())), world_(static_cast<uint32_t>(ctx_.world_size())) {
    if (world_ < 2 || world_ > kMaxRanks) {
      throw courier::Error(fmt::format("needs 2..{} ranks, got {}", kMaxRanks, world_));
    }
    nch_ = ctx_.num_channels();
    data_ = ctx_.alloc(2 * world_ * kArea);
    counters_ = ctx_.alloc(kCountersBytes);
    wta_ = ctx_.alloc(2ull * world_ * kWtaSlots * kWtaBlock);
    for (courier::DeviceBuffer* b : {&data_, &counters_, &wta_})
      std::memset(b->data(), 0, b->size());
    if (ctx_.register_window(data_.data(), data_.size()) != kDataWindow ||
        ctx_.register_window(counters_.data(), counters_.size()) != kCounterWindow ||
        ctx_.register_window(wta_.data(), wta_.size()) != kWtaWindow) {
      throw courier::Error("unexpected window ids");
    }
    fmt::print("semantics: rank {} of {}, NIC backend {}, {} channels, ADD_U64 {}, ADD_U32 {}\n",
               me_, world_, ctx_.nic_backend(), nch_, ctx_.atomic_stats().add_u64,
               ctx_.atomic_stats().add_u32);
    ctx_.barrier();
  }

  int run() {
    run_case("write", [&] { return write_case(); });
    run_case("write-imm", [&] { return write_imm_case(); });
    run_case("atomic-add-u64", [&] { return atomic_case(courier::AtomicOp::add_u64); });
    run_case("atomic-add-u32", [&] { return atomic_case(courier::AtomicOp::add_u32); });
    run_case("write-then-atomic", [&] { return write_then_atomic_case(); });
    run_case("drain", [&] { return drain_case(); });
    run_case("barrier-world", [&] { return barrier_world_case(); });
    run_case("barrier-rail", [&] { return barrier_rail_case(); });
    error_cases();
    ctx_.barrier();  // nobody leaves while a peer still runs
    fmt::print("semantics: {} passed, {} failed, {} skipped\n", passed_, failed_, skipped_);
    return failed_ == 0 ? 0 : 1;
  }

 private:
  void run_case(const std::string& name, const std::function<Outcome()>& body) {
    Outcome o;
    try {
      o = body();
    } catch (const std::exception& e) {
      o = {Verdict::fail, std::string("exception: ") + e.what()};
    }
    const char* tag = o.verdict == Verdict::pass   ? "PASS"
                      : o.verdict == Verdict::fail ? "FAIL"
                                                   : "SKIP";
    (o.verdict == Verdict::pass ? passed_ : o.verdict == Verdict::fail ? failed_ : skipped_) += 1;
    fmt::print("[{}] {}: {}\n", tag, name, o.detail);
    std::fflush(stdout);
  }

  std::byte* data() const { return static_cast<std::byte*>(data_.data()); }
  std::byte* counters() const { return static_cast<std::byte*>(counters_.data()); }
  uint64_t inbound(uint32_t sender) const { return uint64_t{sender} * kArea; }
  uint64_t outbound(uint32_t receiver) const { return uint64_t{world_ + receiver} * kArea; }

  // Pushes cmd on channel c, recording a failed push.
  void push(Checks& checks, uint32_t c, const TransferCmd& cmd) {
    const PushStatus s = courier::device::push(ctx_.channel(c), cmd, nullptr);
    checks.expect(s == PushStatus::ok,
                  fmt::format("push on channel {}: {}", c, courier::to_string(s)));
  }
  // DRAINs every channel; each must report success.
  void drain_all(Checks& checks) {
    for (uint32_t c = 0; c < nch_; ++c) {
      const PushStatus s = courier::device::drain(ctx_.channel(c));
      checks.expect(s == PushStatus::ok,
                    fmt::format("DRAIN on channel {}: {} ({})", c, courier::to_string(s),
                                ctx_.channel_stats(c).first_error));
    }
  }

  // Sends every slice of the pattern `seed` to every peer, over all channels.
  void send_slices(Checks& checks, uint64_t seed) {
    const std::vector<Slice> ss = slices();
    for (uint32_t i = 1; i < world_; ++i) {
      const uint32_t peer = (me_ + i) % world_;
      for (const Slice& s : ss) {
        for (uint64_t b = 0; b < s.length; ++b) {
          data()[outbound(peer) + s.offset + b] = std::byte{pattern(seed, me_, peer, s.offset + b)};
        }
      }
      for (uint32_t k = 0; k < ss.size(); ++k) {
        push(checks, (i + k) % nch_,
             write_cmd(peer, kDataWindow, outbound(peer) + ss[k].offset,
                       inbound(me_) + ss[k].offset, ss[k].length));
      }
    }
  }

  // Checks every slice from every peer; with `gaps`, also that every other
  // byte of the areas (the own one included) is still zero.
  uint64_t verify_slices(Checks& checks, uint64_t seed, bool gaps) {
    const std::vector<Slice> ss = slices();
    uint64_t checked = 0;
    for (uint32_t s = 0; s < world_; ++s) {
      uint64_t bad = 0, first = 0;
      std::vector<bool> in_slice(kImmBase, false);
      if (s != me_) {
        for (const Slice& sl : ss) {
          for (uint64_t b = sl.offset; b < sl.offset + sl.length; ++b) {
            in_slice[b] = true;
            if (data()[inbound(s) + b] != std::byte{pattern(seed, s, me_, b)} && bad++ == 0)
              first = b;
            ++checked;
          }
        }
      }
      if (gaps) {
        for (uint64_t b = 0; b < kImmBase; ++b) {
          if (!in_slice[b] && data()[inbound(s) + b] != std::byte{0} && bad++ == 0) first = b;
        }
      }
      checks.expect(
          bad == 0,
          fmt::format("{} wrong bytes in the area of rank {}, first at offset {}", bad, s, first));
    }
    return checked;
  }

  Outcome write_case() {
    Checks checks;
    send_slices(checks, 1);
    drain_all(checks);
    ctx_.barrier();
    const uint64_t bytes = verify_slices(checks, 1, true);
    ctx_.barrier();
    return checks.outcome(
        fmt::format("{} WRITEs of 1 B .. 64 KiB from {} peers, {} bytes right, gaps untouched",
                    std::size(kSizes) * (world_ - 1), world_ - 1, bytes));
  }

  Outcome write_imm_case() {
    Checks checks;
    const uint64_t received0 = ctx_.imm_received(), failed0 = ctx_.imm_failed();
    ctx_.barrier();  // counts taken before any peer sends
    for (uint32_t i = 1; i < world_; ++i) {
      const uint32_t peer = (me_ + i) % world_;
      for (uint32_t j = 0; j < kImmWrites; ++j) {
        const uint64_t off = kImmBase + j * 16;
        for (uint64_t b = 0; b < kImmLength; ++b) {
          data()[outbound(peer) + off + b] = std::byte{pattern(2, me_, peer, off + b)};
        }
        push(checks, j % nch_,
             write_cmd(peer, kDataWindow, outbound(peer) + off, inbound(me_) + off, kImmLength,
                       courier::kCmdFlagImm));
      }
    }
    drain_all(checks);
    ctx_.barrier();
    // The notification is counted when this rank's proxy polls it, which can
    // come a little after the sender's completion.
    const uint64_t expected = uint64_t{kImmWrites} * (world_ - 1);
    const auto deadline = Clock::now() + std::chrono::seconds(10);
    while (ctx_.imm_received() - received0 < expected && Clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    ctx_.barrier();  // nothing else may arrive: every peer is done
    const uint64_t got = ctx_.imm_received() - received0;
    checks.expect(got == expected, fmt::format("{} notifications, expected {}", got, expected));
    checks.expect(ctx_.imm_failed() == failed0,
                  fmt::format("{} failed incoming writes", ctx_.imm_failed() - failed0));
    uint64_t bad = 0;
    for (uint32_t s = 0; s < world_; ++s) {
      if (s == me_) continue;
      for (uint32_t j = 0; j < kImmWrites; ++j) {
        const uint64_t off = kImmBase + j * 16;
        for (uint64_t b = 0; b < kImmLength; ++b) {
          if (data()[inbound(s) + off + b] != std::byte{pattern(2, s, me_, off + b)}) ++bad;
        }
      }
    }
    checks.expect(bad == 0, fmt::format("{} wrong bytes of writes with immediate data", bad));
    ctx_.barrier();
    return checks.outcome(fmt::format("{} of {} notifications, data right", got, expected));
  }

  // Exact values: per-sender words at known offsets, +5 / -3, sign extension,
  // no carry out of 32 bits; then every peer adding to one shared counter.
  Outcome atomic_case(courier::AtomicOp op) {
    const courier::Context::AtomicStats stats = ctx_.atomic_stats();
    const bool wide = op == courier::AtomicOp::add_u64;
    const std::string strategy = wide ? stats.add_u64 : stats.add_u32;
    if (strategy == "none") {
      return {Verdict::skip, fmt::format("{} strategy is 'none': {} not available on {}",
                                         wide ? "ADD_U64" : "ADD_U32", wide ? "ADD_U64" : "ADD_U32",
                                         ctx_.nic_backend())};
    }
    Checks checks;
    // {offset in the sender's block, addends}; the block starts zeroed.
    struct Target {
      uint64_t offset;
      std::vector<int32_t> adds;
    };
    // 64-bit words at 0 and 8 (16 stays zero); 32-bit words at 32, 40 and
    // 52 (the lower and upper halves of 8-byte words) with zero neighbours.
    const std::vector<Target> targets =
        wide ? std::vector<Target>{{0, {5, -3}}, {8, {-3}}}
             : std::vector<Target>{{32, {5, -3}}, {40, {-3}}, {52, {-3, 5}}};
    const uint64_t shared = wide ? kShared64 : kShared32;
    ctx_.barrier();
    uint32_t pushed = 0;
    for (uint32_t i = 1; i < world_; ++i) {
      const uint32_t peer = (me_ + i) % world_;
      for (const Target& t : targets) {
        for (int32_t v : t.adds) {
          TransferCmd cmd;
          courier::encode_atomic(peer, kCounterWindow, kExactBase + me_ * kCounterBlock + t.offset,
                                 op, operand(v), &cmd);
          push(checks, pushed++ % nch_, cmd);
        }
      }
      for (uint32_t j = 0; j < kSharedAdds; ++j) {
        // 64-bit: +(rank + 1); 32-bit: -1, wrapping below zero at once.
        TransferCmd cmd;
        courier::encode_atomic(peer, kCounterWindow, shared, op,
                               wide ? operand(static_cast<int32_t>(me_ + 1)) : operand(-1), &cmd);
        push(checks, pushed++ % nch_, cmd);
      }
    }
    drain_all(checks);
    ctx_.barrier();
    for (uint32_t s = 0; s < world_; ++s) {
      if (s == me_) continue;
      const std::byte* block = counters() + kExactBase + s * kCounterBlock;
      if (wide) {
        checks.expect(load<uint64_t>(block) == 2,
                      fmt::format("from rank {}: 0 + 5 - 3 gave {}", s, load<uint64_t>(block)));
        checks.expect(load<uint64_t>(block + 8) == ~uint64_t{0} - 2,
                      fmt::format("from rank {}: 0 - 3 gave {:#x} (sign extension)", s,
                                  load<uint64_t>(block + 8)));
        checks.expect(load<uint64_t>(block + 16) == 0,
                      fmt::format("from rank {}: a neighbour changed", s));
      } else {
        const uint32_t want[] = {2, 0, 0xFFFFFFFDu, 0, 0, 2};  // at 32, 36, 40, 44, 48, 52
        for (uint32_t k = 0; k < std::size(want); ++k) {
          const uint32_t got = load<uint32_t>(block + 32 + 4 * k);
          checks.expect(got == want[k],
                        fmt::format("from rank {}: word at {} holds {:#x}, expected {:#x}", s,
                                    32 + 4 * k, got, want[k]));
        }
      }
    }
    uint64_t sum = 0;
    for (uint32_t s = 0; s < world_; ++s) {
      if (s != me_) sum += uint64_t{kSharedAdds} * (s + 1);
    }
    if (wide) {
      const uint64_t got = load<uint64_t>(counters() + kShared64);
      checks.expect(got == sum, fmt::format("shared counter holds {}, expected {}", got, sum));
    } else {
      const auto want = static_cast<uint32_t>(-static_cast<int64_t>(kSharedAdds * (world_ - 1)));
      const uint32_t got = load<uint32_t>(counters() + kShared32);
      checks.expect(got == want,
                    fmt::format("shared counter holds {:#x}, expected {:#x}", got, want));
      checks.expect(load<uint32_t>(counters() + kShared32 + 4) == 0,
                    "the word after the shared 32-bit counter changed (carry)");
    }
    ctx_.barrier();
    return checks.outcome(
        fmt::format("strategy {}: exact values from {} peers, {} concurrent adds summed", strategy,
                    world_ - 1, kSharedAdds * (world_ - 1)));
  }

  struct WtaStream {
    uint32_t peer = 0;
    courier::DeviceChannel channel;
    PushStatus status = PushStatus::ok;
  };
  struct WtaArgs {
    uint32_t rank, world;
    std::byte* base;  // window 2
    std::vector<WtaStream> streams;
  };

  // One "GPU thread" per peer: groups of stamped block WRITEs, each followed
  // by an ADD_U64 of the group's size to this rank's counter at the peer.
  static void wta_kernel(const courier_host_thread_v1* self, void* raw) {
    auto& a = *static_cast<WtaArgs*>(raw);
    WtaStream& s = a.streams[self->thread_idx];
    const uint64_t out = (uint64_t{a.world} + s.peer) * kWtaSlots * kWtaBlock;
    uint64_t slot_ticket[kWtaSlots] = {};  // ticket + 1 of the slot's last WRITE
    uint64_t block = 0;
    for (uint32_t g = 0; g < kWtaGroups; ++g) {
      TransferCmd batch[kWtaWritesPerAtomic + 1];
      uint32_t slots[kWtaWritesPerAtomic];
      for (uint32_t w = 0; w < kWtaWritesPerAtomic; ++w, ++block) {
        const auto slot = static_cast<uint32_t>(block % kWtaSlots);
        // A source slot is refilled only after its previous WRITE completed.
        if (slot_ticket[slot] != 0) {
          s.status = courier::device::wait_completed(s.channel, slot_ticket[slot]);
          if (s.status != PushStatus::ok) return;
        }
        std::byte* p = a.base + out + slot * kWtaBlock;
        const uint64_t stamp = block + 1;
        std::memset(p + 8, static_cast<int>(stamp & 0xff), kWtaBlock - 16);
        std::memcpy(p, &stamp, 8);
        std::memcpy(p + kWtaBlock - 8, &stamp, 8);
        batch[w] = write_cmd(s.peer, kWtaWindow, out + slot * kWtaBlock,
                             (uint64_t{a.rank} * kWtaSlots + slot) * kWtaBlock, kWtaBlock);
        slots[w] = slot;
      }
      courier::encode_atomic(s.peer, kCounterWindow, kWtaBase + uint64_t{a.rank} * 8,
                             courier::AtomicOp::add_u64, kWtaWritesPerAtomic,
                             &batch[kWtaWritesPerAtomic]);
      uint64_t first = 0;
      s.status = courier::device::push_batch(s.channel, batch, kWtaWritesPerAtomic + 1, &first);
      if (s.status != PushStatus::ok) return;
      for (uint32_t w = 0; w < kWtaWritesPerAtomic; ++w) slot_ticket[slots[w]] = first + w + 1;
    }
    s.status = courier::device::drain(s.channel);
  }

  Outcome write_then_atomic_case() {
    const std::string strategy = ctx_.atomic_stats().add_u64;
    if (strategy == "none") {
      return {Verdict::skip, "ADD_U64 strategy is 'none' on " + ctx_.nic_backend()};
    }
    Checks checks;
    const auto* wta = static_cast<const std::byte*>(wta_.data());
    std::atomic<bool> stop{false};
    std::atomic<uint64_t> violations{0}, passes{0};
    std::string first_violation;
    // Counter k from sender s: blocks [0, k) of s are complete here; the
    // last kWtaSlots of them still sit in their slots (a newer stamp is
    // fine, an older or torn one is a violation).
    auto check_pass = [&](bool final_pass) {
      for (uint32_t s = 0; s < world_; ++s) {
        if (s == me_) continue;
        const uint64_t k = load<uint64_t>(counters() + kWtaBase + s * 8);
        for (uint64_t b = k > kWtaSlots ? k - kWtaSlots : 0; b < k; ++b) {
          const std::byte* p = wta + (uint64_t{s} * kWtaSlots + b % kWtaSlots) * kWtaBlock;
          const uint64_t head =
              std::atomic_ref<const uint64_t>(*reinterpret_cast<const uint64_t*>(p))
                  .load(std::memory_order_relaxed);
          const uint64_t tail =
              std::atomic_ref<const uint64_t>(*reinterpret_cast<const uint64_t*>(p + kWtaBlock - 8))
                  .load(std::memory_order_relaxed);
          if (head < b + 1 || tail < b + 1 || (final_pass && head != tail)) {
            if (violations.fetch_add(1) == 0) {
              first_violation =
                  fmt::format("counter from rank {} read {}, block {} holds stamps {} / {}", s, k,
                              b, head, tail);
            }
          }
        }
      }
      passes.fetch_add(1, std::memory_order_relaxed);
    };
    WtaArgs args{me_, world_, static_cast<std::byte*>(wta_.data()), {}};
    for (uint32_t i = 1; i < world_; ++i) {
      WtaStream s;
      s.peer = (me_ + i) % world_;
      s.channel = ctx_.channel((i - 1) % nch_);
      args.streams.push_back(s);
    }
    std::thread checker([&] {
      while (!stop.load(std::memory_order_relaxed)) {
        check_pass(false);
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      }
    });
    ctx_.barrier();
    ctx_.launch_host_kernel(1, world_ - 1, wta_kernel, &args);
    for (const WtaStream& s : args.streams) {
      checks.expect(s.status == PushStatus::ok,
                    fmt::format("stream to rank {}: {}", s.peer, courier::to_string(s.status)));
    }
    ctx_.barrier();  // every rank's DRAINs returned: all atomics are confirmed
    stop = true;
    checker.join();
    check_pass(true);
    const uint64_t expected = uint64_t{kWtaGroups} * kWtaWritesPerAtomic;
    for (uint32_t s = 0; s < world_; ++s) {
      if (s == me_) continue;
      const uint64_t k = load<uint64_t>(counters() + kWtaBase + s * 8);
      checks.expect(k == expected,
                    fmt::format("counter from rank {} ends at {}, expected {}", s, k, expected));
    }
    checks.expect(violations.load() == 0,
                  fmt::format("{} violations, first: {}", violations.load(), first_violation));
    ctx_.barrier();
    return checks.outcome(
        fmt::format("strategy {}: {} commands per peer, {} checker passes, 0 violations", strategy,
                    kWtaGroups * (kWtaWritesPerAtomic + 1), passes.load()));
  }

  // Rounds of new patterns over the same bytes: a DRAIN that returned
  // before its writes were visible leaves the previous round's bytes.
  Outcome drain_case() {
    Checks checks;
    constexpr uint64_t kRounds = 10;
    uint64_t bytes = 0;
    for (uint64_t round = 0; round < kRounds && checks.ok(); ++round) {
      const uint64_t seed = 100 + round;
      send_slices(checks, seed);
      drain_all(checks);
      ctx_.barrier();
      bytes += verify_slices(checks, seed, false);
      ctx_.barrier();  // peers checked before the next round overwrites
    }
    return checks.outcome(fmt::format(
        "{} rounds: after DRAIN every byte was there ({} bytes checked)", kRounds, bytes));
  }

  Outcome barrier_world_case() {
    Checks checks;
    constexpr uint32_t kIters = 100;
    // Per barrier: when this rank entered and left it (steady_clock, one host).
    std::vector<int64_t> times(2 * kIters);
    const courier::DeviceChannel ch = ctx_.channel(0);
    ctx_.barrier();
    for (uint32_t i = 0; i < kIters; ++i) {
      times[2 * i] = Clock::now().time_since_epoch().count();
      const PushStatus s = courier::device::barrier(ch, 1000 + i, courier::kBarrierWorld);
      times[2 * i + 1] = Clock::now().time_since_epoch().count();
      checks.expect(s == PushStatus::ok, fmt::format("barrier {}: {}", i, courier::to_string(s)));
      if (s != PushStatus::ok) break;
    }
    const std::vector<std::byte> all =
        ctx_.bootstrap().allgather(std::as_bytes(std::span<const int64_t>(times)));
    checks.expect(all.size() == world_ * times.size() * sizeof(int64_t),
                  "allgather returned a wrong size");
    uint32_t early = 0;
    std::string first;
    if (checks.ok()) {
      for (uint32_t i = 0; i < kIters; ++i) {
        int64_t last_enter = INT64_MIN, first_leave = INT64_MAX;
        uint32_t leaver = 0, enterer = 0;
        for (uint32_t r = 0; r < world_; ++r) {
          int64_t t[2];
          std::memcpy(t, all.data() + (r * times.size() + 2 * i) * sizeof(int64_t), sizeof(t));
          if (t[0] > last_enter) last_enter = t[0], enterer = r;
          if (t[1] < first_leave) first_leave = t[1], leaver = r;
        }
        if (first_leave < last_enter && early++ == 0) {
          first = fmt::format("barrier {}: rank {} left {} ns before rank {} entered", i, leaver,
                              last_enter - first_leave, enterer);
        }
      }
      checks.expect(early == 0, fmt::format("{} barriers left early, first: {}", early, first));
    }
    return checks.outcome(
        fmt::format("{} world barriers, nobody left before the last rank entered", kIters));
  }

  Outcome barrier_rail_case() {
    Checks checks;
    constexpr uint32_t kIters = 20;
    const courier::DeviceChannel ch = ctx_.channel(1 % nch_);
    ctx_.barrier();
    for (uint32_t i = 0; i < kIters && checks.ok(); ++i) {
      const PushStatus s = courier::device::barrier(ch, 5000 + i, courier::kBarrierRail);
      checks.expect(s == PushStatus::ok,
                    fmt::format("rail barrier {}: {}", i, courier::to_string(s)));
    }
    ctx_.barrier();
    return checks.outcome(fmt::format("{} rail barriers completed", kIters));
  }

  // Each case on its own channel: channel errors are sticky.
  void error_cases() {
    const uint32_t peer = (me_ + 1) % world_;
    struct Case {
      const char* name;
      const char* what;
      TransferCmd cmd;
    } cases[] = {
        {"error-rank", "a WRITE to a rank outside the job",
         write_cmd(world_, kDataWindow, 0, 0, 8)},
        {"error-window", "a WRITE to an unregistered window", write_cmd(peer, kWindows, 0, 0, 8)},
        {"error-range", "a WRITE past the end of the remote window",
         write_cmd(peer, kDataWindow, 0, data_.size() - 4, 8)},
    };
    ctx_.barrier();
    for (uint32_t k = 0; k < std::size(cases); ++k) {
      const Case& x = cases[k];
      // The last channels, which earlier cases used least.
      const uint32_t c = (nch_ - 1 - k % nch_);
      run_case(x.name, [&]() -> Outcome {
        const uint64_t before = ctx_.channel_stats(c).errors;
        if (before != 0) {
          return {Verdict::skip, fmt::format("no fresh channel left (channel {} already failed; "
                                             "COURIER_CHANNELS={} < 4)",
                                             c, nch_)};
        }
        Checks checks;
        const courier::DeviceChannel ch = ctx_.channel(c);
        const PushStatus pushed = courier::device::push(ch, x.cmd, nullptr);
        checks.expect(pushed == PushStatus::ok,
                      fmt::format("push: {}", courier::to_string(pushed)));
        const PushStatus s = courier::device::drain(ch);
        const courier::ChannelStats stats = ctx_.channel_stats(c);
        checks.expect(s == PushStatus::channel_failed,
                      fmt::format("{}: DRAIN returned '{}'", x.what, courier::to_string(s)));
        checks.expect(stats.errors == 1,
                      fmt::format("{}: {} errors recorded", x.what, stats.errors));
        return checks.outcome(
            fmt::format("{} failed channel {}: {}", x.what, c, stats.first_error));
      });
    }
  }

  courier::Context ctx_;
  uint32_t me_, world_, nch_ = 0;
  courier::DeviceBuffer data_, counters_, wta_;
  int passed_ = 0, failed_ = 0, skipped_ = 0;
};

}  // namespace

int main() {
  try {
    Suite suite;
    return suite.run();
  } catch (const std::exception& e) {
    fmt::print(stderr, "courier-semantics-check: {}\n", e.what());
    return 1;
  }
}
