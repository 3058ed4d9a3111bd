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
// "semantics: P passed, F failed, S skipped (<mode>), NIC backend <name>,
// ADD_U64 <strategy>, ADD_U32 <strategy>"; it exits 1 if a case failed.
//
// Two modes, same cases and checks (DeviceAccess below): host-kernel mode
// (GPU backends with host kernels, i.e. gpu-host) pushes from host threads
// with gpu/fifo_push.hpp and touches the windows directly; device-command
// mode (any other GPU backend, or --device-commands) hands each "GPU
// thread's" commands to a device thread (Context::run_device_commands) and
// reads and writes the windows with Context::copy.
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "core/bootstrap/bootstrap.hpp"
#include "courier/context.hpp"
#include "gpu/fifo_push.hpp"
#include "tests/support/check_harness.hpp"

namespace {

using courier::PushStatus;
using courier::TransferCmd;
using courier::test::CaseLog;
using courier::test::Checks;
using courier::test::Outcome;
using courier::test::Verdict;
using Clock = std::chrono::steady_clock;

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
constexpr uint32_t kWtaGroups = 300;                               // per peer: 1500 commands
constexpr uint32_t kWtaBlocks = kWtaGroups * kWtaWritesPerAtomic;  // per peer

// Block `stamp - 1`'s contents: the stamp at both ends, its low byte between.
void stamp_block(std::byte* p, uint64_t stamp) {
  std::memset(p + 8, static_cast<int>(stamp & 0xff), kWtaBlock - 16);
  std::memcpy(p, &stamp, 8);
  std::memcpy(p + kWtaBlock - 8, &stamp, 8);
}

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

TransferCmd drain_cmd() {
  TransferCmd cmd;
  courier::encode_drain(&cmd);
  return cmd;
}

// How the host acts as the GPU: the "GPU threads" pushing into channels,
// and the registered windows.
// - Host-kernel mode: pushes go into the ring at once, from the calling
//   thread, with gpu/fifo_push.hpp; windows are host memory, touched directly.
// - Device-command mode: pushes are collected per channel and pushed by
//   device threads (Context::run_device_commands, one per list, all lists
//   at once) when the case drains; windows are read and written with
//   Context::copy.
class DeviceAccess {
 public:
  DeviceAccess() = default;
  DeviceAccess(const courier::Context& ctx, bool device_commands)
      : ctx_(&ctx), device_(device_commands), lists_(ctx.num_channels()) {
    for (uint32_t c = 0; c < lists_.size(); ++c) lists_[c].channel = c;
  }
  bool device_commands() const { return device_; }

  // ---- windows ----
  void put(const courier::DeviceBuffer& b, uint64_t offset, const void* src, size_t n) const {
    void* dst = at(b, offset, n);
    if (device_) {
      ctx_->copy(dst, src, n);
    } else {
      std::memcpy(dst, src, n);
    }
  }
  std::vector<std::byte> get(const courier::DeviceBuffer& b, uint64_t offset, size_t n) const {
    std::vector<std::byte> out(n);
    const void* src = at(b, offset, n);
    if (device_) {
      ctx_->copy(out.data(), src, n);
    } else {
      std::memcpy(out.data(), src, n);
    }
    return out;
  }
  // One word, read before anything read after it (a counter, then the data
  // it vouches for); safe while the NIC writes the window.
  template <typename T>
  T load(const courier::DeviceBuffer& b, uint64_t offset) const {
    const void* p = at(b, offset, sizeof(T));
    if (!device_) {
      return std::atomic_ref<const T>(*static_cast<const T*>(p)).load(std::memory_order_acquire);
    }
    T value;
    ctx_->copy(&value, p, sizeof value);  // synchronous: done before the next copy starts
    std::atomic_thread_fence(std::memory_order_acquire);
    return value;
  }

  // ---- channels ----
  // Pushes cmd on channel c: at once (its status), or appended to c's list
  // (ok; the list's status comes with the DRAIN).
  PushStatus push(uint32_t c, const TransferCmd& cmd) {
    if (!device_) return courier::device::push(ctx_->channel(c), cmd, nullptr);
    lists_.at(c).commands.push_back(cmd);
    return PushStatus::ok;
  }
  // DRAIN on channel c, after what was pushed on it.
  PushStatus drain(uint32_t c) {
    if (!device_) return courier::device::drain(ctx_->channel(c));
    std::vector<courier::DeviceCommandList> one(1);
    one[0].channel = c;
    one[0].commands = std::move(lists_.at(c).commands);
    lists_[c].commands.clear();
    one[0].commands.push_back(drain_cmd());
    ctx_->run_device_commands(one);
    return one[0].status;
  }
  // DRAIN on every channel; result[c] is channel c's status.
  std::vector<PushStatus> drain_all() {
    std::vector<PushStatus> status(lists_.size());
    if (!device_) {
      for (uint32_t c = 0; c < status.size(); ++c) {
        status[c] = courier::device::drain(ctx_->channel(c));
      }
      return status;
    }
    std::vector<courier::DeviceCommandList> lists;
    lists.swap(lists_);
    lists_.resize(lists.size());
    for (uint32_t c = 0; c < lists.size(); ++c) {
      lists_[c].channel = c;
      lists[c].commands.push_back(drain_cmd());
    }
    ctx_->run_device_commands(lists);
    for (uint32_t c = 0; c < lists.size(); ++c) status[c] = lists[c].status;
    return status;
  }
  // BARRIER on channel c: returns once every rank of the scope reached it.
  PushStatus barrier(uint32_t c, uint64_t epoch, uint8_t scope) {
    if (!device_) return courier::device::barrier(ctx_->channel(c), epoch, scope);
    std::vector<courier::DeviceCommandList> one(1);
    one[0].channel = c;
    one[0].commands.resize(1);
    if (courier::encode_barrier(epoch, &one[0].commands[0], scope) != courier::CmdStatus::ok) {
      return PushStatus::invalid_argument;
    }
    ctx_->run_device_commands(one);
    return one[0].status;
  }
  // Forgets commands a failed case left undrained.
  void reset() {
    for (courier::DeviceCommandList& l : lists_) l.commands.clear();
  }

 private:
  static std::byte* at(const courier::DeviceBuffer& b, uint64_t offset, size_t n) {
    if (offset > b.size() || n > b.size() - offset) {
      throw courier::Error(
          fmt::format("window access [{}, +{}) outside {} bytes", offset, n, b.size()));
    }
    return static_cast<std::byte*>(b.data()) + offset;
  }

  const courier::Context* ctx_ = nullptr;
  bool device_ = false;
  std::vector<courier::DeviceCommandList> lists_;  // device mode: [channel]
};

class Suite {
 public:
  explicit Suite(bool force_device_commands)
      : me_(static_cast<uint32_t>(ctx_.rank())), world_(static_cast<uint32_t>(ctx_.world_size())) {
    if (world_ < 2 || world_ > kMaxRanks) {
      throw courier::Error(fmt::format("needs 2..{} ranks, got {}", kMaxRanks, world_));
    }
    nch_ = ctx_.num_channels();
    bool device = force_device_commands;
    std::string why = "--device-commands";
    if (!device) {
      // Host-kernel mode needs host kernels (which also means host memory):
      // ask the backend with a no-op launch rather than by its name.
      try {
        ctx_.launch_host_kernel(
            1, 1, [](const courier_host_thread_v1*, void*) {}, nullptr);
        why = "the GPU backend runs host kernels";
      } catch (const courier::Error& e) {
        device = true;
        why = e.what();
      }
    }
    acc_ = DeviceAccess(ctx_, device);
    data_ = ctx_.alloc(2 * world_ * kArea);
    counters_ = ctx_.alloc(kCountersBytes);
    wta_ = ctx_.alloc(2ull * world_ * kWtaSlots * kWtaBlock);
    for (courier::DeviceBuffer* b : {&data_, &counters_, &wta_}) {
      const std::vector<std::byte> zeros(b->size());
      acc_.put(*b, 0, zeros.data(), zeros.size());
    }
    if (ctx_.register_window(data_.data(), data_.size()) != kDataWindow ||
        ctx_.register_window(counters_.data(), counters_.size()) != kCounterWindow ||
        ctx_.register_window(wta_.data(), wta_.size()) != kWtaWindow) {
      throw courier::Error("unexpected window ids");
    }
    fmt::print(
        "semantics: rank {} of {}, GPU backend {}, NIC backend {}, {} channels, ADD_U64 {}, "
        "ADD_U32 {}, {} mode ({})\n",
        me_, world_, ctx_.gpu_backend(), ctx_.nic_backend(), nch_, ctx_.atomic_stats().add_u64,
        ctx_.atomic_stats().add_u32, mode(), why);
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
    // What ran, after the counts, so that a test can check both from one
    // line (e.g. that nic-efa really carried the run, with imm atomics).
    fmt::print(
        "semantics: {} passed, {} failed, {} skipped ({} mode), NIC backend {}, ADD_U64 {}, "
        "ADD_U32 {}\n",
        log_.passed(), log_.failed(), log_.skipped(), mode(), ctx_.nic_backend(),
        ctx_.atomic_stats().add_u64, ctx_.atomic_stats().add_u32);
    return log_.failed() == 0 ? 0 : 1;
  }

 private:
  void run_case(const std::string& name, const std::function<Outcome()>& body) {
    acc_.reset();
    log_.record(name, courier::test::run_catching(body));
  }

  const char* mode() const { return acc_.device_commands() ? "device-commands" : "host-kernels"; }
  uint64_t inbound(uint32_t sender) const { return uint64_t{sender} * kArea; }
  uint64_t outbound(uint32_t receiver) const { return uint64_t{world_ + receiver} * kArea; }
  // Window 2: the source slots of the blocks for `receiver`.
  uint64_t wta_outbound(uint32_t receiver) const {
    return (uint64_t{world_} + receiver) * kWtaSlots * kWtaBlock;
  }

  // Pushes cmd on channel c, recording a failed push.
  void push(Checks& checks, uint32_t c, const TransferCmd& cmd) {
    const PushStatus s = acc_.push(c, cmd);
    checks.expect(s == PushStatus::ok,
                  fmt::format("push on channel {}: {}", c, courier::to_string(s)));
  }
  // DRAINs every channel; each must report success (device-command mode:
  // the status of the channel's whole list, its DRAIN last).
  void drain_all(Checks& checks) {
    const std::vector<PushStatus> status = acc_.drain_all();
    for (uint32_t c = 0; c < nch_; ++c) {
      checks.expect(status[c] == PushStatus::ok,
                    fmt::format("DRAIN on channel {}: {} ({})", c, courier::to_string(status[c]),
                                ctx_.channel_stats(c).first_error));
    }
  }

  // Sends every slice of the pattern `seed` to every peer, over all channels.
  void send_slices(Checks& checks, uint64_t seed) {
    const std::vector<Slice> ss = slices();
    for (uint32_t i = 1; i < world_; ++i) {
      const uint32_t peer = (me_ + i) % world_;
      for (const Slice& s : ss) {
        std::vector<std::byte> bytes(s.length);
        for (uint64_t b = 0; b < s.length; ++b) {
          bytes[b] = std::byte{pattern(seed, me_, peer, s.offset + b)};
        }
        acc_.put(data_, outbound(peer) + s.offset, bytes.data(), bytes.size());
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
      const std::vector<std::byte> area = acc_.get(data_, inbound(s), kImmBase);
      if (s != me_) {
        for (const Slice& sl : ss) {
          for (uint64_t b = sl.offset; b < sl.offset + sl.length; ++b) {
            in_slice[b] = true;
            if (area[b] != std::byte{pattern(seed, s, me_, b)} && bad++ == 0) first = b;
            ++checked;
          }
        }
      }
      if (gaps) {
        for (uint64_t b = 0; b < kImmBase; ++b) {
          if (!in_slice[b] && area[b] != std::byte{0} && bad++ == 0) first = b;
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
        std::byte bytes[kImmLength];
        for (uint64_t b = 0; b < kImmLength; ++b) {
          bytes[b] = std::byte{pattern(2, me_, peer, off + b)};
        }
        acc_.put(data_, outbound(peer) + off, bytes, kImmLength);
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
      const std::vector<std::byte> area =
          acc_.get(data_, inbound(s) + kImmBase, uint64_t{kImmWrites} * 16);
      for (uint32_t j = 0; j < kImmWrites; ++j) {
        const uint64_t off = kImmBase + j * 16;
        for (uint64_t b = 0; b < kImmLength; ++b) {
          if (area[off - kImmBase + b] != std::byte{pattern(2, s, me_, off + b)}) ++bad;
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
      const uint64_t block = kExactBase + s * kCounterBlock;
      if (wide) {
        const auto w0 = acc_.load<uint64_t>(counters_, block);
        const auto w8 = acc_.load<uint64_t>(counters_, block + 8);
        checks.expect(w0 == 2, fmt::format("from rank {}: 0 + 5 - 3 gave {}", s, w0));
        checks.expect(w8 == ~uint64_t{0} - 2,
                      fmt::format("from rank {}: 0 - 3 gave {:#x} (sign extension)", s, w8));
        checks.expect(acc_.load<uint64_t>(counters_, block + 16) == 0,
                      fmt::format("from rank {}: a neighbour changed", s));
      } else {
        const uint32_t want[] = {2, 0, 0xFFFFFFFDu, 0, 0, 2};  // at 32, 36, 40, 44, 48, 52
        for (uint32_t k = 0; k < std::size(want); ++k) {
          const auto got = acc_.load<uint32_t>(counters_, block + 32 + 4 * k);
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
      const auto got = acc_.load<uint64_t>(counters_, kShared64);
      checks.expect(got == sum, fmt::format("shared counter holds {}, expected {}", got, sum));
    } else {
      const auto want = static_cast<uint32_t>(-static_cast<int64_t>(kSharedAdds * (world_ - 1)));
      const auto got = acc_.load<uint32_t>(counters_, kShared32);
      checks.expect(got == want,
                    fmt::format("shared counter holds {:#x}, expected {:#x}", got, want));
      checks.expect(acc_.load<uint32_t>(counters_, kShared32 + 4) == 0,
                    "the word after the shared 32-bit counter changed (carry)");
    }
    ctx_.barrier();
    return checks.outcome(
        fmt::format("strategy {}: exact values from {} peers, {} concurrent adds summed", strategy,
                    world_ - 1, kSharedAdds * (world_ - 1)));
  }

  struct WtaStream {
    uint32_t peer = 0;
    uint32_t channel_index = 0;
    courier::DeviceChannel channel;
    uint64_t out = 0;  // window 2: the sources for `peer`
    PushStatus status = PushStatus::ok;
  };
  struct WtaArgs {
    uint32_t rank;
    std::byte* base;  // window 2
    std::vector<WtaStream> streams;
  };

  // The commands of group g to s.peer: block WRITEs from `source(block)`
  // into this rank's slots at the peer, then an ADD_U64 of the group's size
  // to this rank's counter there.
  template <typename Source>
  static void wta_group(uint32_t rank, const WtaStream& s, uint32_t g, Source source,
                        TransferCmd* batch) {
    for (uint32_t w = 0; w < kWtaWritesPerAtomic; ++w) {
      const uint64_t block = uint64_t{g} * kWtaWritesPerAtomic + w;
      batch[w] = write_cmd(s.peer, kWtaWindow, source(block),
                           (uint64_t{rank} * kWtaSlots + block % kWtaSlots) * kWtaBlock, kWtaBlock);
    }
    courier::encode_atomic(s.peer, kCounterWindow, kWtaBase + uint64_t{rank} * 8,
                           courier::AtomicOp::add_u64, kWtaWritesPerAtomic,
                           &batch[kWtaWritesPerAtomic]);
  }

  // Host-kernel mode: one "GPU thread" per peer, stamping each block into
  // one of kWtaSlots sources (refilled once its previous WRITE completed)
  // and pushing every group as one batch.
  static void wta_kernel(const courier_host_thread_v1* self, void* raw) {
    auto& a = *static_cast<WtaArgs*>(raw);
    WtaStream& s = a.streams[self->thread_idx];
    uint64_t slot_ticket[kWtaSlots] = {};  // ticket + 1 of the slot's last WRITE
    auto source = [&](uint64_t block) { return s.out + block % kWtaSlots * kWtaBlock; };
    for (uint32_t g = 0; g < kWtaGroups; ++g) {
      for (uint32_t w = 0; w < kWtaWritesPerAtomic; ++w) {
        const uint64_t block = uint64_t{g} * kWtaWritesPerAtomic + w;
        const auto slot = static_cast<uint32_t>(block % kWtaSlots);
        // A source slot is refilled only after its previous WRITE completed.
        if (slot_ticket[slot] != 0) {
          s.status = courier::device::wait_completed(s.channel, slot_ticket[slot]);
          if (s.status != PushStatus::ok) return;
        }
        stamp_block(a.base + source(block), block + 1);
      }
      TransferCmd batch[kWtaWritesPerAtomic + 1];
      wta_group(a.rank, s, g, source, batch);
      uint64_t first = 0;
      s.status = courier::device::push_batch(s.channel, batch, kWtaWritesPerAtomic + 1, &first);
      if (s.status != PushStatus::ok) return;
      for (uint32_t w = 0; w < kWtaWritesPerAtomic; ++w) {
        slot_ticket[(uint64_t{g} * kWtaWritesPerAtomic + w) % kWtaSlots] = first + w + 1;
      }
    }
    s.status = courier::device::drain(s.channel);
  }

  // Device-command mode: a command list holds no stores and no waits, so
  // the groups go in waves of kWtaSlots blocks. Before each wave the host
  // stamps the sources (ctx.copy); then one device thread per peer pushes
  // the wave's groups on the stream's channel and waits until they
  // completed. As in the kernel, a slot (source, and destination at the
  // peer) is reused only after its previous WRITE completed: WRITEs to the
  // same bytes in flight together are unordered. The last wave ends with a
  // DRAIN.
  void wta_device_streams(std::vector<WtaStream>& streams) {
    constexpr uint32_t kGroupsPerWave = kWtaSlots / kWtaWritesPerAtomic;
    static_assert(kWtaSlots % kWtaWritesPerAtomic == 0 && kWtaGroups % kGroupsPerWave == 0);
    std::vector<std::byte> sources(uint64_t{kWtaSlots} * kWtaBlock);
    for (uint32_t g0 = 0; g0 < kWtaGroups; g0 += kGroupsPerWave) {
      const uint64_t first = uint64_t{g0} * kWtaWritesPerAtomic;
      for (uint64_t block = first; block < first + kWtaSlots; ++block) {
        stamp_block(sources.data() + block % kWtaSlots * kWtaBlock, block + 1);
      }
      std::vector<courier::DeviceCommandList> lists;
      std::vector<WtaStream*> running;  // a failed stream stops, as in the kernel
      for (WtaStream& s : streams) {
        if (s.status != PushStatus::ok) continue;
        acc_.put(wta_, s.out, sources.data(), sources.size());
        courier::DeviceCommandList& l = lists.emplace_back();
        l.channel = s.channel_index;
        auto source = [&](uint64_t block) { return s.out + block % kWtaSlots * kWtaBlock; };
        for (uint32_t g = g0; g < g0 + kGroupsPerWave; ++g) {
          TransferCmd batch[kWtaWritesPerAtomic + 1];
          wta_group(me_, s, g, source, batch);
          l.commands.insert(l.commands.end(), std::begin(batch), std::end(batch));
        }
        if (g0 + kGroupsPerWave == kWtaGroups) l.commands.push_back(drain_cmd());
        running.push_back(&s);
      }
      if (lists.empty()) return;
      ctx_.run_device_commands(lists);
      for (size_t i = 0; i < lists.size(); ++i) running[i]->status = lists[i].status;
    }
  }

  Outcome write_then_atomic_case() {
    const std::string strategy = ctx_.atomic_stats().add_u64;
    if (strategy == "none") {
      return {Verdict::skip, "ADD_U64 strategy is 'none' on " + ctx_.nic_backend()};
    }
    Checks checks;
    std::atomic<bool> stop{false};
    // mid_stream: passes that saw a counter strictly between 0 and its end
    // value, i.e. observed while the senders were pushing.
    std::atomic<uint64_t> violations{0}, passes{0}, mid_stream{0};
    std::string first_violation;
    // Counter k from sender s: blocks [0, k) of s are complete here; the
    // last kWtaSlots of them still sit in their slots (a newer stamp is
    // fine, an older or torn one is a violation). The counter is read
    // first, then the blocks.
    auto check_pass = [&](bool final_pass) {
      bool mid = false;
      for (uint32_t s = 0; s < world_; ++s) {
        if (s == me_) continue;
        const auto k = acc_.load<uint64_t>(counters_, kWtaBase + s * 8);
        mid |= k > 0 && k < kWtaBlocks;
        for (uint64_t b = k > kWtaSlots ? k - kWtaSlots : 0; b < k; ++b) {
          const uint64_t p = (uint64_t{s} * kWtaSlots + b % kWtaSlots) * kWtaBlock;
          const auto head = acc_.load<uint64_t>(wta_, p);
          const auto tail = acc_.load<uint64_t>(wta_, p + kWtaBlock - 8);
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
      if (mid) mid_stream.fetch_add(1, std::memory_order_relaxed);
    };
    WtaArgs args{me_, static_cast<std::byte*>(wta_.data()), {}};
    for (uint32_t i = 1; i < world_; ++i) {
      WtaStream s;
      s.peer = (me_ + i) % world_;
      s.channel_index = (i - 1) % nch_;
      s.channel = ctx_.channel(s.channel_index);
      s.out = wta_outbound(s.peer);
      args.streams.push_back(s);
    }
    std::thread checker([&] {
      while (!stop.load(std::memory_order_relaxed)) {
        check_pass(false);
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      }
    });
    ctx_.barrier();
    if (acc_.device_commands()) {
      wta_device_streams(args.streams);
    } else {
      ctx_.launch_host_kernel(1, world_ - 1, wta_kernel, &args);
    }
    for (const WtaStream& s : args.streams) {
      checks.expect(s.status == PushStatus::ok,
                    fmt::format("stream to rank {}: {}", s.peer, courier::to_string(s.status)));
    }
    ctx_.barrier();  // every rank's DRAINs returned: all atomics are confirmed
    stop = true;
    checker.join();
    check_pass(true);
    const uint64_t expected = kWtaBlocks;
    for (uint32_t s = 0; s < world_; ++s) {
      if (s == me_) continue;
      const auto k = acc_.load<uint64_t>(counters_, kWtaBase + s * 8);
      checks.expect(k == expected,
                    fmt::format("counter from rank {} ends at {}, expected {}", s, k, expected));
    }
    checks.expect(violations.load() == 0,
                  fmt::format("{} violations, first: {}", violations.load(), first_violation));
    ctx_.barrier();
    return checks.outcome(fmt::format(
        "strategy {}: {} commands per peer, {} checker passes ({} mid-stream), 0 "
        "violations",
        strategy, kWtaGroups * (kWtaWritesPerAtomic + 1), passes.load(), mid_stream.load()));
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
    ctx_.barrier();
    for (uint32_t i = 0; i < kIters; ++i) {
      // Device-command mode: the window also holds the device thread's launch.
      times[2 * i] = Clock::now().time_since_epoch().count();
      const PushStatus s = acc_.barrier(0, 1000 + i, courier::kBarrierWorld);
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
    ctx_.barrier();
    for (uint32_t i = 0; i < kIters && checks.ok(); ++i) {
      const PushStatus s = acc_.barrier(1 % nch_, 5000 + i, courier::kBarrierRail);
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
        const courier::ChannelStats before = ctx_.channel_stats(c);
        if (before.errors != 0) {
          return {Verdict::skip, fmt::format("no fresh channel left (channel {} already failed; "
                                             "COURIER_CHANNELS={} < 4)",
                                             c, nch_)};
        }
        Checks checks;
        const PushStatus pushed = acc_.push(c, x.cmd);
        checks.expect(pushed == PushStatus::ok,
                      fmt::format("push: {}", courier::to_string(pushed)));
        const PushStatus s = acc_.drain(c);  // device-command mode: the list [WRITE, DRAIN]
        const courier::ChannelStats stats = ctx_.channel_stats(c);
        if (acc_.device_commands()) {
          // The list's one status stands for both pushes: the proxy took both.
          checks.expect(stats.commands - before.commands == 2,
                        fmt::format("the proxy took {} of the 2 commands (WRITE, DRAIN)",
                                    stats.commands - before.commands));
        }
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
  DeviceAccess acc_;
  courier::DeviceBuffer data_, counters_, wta_;
  CaseLog log_;
};

}  // namespace

int main(int argc, char** argv) {
  bool device_commands = false;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--device-commands") {
      device_commands = true;
    } else {
      fmt::print(stderr,
                 "courier-semantics-check: unknown argument '{}'\n"
                 "usage: courier-run -n N courier-semantics-check [--device-commands]\n"
                 "  --device-commands  push from device threads (Context::run_device_commands)\n"
                 "                     and reach the windows with Context::copy, even on a GPU\n"
                 "                     backend with host kernels\n",
                 arg);
      return 2;
    }
  }
  try {
    Suite suite(device_commands);
    return suite.run();
  } catch (const std::exception& e) {
    fmt::print(stderr, "courier-semantics-check: {}\n", e.what());
    return 1;
  }
}
