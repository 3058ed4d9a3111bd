// Write coalescing in the proxy (COURIER_COALESCE_BYTES, docs/fifo-and-proxy.md):
// adjacent WRITEs of one channel and dequeue batch, to one peer and window,
// without immediate data, contiguous at both ends, go out as one transport
// write up to the limit; every ticket completes with it, an error fails all
// of them, a merged post the transport refuses is split again, and
// write-then-atomic holds under injected reordering and duplicates.
#include <doctest/doctest.h>

#include <array>
#include <atomic>
#include <cstring>
#include <deque>
#include <mutex>
#include <random>
#include <thread>

#include "core/faults/fault_injecting_transport.hpp"
#include "core/proxy/cookie_codec.hpp"
#include "core/proxy/proxy_thread.hpp"
#include "gpu/fifo_push.hpp"
#include "semantic_stack.hpp"
#include "test_ring.hpp"

using namespace courier;
using courier::testing::stack_semantics;
using courier::testing::TestRing;

namespace {

constexpr uint32_t kCaps = COURIER_NIC_CAP_RMA_WRITE | COURIER_NIC_CAP_WRITE_IMM |
                           COURIER_NIC_CAP_ORDERED_WRITES | COURIER_NIC_CAP_IMM_SOURCE;

TransferCmd write_of(uint32_t rank, uint32_t window, uint32_t src, uint32_t dst, uint32_t length,
                     uint32_t flags = 0, uint8_t source = 0) {
  WriteCmdArgs a;
  a.source = source;
  a.dst_rank = rank;
  a.window = window;
  a.src_offset = src;
  a.dst_offset = dst;
  a.length = length;
  a.flags = flags;
  TransferCmd cmd;
  REQUIRE(encode_write(a, &cmd) == CmdStatus::ok);
  return cmd;
}

TransferCmd add_of(uint32_t rank, uint32_t window, uint32_t offset, uint32_t value) {
  TransferCmd cmd;
  REQUIRE(encode_atomic(rank, window, offset, AtomicOp::add_u64, value, &cmd) == CmdStatus::ok);
  return cmd;
}

// Records every post (writes and atomics, in order), refuses what the test
// asks it to, and completes accepted posts on poll() in shuffled order with
// `status`.
class Recorder final : public ProxyTransport {
 public:
  struct Post {
    uint64_t cookie;
    bool atomic;
    WriteRequest write;
  };
  uint32_t caps() const override { return kCaps; }
  uint32_t atomic_ops() const override { return COURIER_NIC_ATOMIC_ADD_U64; }
  uint32_t atomic_native() const override { return COURIER_NIC_ATOMIC_ADD_U64; }
  int post_write(const WriteRequest& write, uint64_t cookie, std::string* error) override {
    std::lock_guard lock(mutex);
    ++attempts;
    if (eagain_once > 0 && write.length == eagain_once) {
      eagain_once = 0;
      return -EAGAIN;
    }
    if (write.dst_offset + write.length > window_bytes) {
      *error = "beyond the window";
      return -EINVAL;
    }
    posts.push_back({cookie, false, write});
    pending.push_back(cookie);
    return COURIER_OK;
  }
  int post_atomic(const AtomicRequest&, uint64_t cookie, std::string*) override {
    std::lock_guard lock(mutex);
    posts.push_back({cookie, true, {}});
    pending.push_back(cookie);
    return COURIER_OK;
  }
  int poll(courier_nic_completion_v1* out, uint32_t max) override {
    std::lock_guard lock(mutex);
    std::shuffle(pending.begin(), pending.end(), rng);
    uint32_t n = 0;
    while (n < max && !pending.empty()) {
      out[n] = {};
      out[n].kind = COURIER_NIC_COMP_TX;
      out[n].cookie = pending.back();
      out[n].status = status;
      pending.pop_back();
      ++n;
    }
    return static_cast<int>(n);
  }
  std::string last_error() const override { return "recorded failure"; }

  std::vector<WriteRequest> writes() const {
    std::vector<WriteRequest> out;
    for (const Post& p : posts) {
      if (!p.atomic) out.push_back(p.write);
    }
    return out;
  }

  std::mutex mutex;
  std::vector<Post> posts;
  std::deque<uint64_t> pending;
  uint64_t attempts = 0;
  uint64_t eagain_once = 0;  // refuse the first write of this length with -EAGAIN
  uint64_t window_bytes = uint64_t{1} << 40;
  int status = COURIER_OK;
  std::mt19937 rng{5};
};

struct Outcome {
  std::vector<WriteRequest> writes;
  uint64_t coalesced = 0;
  uint64_t errors = 0;
  uint64_t completed = 0;
  uint64_t error_word = 0;
  PushStatus drain = PushStatus::ok;
};

// Pushes `cmds` while the proxy is still stopped (so they are taken in one
// dequeue batch when they fit), then runs the proxy until a DRAIN returns.
Outcome run(const std::vector<TransferCmd>& cmds, uint32_t coalesce_bytes, Recorder& transport,
            AtomicStrategyKind atomics = AtomicStrategyKind::none) {
  constexpr uint32_t kDepth = 64;
  TestRing ring(kDepth, kDepth);
  ProxyChannel channel(0, ring.slots.data(), ring.control.get(), kDepth);
  Logger log(LogLevel::error);
  ProxyOptions options;
  options.coalesce_bytes = coalesce_bytes;
  SemanticsOptions semantics;
  semantics.world_size = 4;
  semantics.add_u64 = atomics;
  stack_semantics(options, semantics, log);
  ProxyThread proxy(0, transport, {&channel}, options, log);
  for (const TransferCmd& cmd : cmds)
    REQUIRE(device::push(ring.ch, cmd, nullptr) == PushStatus::ok);
  proxy.start();
  Outcome out;
  out.drain = device::drain(ring.ch);
  proxy.stop();
  out.writes = transport.writes();
  out.coalesced = channel.coalesced.load();
  out.errors = channel.errors.load();
  out.completed = ring.control->completed;
  out.error_word = ring.control->error;
  return out;
}

}  // namespace

TEST_CASE("a contiguous run of writes goes out as one write; every ticket completes") {
  std::vector<TransferCmd> cmds;
  for (uint32_t i = 0; i < 8; ++i) cmds.push_back(write_of(1, 2, 4096 * i, 1000 + 4096 * i, 4096));
  Recorder t;
  Outcome o = run(cmds, 1 << 20, t);
  CHECK(o.drain == PushStatus::ok);
  REQUIRE(o.writes.size() == 1);
  CHECK(o.writes[0].peer == 1);
  CHECK(o.writes[0].src_window == 2);
  CHECK(o.writes[0].dst_window == 2);
  CHECK(o.writes[0].src_offset == 0);
  CHECK(o.writes[0].dst_offset == 1000);
  CHECK(o.writes[0].length == 8 * 4096);
  CHECK_FALSE(o.writes[0].with_imm);
  CHECK(o.coalesced == 7);
  CHECK(o.completed == 9);  // 8 writes + the DRAIN
  CHECK(o.errors == 0);
}

TEST_CASE("writes are not merged across peers, windows, gaps, immediate data or other ops") {
  struct Case {
    const char* what;
    TransferCmd second;
  };
  const TransferCmd first = write_of(1, 0, 0, 0, 256);
  const std::vector<Case> cases = {
      {"another peer", write_of(2, 0, 256, 256, 256)},
      {"another window", write_of(1, 1, 256, 256, 256)},
      {"a gap in the source", write_of(1, 0, 512, 256, 256)},
      {"a gap in the destination", write_of(1, 0, 256, 512, 256)},
      {"overlapping source", write_of(1, 0, 128, 256, 256)},
      {"immediate data", write_of(1, 0, 256, 256, 256, kCmdFlagImm)},
      {"a source registration after the window", write_of(1, 0, 256, 256, 256, 0, 1)},
  };
  for (const Case& c : cases) {
    CAPTURE(c.what);
    Recorder t;
    Outcome o = run({first, c.second}, 1 << 20, t);
    CHECK(o.drain == PushStatus::ok);
    CHECK(o.writes.size() == 2);
    CHECK(o.coalesced == 0);
    CHECK(o.completed == 3);
  }
  SUBCASE("a write with immediate data is not merged with the one after it") {
    Recorder t;
    Outcome o =
        run({write_of(1, 0, 0, 0, 256, kCmdFlagImm), write_of(1, 0, 256, 256, 256)}, 1 << 20, t);
    CHECK(o.writes.size() == 2);
    CHECK(o.coalesced == 0);
  }
  SUBCASE("writes reading one source registration merge; two sources do not") {
    Recorder t;
    Outcome o = run({write_of(1, 0, 0, 0, 256, 0, 2), write_of(1, 0, 256, 256, 256, 0, 2),
                     write_of(1, 0, 512, 512, 256, 0, 3)},
                    1 << 20, t);
    REQUIRE(o.writes.size() == 2);
    CHECK(o.writes[0].src_window == kFirstSourceWindow + 1);
    CHECK(o.writes[0].length == 512);
    CHECK(o.writes[1].src_window == kFirstSourceWindow + 2);
    CHECK(o.coalesced == 1);
  }
  SUBCASE("a DRAIN between two contiguous writes separates them") {
    TransferCmd drain;
    REQUIRE(encode_drain(&drain) == CmdStatus::ok);
    Recorder t;
    Outcome o = run({first, drain, write_of(1, 0, 256, 256, 256)}, 1 << 20, t);
    CHECK(o.writes.size() == 2);
    CHECK(o.coalesced == 0);
    CHECK(o.completed == 4);
  }
  SUBCASE("an ATOMIC between two contiguous writes separates them, in order") {
    Recorder t;
    Outcome o = run({first, add_of(1, 3, 0, 1), write_of(1, 0, 256, 256, 256)}, 1 << 20, t,
                    AtomicStrategyKind::hw);
    CHECK(o.drain == PushStatus::ok);
    REQUIRE(t.posts.size() == 3);
    CHECK_FALSE(t.posts[0].atomic);
    CHECK(t.posts[1].atomic);
    CHECK_FALSE(t.posts[2].atomic);
    CHECK(o.coalesced == 0);
  }
}

TEST_CASE("COURIER_COALESCE_BYTES bounds a merged write; 0 turns merging off") {
  std::vector<TransferCmd> cmds;
  for (uint32_t i = 0; i < 10; ++i) cmds.push_back(write_of(1, 0, 4096 * i, 4096 * i, 4096));
  SUBCASE("16 KiB") {
    Recorder t;
    Outcome o = run(cmds, 16384, t);
    REQUIRE(o.writes.size() == 3);
    CHECK(o.writes[0].length == 16384);
    CHECK(o.writes[1].length == 16384);
    CHECK(o.writes[1].src_offset == 16384);
    CHECK(o.writes[2].length == 8192);
    CHECK(o.writes[2].dst_offset == 32768);
    CHECK(o.coalesced == 7);
    CHECK(o.completed == 11);
  }
  SUBCASE("not even two fit") {
    Recorder t;
    Outcome o = run(cmds, 8191, t);
    CHECK(o.writes.size() == 10);
    CHECK(o.coalesced == 0);
  }
  SUBCASE("off") {
    Recorder t;
    Outcome o = run(cmds, 0, t);
    CHECK(o.writes.size() == 10);
    CHECK(o.coalesced == 0);
    CHECK(o.completed == 11);
  }
  SUBCASE("never beyond TransferCmd's 24-bit length") {
    const uint32_t big = 9'000'000;
    Recorder t;
    Outcome o =
        run({write_of(1, 0, 0, 0, big), write_of(1, 0, big, big, big)}, TransferCmd::kMaxLength, t);
    CHECK(o.writes.size() == 2);
    CHECK(o.coalesced == 0);
  }
}

TEST_CASE("a merged write that completes with an error fails every ticket it carries") {
  std::vector<TransferCmd> cmds;
  for (uint32_t i = 0; i < 4; ++i) cmds.push_back(write_of(1, 0, 64 * i, 64 * i, 64));
  Recorder t;
  t.status = -EIO;
  Outcome o = run(cmds, 1 << 20, t);
  CHECK(o.drain == PushStatus::channel_failed);
  CHECK(o.writes.size() == 1);
  CHECK(o.errors == 4);
  CHECK(o.completed == 5);
  CHECK((o.error_word & 0xff) == static_cast<uint64_t>(ChannelErrorCode::completion_failed));
  CHECK((o.error_word >> 8) == 1);  // ticket 0, the first of the group
}

TEST_CASE("a merged write the transport refuses is posted command by command") {
  // Beyond the window: the merged write is refused; its members are posted
  // one by one and only the one really outside the window fails.
  std::vector<TransferCmd> cmds;
  for (uint32_t i = 0; i < 4; ++i) cmds.push_back(write_of(1, 0, 4096 * i, 4096 * i, 4096));
  Recorder t;
  t.window_bytes = 3 * 4096;
  Outcome o = run(cmds, 1 << 20, t);
  CHECK(o.drain == PushStatus::channel_failed);
  REQUIRE(o.writes.size() == 3);
  for (uint32_t i = 0; i < 3; ++i) {
    CHECK(o.writes[i].dst_offset == 4096 * i);
    CHECK(o.writes[i].length == 4096);
  }
  CHECK(o.errors == 1);
  CHECK(o.coalesced == 0);
  CHECK(o.completed == 5);
  CHECK((o.error_word & 0xff) == static_cast<uint64_t>(ChannelErrorCode::post_failed));
  CHECK((o.error_word >> 8) == 4);  // ticket 3
}

TEST_CASE("a merged write refused with -EAGAIN is retried as one") {
  std::vector<TransferCmd> cmds;
  for (uint32_t i = 0; i < 4; ++i) cmds.push_back(write_of(1, 0, 512 * i, 512 * i, 512));
  Recorder t;
  t.eagain_once = 2048;
  Outcome o = run(cmds, 1 << 20, t);
  CHECK(o.drain == PushStatus::ok);
  REQUIRE(o.writes.size() == 1);
  CHECK(o.writes[0].length == 2048);
  CHECK(t.attempts == 2);
  CHECK(o.coalesced == 3);
  CHECK(o.completed == 5);
}

TEST_CASE("concurrent channels: merged writes cover each channel's stream in order") {
  constexpr uint32_t kChannels = 3, kPerChannel = 4000, kLength = 100;
  Recorder t;
  Logger log(LogLevel::error);
  std::vector<std::unique_ptr<TestRing>> rings;
  std::vector<std::unique_ptr<ProxyChannel>> channels;
  std::vector<ProxyChannel*> mine;
  for (uint32_t c = 0; c < kChannels; ++c) {
    rings.push_back(std::make_unique<TestRing>(256, 128));
    rings.back()->ch.channel_id = c;
    channels.push_back(std::make_unique<ProxyChannel>(c, rings.back()->slots.data(),
                                                      rings.back()->control.get(), 256));
    mine.push_back(channels.back().get());
  }
  ProxyOptions options;
  options.coalesce_bytes = 8 * kLength;
  options.world_size = 2;  // the proxy alone: the transport reads the channel from the cookies
  options.poll_batch = 4;
  ProxyThread proxy(0, t, mine, options, log);
  proxy.start();
  std::vector<std::thread> producers;
  for (uint32_t c = 0; c < kChannels; ++c) {
    producers.emplace_back([&, c] {
      // Every channel writes the same contiguous stream: nothing may merge
      // across channels, and within one every byte goes out once, in order.
      for (uint32_t i = 0; i < kPerChannel; i += 4) {
        TransferCmd batch[4];
        for (uint32_t k = 0; k < 4; ++k) {
          batch[k] = write_of(1, 0, (i + k) * kLength, (i + k) * kLength, kLength);
        }
        CHECK(device::push_batch(rings[c]->ch, batch, 4, nullptr) == PushStatus::ok);
      }
      CHECK(device::drain(rings[c]->ch) == PushStatus::ok);
    });
  }
  for (auto& p : producers) p.join();
  proxy.stop();
  std::vector<uint64_t> next(kChannels, 0);
  uint64_t coalesced = 0;
  bool in_order = true;
  for (const Recorder::Post& p : t.posts) {
    const auto c = cookie::channel_slot(p.cookie);
    REQUIRE(c < kChannels);
    if (p.write.src_offset != next[c] || p.write.dst_offset != next[c] ||
        p.write.length > 8 * kLength) {
      in_order = false;
    }
    next[c] += p.write.length;
  }
  CHECK(in_order);
  for (uint32_t c = 0; c < kChannels; ++c) {
    CHECK(next[c] == uint64_t{kPerChannel} * kLength);
    CHECK(rings[c]->control->completed == kPerChannel + 1);
    CHECK(rings[c]->control->error == 0);
    coalesced += channels[c]->coalesced.load();
  }
  CHECK(coalesced + t.posts.size() == kChannels * kPerChannel);
}

namespace {

constexpr uint32_t kBlock = 256;
constexpr uint32_t kBlocks = 512;
constexpr uint32_t kRun = 4;  // contiguous writes per atomic
constexpr uint32_t kCounter = 8;

// One rank's memory: window 0 payload, window 1 counters, and the mailboxes.
struct RankMemory {
  RankMemory() : mailbox(2) {}
  std::vector<std::byte> payload = std::vector<std::byte>(kBlock * kBlocks);
  std::vector<uint64_t> counters = std::vector<uint64_t>(4);
  AtomicMailbox mailbox;
  std::byte* base(uint32_t window) {
    if (window == 0) return payload.data();
    if (window == 1) return reinterpret_cast<std::byte*>(counters.data());
    return static_cast<std::byte*>(mailbox.base(window));
  }
};

// Two ranks in one process over an unordered wire: a post waits on the
// wire until some later poll (of either rank) delivers it, in random order
// and one at a time;
// delivering a write copies its bytes and reports a TX completion to the
// sender (delivery-complete) and, with immediate data, an RX_IMM to the
// receiver; a transport atomic adds when delivered. At every poll and
// delivery the network checks write-then-atomic on rank 1: counter value k
// means blocks [0, k) landed.
struct Network {
  struct Delivery {
    uint32_t from;
    bool atomic;
    WriteRequest write;
    AtomicRequest add;
    uint64_t cookie;
  };
  std::mutex mutex;
  std::array<RankMemory, 2> memory;
  std::array<std::deque<courier_nic_completion_v1>, 2> cq;
  std::vector<Delivery> wire;
  std::mt19937 rng{3};
  uint64_t violations = 0;

  // The counter is read and added atomically: with the imm strategy the
  // receiving proxy adds to it outside the network's mutex.
  void check_locked() {
    const uint64_t k =
        std::atomic_ref<uint64_t>(memory[1].counters[kCounter / 8]).load(std::memory_order_acquire);
    for (uint64_t b = 0; b < k && b < kBlocks; ++b) {
      if (memory[1].payload[b * kBlock + kBlock - 1] != static_cast<std::byte>(b % 251 + 1)) {
        ++violations;
      }
    }
  }

  // Delivers one post, picked at random from the wire, on every other call:
  // a post may stay on the wire while the receiver goes on polling.
  void deliver_locked() {
    check_locked();
    if (!wire.empty() && std::bernoulli_distribution(0.5)(rng)) {
      const size_t pick = std::uniform_int_distribution<size_t>(0, wire.size() - 1)(rng);
      const Delivery d = wire[pick];
      wire.erase(wire.begin() + static_cast<std::ptrdiff_t>(pick));
      const uint32_t to = 1 - d.from;
      if (d.atomic) {
        std::atomic_ref<uint64_t>(
            *reinterpret_cast<uint64_t*>(memory[to].base(d.add.window) + d.add.offset))
            .fetch_add(d.add.operand, std::memory_order_acq_rel);
      } else {
        std::memcpy(memory[to].base(d.write.dst_window) + d.write.dst_offset,
                    memory[d.from].base(d.write.src_window) + d.write.src_offset, d.write.length);
        if (d.write.with_imm) {
          courier_nic_completion_v1 rx{};
          rx.kind = COURIER_NIC_COMP_RX_IMM;
          rx.peer = d.from;
          rx.imm = d.write.imm;
          rx.length = d.write.length;
          cq[to].push_back(rx);
        }
      }
      courier_nic_completion_v1 tx{};
      tx.kind = COURIER_NIC_COMP_TX;
      tx.cookie = d.cookie;
      tx.peer = to;
      cq[d.from].push_back(tx);
      check_locked();
    }
  }
};

class Loopback final : public ProxyTransport {
 public:
  Loopback(Network& net, uint32_t rank) : net_(net), rank_(rank) {}
  uint32_t caps() const override {
    return COURIER_NIC_CAP_RMA_WRITE | COURIER_NIC_CAP_WRITE_IMM | COURIER_NIC_CAP_IMM_SOURCE |
           COURIER_NIC_CAP_DELIVERY_COMPLETE;  // and unordered
  }
  uint32_t atomic_ops() const override { return COURIER_NIC_ATOMIC_ADD_U64; }
  uint32_t atomic_native() const override { return COURIER_NIC_ATOMIC_ADD_U64; }
  int post_write(const WriteRequest& w, uint64_t cookie, std::string*) override {
    std::lock_guard lock(net_.mutex);
    net_.wire.push_back({rank_, false, w, {}, cookie});
    return COURIER_OK;
  }
  int post_atomic(const AtomicRequest& a, uint64_t cookie, std::string*) override {
    std::lock_guard lock(net_.mutex);
    net_.wire.push_back({rank_, true, {}, a, cookie});
    return COURIER_OK;
  }
  int poll(courier_nic_completion_v1* out, uint32_t max) override {
    std::lock_guard lock(net_.mutex);
    net_.deliver_locked();
    uint32_t n = 0;
    while (n < max && !net_.cq[rank_].empty()) {
      out[n++] = net_.cq[rank_].front();
      net_.cq[rank_].pop_front();
    }
    return static_cast<int>(n);
  }
  std::string last_error() const override { return "loopback"; }

 private:
  Network& net_;
  uint32_t rank_;
};

}  // namespace

TEST_CASE("write-then-atomic holds for merged writes under injected reordering and duplicates") {
  for (AtomicStrategyKind strategy : {AtomicStrategyKind::imm, AtomicStrategyKind::hw}) {
    const std::string strategy_name = to_string(strategy);
    CAPTURE(strategy_name);
    Network net;
    for (uint32_t b = 0; b < kBlocks; ++b) {
      std::memset(net.memory[0].payload.data() + b * kBlock, static_cast<int>(b % 251 + 1), kBlock);
    }
    Logger log(LogLevel::error);
    FaultSpec faults;
    faults.reorder = 0.5;
    faults.dup = 0.2;
    faults.seed = 11;
    std::array<std::unique_ptr<Loopback>, 2> wires;
    std::array<std::unique_ptr<FaultInjectingTransport>, 2> transports;
    constexpr uint32_t kDepth = 1024;
    std::array<std::unique_ptr<TestRing>, 2> rings;
    std::array<std::unique_ptr<ProxyChannel>, 2> channels;
    std::array<std::unique_ptr<ProxyThread>, 2> proxies;
    std::array<SemanticTransport*, 2> layers{};
    for (uint32_t r = 0; r < 2; ++r) {
      wires[r] = std::make_unique<Loopback>(net, r);
      transports[r] = std::make_unique<FaultInjectingTransport>(*wires[r], faults, r);
      rings[r] = std::make_unique<TestRing>(kDepth, kDepth);
      channels[r] = std::make_unique<ProxyChannel>(0, rings[r]->slots.data(),
                                                   rings[r]->control.get(), kDepth);
      ProxyOptions options;
      options.coalesce_bytes = 1 << 20;
      SemanticsOptions semantics;
      semantics.rank = r;
      semantics.world_size = 2;
      semantics.add_u64 = strategy;
      stack_semantics(options, semantics, log, &net.memory[r].mailbox, &layers[r]);
      proxies[r] = std::make_unique<ProxyThread>(
          0, *transports[r], std::vector<ProxyChannel*>{channels[r].get()}, options, log);
      layers[r]->set_local_window(0, net.memory[r].payload.data(), net.memory[r].payload.size());
      layers[r]->set_local_window(1, net.memory[r].counters.data(),
                                  net.memory[r].counters.size() * 8);
    }
    // Every command is in the ring before rank 0's proxy starts, so runs of
    // kRun blocks are taken together and merged (unless a dequeue batch
    // ends inside one).
    DeviceChannel& ch = rings[0]->ch;
    for (uint32_t b = 0; b < kBlocks; b += kRun) {
      for (uint32_t k = 0; k < kRun; ++k) {
        const uint32_t off = (b + k) * kBlock;
        REQUIRE(device::push(ch, write_of(1, 0, off, off, kBlock), nullptr) == PushStatus::ok);
      }
      REQUIRE(device::push(ch, add_of(1, 1, kCounter, kRun), nullptr) == PushStatus::ok);
    }
    proxies[1]->start();
    proxies[0]->start();
    CHECK(device::drain(ch) == PushStatus::ok);
    proxies[0]->stop();
    proxies[1]->stop();
    std::lock_guard lock(net.mutex);
    CHECK(net.wire.empty());
    CHECK(net.violations == 0);
    CHECK(net.memory[1].counters[kCounter / 8] == kBlocks);
    CHECK(rings[0]->control->error == 0);
    CHECK(channels[0]->coalesced.load() > kBlocks / 2);
    CHECK(transports[0]->stats().reordered > 0);
    if (strategy == AtomicStrategyKind::imm) {
      CHECK(transports[1]->stats().duplicated > 0);
      CHECK(layers[1]->stats().duplicates > 0);
      CHECK(layers[1]->stats().held_back > 0);  // the wire did reorder
    } else {
      CHECK(layers[0]->stats().fenced > 0);
    }
  }
}
