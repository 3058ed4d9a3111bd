// The semantics layer (SemanticTransport) between two ranks in one process,
// over a loopback transport
// that copies bytes between the ranks' windows and can hold deliveries back
// (reordering) and deliver immediate data twice (duplicates): emulated
// atomics are applied once, only after every earlier write landed, malformed
// requests are refused without touching memory, and transport atomics wait
// for earlier writes on an unordered transport; the caller's cookies come
// back with the peer, and only user notifications reach the caller.
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <random>
#include <vector>

#include "core/semantics/semantic_transport.hpp"

using namespace courier;

namespace {

constexpr uint32_t kBlock = 64;    // payload bytes per write
constexpr uint32_t kBlocks = 512;  // payload blocks in window 0
constexpr uint64_t kCounter = 8;   // counter offset in window 1

// One rank's memory: user windows 0 (payload) and 1 (counters), plus the
// atomic mailbox regions.
struct RankMemory {
  explicit RankMemory(uint32_t world) : mailbox(world) {}
  std::vector<std::byte> payload = std::vector<std::byte>(kBlock * kBlocks);
  std::vector<uint64_t> counters = std::vector<uint64_t>(4);
  AtomicMailbox mailbox;
  std::byte* base(uint32_t window) {
    if (window == 0) return payload.data();
    if (window == 1) return reinterpret_cast<std::byte*>(counters.data());
    return static_cast<std::byte*>(mailbox.base(window));
  }
};

struct Delivery {
  uint32_t from, to;
  WriteRequest write;
  uint64_t cookie;
  bool dup;
};

// Both ranks' transports share this "network".
struct Network {
  std::array<RankMemory*, 2> memory{};
  std::deque<Delivery> wire;
  std::array<std::deque<courier_nic_completion_v1>, 2> cq;
  std::mt19937 rng{11};
  double reorder = 0;  // chance that a delivery overtakes the one before it
  double dup = 0;      // chance that immediate data is delivered twice

  void deliver_all() {
    while (!wire.empty()) {
      size_t pick = 0;
      if (wire.size() > 1 && std::uniform_real_distribution<>(0, 1)(rng) < reorder) {
        pick = std::uniform_int_distribution<size_t>(1, wire.size() - 1)(rng);
      }
      Delivery d = wire[pick];
      wire.erase(wire.begin() + static_cast<std::ptrdiff_t>(pick));
      std::memcpy(memory[d.to]->base(d.write.dst_window) + d.write.dst_offset,
                  memory[d.from]->base(d.write.src_window) + d.write.src_offset, d.write.length);
      courier_nic_completion_v1 tx{};
      tx.kind = COURIER_NIC_COMP_TX;
      tx.cookie = d.cookie;
      cq[d.from].push_back(tx);
      if (d.write.with_imm) {
        courier_nic_completion_v1 rx{};
        rx.kind = COURIER_NIC_COMP_RX_IMM;
        rx.peer = d.from;
        rx.imm = d.write.imm;
        rx.length = d.write.length;
        cq[d.to].push_back(rx);
        if (std::uniform_real_distribution<>(0, 1)(rng) < dup) cq[d.to].push_back(rx);
      }
    }
  }
};

class LoopbackTransport final : public ProxyTransport {
 public:
  LoopbackTransport(Network& net, uint32_t rank, bool ordered)
      : net_(net), rank_(rank), ordered_(ordered) {}
  uint32_t caps() const override {
    return COURIER_NIC_CAP_RMA_WRITE | COURIER_NIC_CAP_WRITE_IMM | COURIER_NIC_CAP_IMM_SOURCE |
           COURIER_NIC_CAP_DELIVERY_COMPLETE | (ordered_ ? COURIER_NIC_CAP_ORDERED_WRITES : 0u);
  }
  int post_write(const WriteRequest& write, uint64_t cookie, std::string*) override {
    net_.wire.push_back({rank_, 1 - rank_, write, cookie, false});
    ++writes;
    return COURIER_OK;
  }
  int post_atomic(const AtomicRequest&, uint64_t, std::string*) override {
    ++atomics;
    return COURIER_OK;
  }
  int poll(courier_nic_completion_v1* out, uint32_t max) override {
    uint32_t n = 0;
    while (n < max && !net_.cq[rank_].empty()) {
      out[n++] = net_.cq[rank_].front();
      net_.cq[rank_].pop_front();
    }
    return static_cast<int>(n);
  }
  std::string last_error() const override { return "loopback"; }
  uint32_t writes = 0, atomics = 0;

 private:
  Network& net_;
  uint32_t rank_;
  bool ordered_;
};

struct TwoRanks {
  TwoRanks(bool ordered, AtomicStrategyKind strategy)
      : mem0(2), mem1(2), t0(net, 0, ordered), t1(net, 1, ordered) {
    net.memory = {&mem0, &mem1};
    SemanticsOptions o;
    o.world_size = 2;
    o.add_u64 = o.add_u32 = strategy;
    o.rank = 0;
    s0 = std::make_unique<SemanticTransport>(t0, o, &mem0.mailbox, log);
    o.rank = 1;
    s1 = std::make_unique<SemanticTransport>(t1, o, &mem1.mailbox, log);
    for (auto [s, m] : {std::pair{s0.get(), &mem0}, std::pair{s1.get(), &mem1}}) {
      s->set_local_window(0, m->payload.data(), m->payload.size());
      s->set_local_window(1, m->counters.data(), m->counters.size() * sizeof(uint64_t));
    }
  }
  // Delivers everything and polls both semantics layers, the way a proxy
  // thread's poll loop does (one completion at a time, so that the checker
  // runs after each). Returns what reached the callers.
  std::vector<courier_nic_completion_v1> pump() {
    std::vector<courier_nic_completion_v1> done;
    for (int round = 0; round < 8; ++round) {
      net.deliver_all();
      for (uint32_t rank : {0u, 1u}) {
        SemanticTransport* s = rank == 0 ? s0.get() : s1.get();
        // A poll that consumed only the layer's own traffic returns 0 with
        // more waiting: go on while the rank's completion queue has some.
        courier_nic_completion_v1 c;
        for (;;) {
          const int n = s->poll(&c, 1);
          REQUIRE(n >= 0);
          if (n == 0 && net.cq[rank].empty()) break;
          if (n == 0) continue;
          done.push_back(c);
          if (on_receive) on_receive();
        }
      }
    }
    return done;
  }
  Logger log{LogLevel::error};
  Network net;
  RankMemory mem0, mem1;
  LoopbackTransport t0, t1;
  std::unique_ptr<SemanticTransport> s0, s1;
  std::function<void()> on_receive;
};

WriteRequest write_block(uint32_t block, bool notify = false) {
  WriteRequest w;
  w.peer = 1;
  w.src_window = w.dst_window = 0;
  w.src_offset = w.dst_offset = block * kBlock;
  w.length = kBlock;
  w.notify = notify;
  return w;
}

AtomicRequest add_counter(uint64_t value, uint32_t op = COURIER_NIC_ATOMIC_ADD_U64,
                          uint64_t offset = kCounter, uint32_t peer = 1) {
  AtomicRequest a;
  a.peer = peer;
  a.window = a.result_window = 1;
  a.offset = offset;
  a.op = op;
  a.operand = value;
  return a;
}

}  // namespace

TEST_CASE("emulated atomics: applied once, only after every earlier write, under reordering") {
  for (bool ordered : {true, false}) {
    CAPTURE(ordered);
    TwoRanks r(ordered, AtomicStrategyKind::imm);
    r.net.reorder = ordered ? 0.0 : 0.5;
    r.net.dup = 0.2;
    for (uint32_t b = 0; b < kBlocks; ++b) {
      std::memset(r.mem0.payload.data() + b * kBlock, static_cast<int>(b % 251 + 1), kBlock);
    }
    // The checker: whenever rank 1 sees counter value k, blocks [0, k) are complete.
    uint64_t violations = 0;
    r.on_receive = [&] {
      const uint64_t k = std::atomic_ref<uint64_t>(r.mem1.counters[1]).load();
      for (uint64_t b = 0; b < k; ++b) {
        if (r.mem1.payload[b * kBlock + kBlock - 1] != static_cast<std::byte>(b % 251 + 1)) {
          ++violations;
        }
      }
    };
    uint64_t cookie = 0;
    uint32_t atomics = 0;
    for (uint32_t b = 0; b < kBlocks; ++b) {
      std::string error;
      REQUIRE(r.s0->post_write(write_block(b), ++cookie, &error) == COURIER_OK);
      REQUIRE(r.s0->post_atomic(add_counter(1), ++cookie, &error) == COURIER_OK);
      ++atomics;
      if (b % 16 == 15) r.pump();  // let answers free the request slots
    }
    r.pump();
    CHECK(violations == 0);
    CHECK(r.mem1.counters[1] == kBlocks);
    CHECK(r.s1->stats().atomics_applied == atomics);
    CHECK(r.s1->stats().atomics_rejected == 0);
    CHECK(r.s1->stats().duplicates > 0);  // duplicates were injected and dropped
    CHECK_FALSE(r.s0->busy());
    CHECK_FALSE(r.s1->busy());
    if (!ordered) CHECK(r.s1->stats().held_back > 0);  // reordering really happened
  }
}

TEST_CASE(
    "emulated atomics: every answer completes the command; 32-bit adds and negative addends") {
  TwoRanks r(true, AtomicStrategyKind::imm);
  r.mem1.counters[2] = 0x00000005'ffffffffull;  // a 32-bit add must not carry into the high half
  std::string error;
  REQUIRE(r.s0->post_atomic(add_counter(1, COURIER_NIC_ATOMIC_ADD_U32, 16), 41, &error) ==
          COURIER_OK);
  REQUIRE(r.s0->post_atomic(add_counter(static_cast<uint64_t>(-3)), 42, &error) == COURIER_OK);
  // Only the two answers reach the caller: with its cookies, from rank 1.
  std::vector<courier_nic_completion_v1> done = r.pump();
  REQUIRE(done.size() == 2);
  for (const courier_nic_completion_v1& c : done) {
    CHECK(c.kind == COURIER_NIC_COMP_TX);
    CHECK(c.status == COURIER_OK);
    CHECK(c.peer == 1);
  }
  CHECK(((done[0].cookie == 41 && done[1].cookie == 42) ||
         (done[0].cookie == 42 && done[1].cookie == 41)));
  CHECK(r.mem1.counters[2] == 0x00000005'00000000ull);
  CHECK(r.mem1.counters[1] == static_cast<uint64_t>(-3));
}

TEST_CASE("emulated atomics: malformed requests are rejected, counted and never applied") {
  TwoRanks r(true, AtomicStrategyKind::imm);
  std::vector<uint64_t> before = r.mem1.counters;
  std::vector<std::byte> payload_before = r.mem1.payload;
  struct Bad {
    const char* what;
    AtomicRecord record;
  };
  std::vector<Bad> bad = {
      {"offset outside the window", {COURIER_NIC_ATOMIC_ADD_U64, 0, 1, 0, 32, 1, 0, 0}},
      {"misaligned", {COURIER_NIC_ATOMIC_ADD_U64, 0, 1, 0, 4, 1, 0, 0}},
      {"unknown op", {0x40000u, 0, 1, 0, 8, 1, 0, 0}},
      {"unregistered window", {COURIER_NIC_ATOMIC_ADD_U64, 0, 9, 0, 0, 1, 0, 0}},
      {"huge offset", {COURIER_NIC_ATOMIC_ADD_U32, 0, 0, 0, ~uint64_t{0} - 3, 1, 0, 0}},
  };
  uint16_t seq = 0;
  for (Bad& b : bad) {
    CAPTURE(b.what);
    // A peer's record lands in rank 1's mailbox, then its immediate data.
    b.record.seq = seq;
    b.record.check = kRecordCheck ^ seq;
    r.mem1.mailbox.request_in(0, 3) = b.record;
    courier_nic_completion_v1 rx{};
    rx.kind = COURIER_NIC_COMP_RX_IMM;
    rx.peer = 0;
    rx.imm = encode_atomic_imm(3, seq++);
    r.net.cq[1].push_back(rx);
    r.pump();
  }
  // A record whose check word does not match its notification.
  r.mem1.mailbox.request_in(0, 4) = {COURIER_NIC_ATOMIC_ADD_U64, 0, 1, 0, 8, 1, 0, 12345};
  courier_nic_completion_v1 rx{};
  rx.kind = COURIER_NIC_COMP_RX_IMM;
  rx.imm = encode_atomic_imm(4, seq++);
  r.net.cq[1].push_back(rx);
  r.pump();
  CHECK(r.s1->stats().atomics_rejected == bad.size() + 1);
  CHECK(r.s1->stats().atomics_applied == 0);
  CHECK(r.mem1.counters == before);
  CHECK(r.mem1.payload == payload_before);
  // Every rejection was answered (rank 0 had no such requests: dropped as stale there).
  CHECK(r.t1.writes == bad.size() + 1);
}

TEST_CASE("transport atomics wait for earlier writes only on an unordered transport") {
  for (bool ordered : {true, false}) {
    CAPTURE(ordered);
    TwoRanks r(ordered, AtomicStrategyKind::hw);
    std::string error;
    REQUIRE(r.s0->post_write(write_block(0), 1, &error) == COURIER_OK);
    const int rc = r.s0->post_atomic(add_counter(1), 2, &error);
    if (ordered) {
      CHECK(rc == COURIER_OK);
    } else {
      CHECK(rc == -EAGAIN);  // the write is still in flight
      r.pump();              // its completion arrives
      CHECK(r.s0->post_atomic(add_counter(1), 2, &error) == COURIER_OK);
      CHECK(r.s0->stats().fenced == 1);
    }
    CHECK(r.t0.atomics == 1);
  }
}

TEST_CASE("an op without a strategy, or to a rank outside the job, is refused with a reason") {
  TwoRanks r(true, AtomicStrategyKind::none);
  std::string error;
  CHECK(r.s0->post_atomic(add_counter(1), 1, &error) == -ENOTSUP);
  CHECK(error.find("COURIER_ATOMICS") != std::string::npos);
  CHECK(r.s0->post_atomic(add_counter(1, COURIER_NIC_ATOMIC_ADD_U64, 0, 7), 2, &error) == -EINVAL);
  CHECK(error.find("rank 7") != std::string::npos);
  WriteRequest far = write_block(0);
  far.peer = 9;
  error.clear();
  CHECK(r.s0->post_write(far, 3, &error) == -EINVAL);
  CHECK(error.find("rank 9") != std::string::npos);
  CHECK(r.t0.writes == 0);  // nothing reached the transport below
  // No barrier set-up: a BARRIER is refused, naming why.
  error.clear();
  CHECK(r.s0->post_barrier(BarrierRequest{}, 4, &error) == -ENOTSUP);
  CHECK(error.find("BARRIER") != std::string::npos);
}

TEST_CASE("the caller's cookies come back as posted; only user notifications reach it") {
  // Ordered: plain writes go down with the caller's cookie (no table);
  // unordered: every write is sequenced. Cookies with bit 63 set go through
  // the table (cookie_codec.hpp): both paths.
  for (const bool ordered : {true, false}) {
    CAPTURE(ordered);
    TwoRanks r(ordered, AtomicStrategyKind::imm);
    std::string error;
    const uint64_t big = (uint64_t{0xabcd} << 48) | 12345;  // any 64 bits: the layer keeps them
    const uint64_t small = 77;
    REQUIRE(r.s0->post_write(write_block(0), big, &error) == COURIER_OK);
    REQUIRE(r.s0->post_write(write_block(1, /*notify=*/true), big + 1, &error) == COURIER_OK);
    REQUIRE(r.s0->post_write(write_block(2), small, &error) == COURIER_OK);
    REQUIRE(r.s0->post_write(write_block(3, /*notify=*/true), small + 1, &error) == COURIER_OK);
    PeerActivity a;
    REQUIRE(r.s0->peer_activity(1, &a));
    CHECK(a.next_seq_to == (ordered ? 2 : 4));  // sequence numbers: notifications, or all
    // Notifications carried immediate data on the wire, one each.
    std::vector<courier_nic_completion_v1> done = r.pump();
    std::vector<uint64_t> tx;
    uint32_t notifications = 0;
    for (const courier_nic_completion_v1& c : done) {
      if (c.kind == COURIER_NIC_COMP_TX) {
        tx.push_back(c.cookie);
      } else {
        ++notifications;
        CHECK(c.peer == 0);  // rank 1 heard from rank 0
      }
    }
    std::sort(tx.begin(), tx.end());
    CHECK(tx == std::vector<uint64_t>{small, small + 1, big, big + 1});
    CHECK(notifications == 2);
    CHECK_FALSE(r.s0->busy());
  }
}

TEST_CASE("barrier topology: hosts, leaders, local indices and rails") {
  // Ranks 0, 2, 4 on host a; 1, 3 on host b; 5 alone on host c.
  const std::vector<std::string> keys = {"a", "b", "a", "b", "a", "c"};
  BarrierTopology t = make_barrier_topology(3, keys);
  CHECK(t.host_leaders == std::vector<uint32_t>{0, 1, 5});
  CHECK(t.host_leader == 1);
  CHECK(t.local_index == 1);
  CHECK(t.local_size == 2);
  CHECK(t.rail == std::vector<uint32_t>{2, 3});  // local index 1 on hosts a and b
  BarrierTopology alone = make_barrier_topology(5, keys);
  CHECK(alone.host_leader == 5);
  CHECK(alone.local_index == 0);
  CHECK(alone.local_size == 1);
  CHECK(alone.rail == std::vector<uint32_t>{0, 1, 5});
}

TEST_CASE("more posts in flight than the table's first size: every cookie comes back once") {
  // Unordered: every write goes through the table (and is counted: a
  // transport atomic waits for them).
  TwoRanks r(false, AtomicStrategyKind::hw);
  std::string error;
  constexpr uint64_t kPosts = 3000;  // beyond the table's first 1024 slots
  for (uint64_t i = 0; i < kPosts; ++i) {
    REQUIRE(r.s0->post_write(write_block(static_cast<uint32_t>(i % kBlocks)), 1000 + i, &error) ==
            COURIER_OK);
  }
  CHECK(r.s0->post_atomic(add_counter(1), 1, &error) == -EAGAIN);  // the writes first
  std::vector<uint64_t> cookies;
  for (const courier_nic_completion_v1& c : r.pump()) {
    if (c.kind == COURIER_NIC_COMP_TX) cookies.push_back(c.cookie);
  }
  std::sort(cookies.begin(), cookies.end());
  REQUIRE(cookies.size() == kPosts);
  for (uint64_t i = 0; i < kPosts; ++i) CHECK(cookies[i] == 1000 + i);
  CHECK(r.s0->post_atomic(add_counter(1), 1, &error) == COURIER_OK);  // none left in flight
  CHECK(r.t0.atomics == 1);
}
