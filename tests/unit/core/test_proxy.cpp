// ProxyThread against a scripted transport: commands become posts in ticket
// order, -EAGAIN is retried, completions arrive out of order, failures are
// recorded on the channel, and set-up tasks run on the proxy thread.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <deque>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "core/proxy/cookie_codec.hpp"
#include "core/proxy/proxy_thread.hpp"
#include "core/semantics/imm_codec.hpp"
#include "courier/error.hpp"
#include "gpu/fifo_push.hpp"
#include "semantic_stack.hpp"
#include "test_ring.hpp"

using namespace courier;
using courier::testing::TestRing;
using courier::testing::write_cmd;

namespace {

constexpr uint32_t kOrderedCaps = COURIER_NIC_CAP_RMA_WRITE | COURIER_NIC_CAP_WRITE_IMM |
                                  COURIER_NIC_CAP_ORDERED_WRITES | COURIER_NIC_CAP_IMM_SOURCE;

// Accepts writes, refuses every `eagain_every`-th post once with -EAGAIN,
// fails writes of length `fail_length`, and completes in shuffled order.
class ScriptedTransport final : public ProxyTransport {
 public:
  uint32_t caps() const override { return kOrderedCaps; }
  int post_write(const WriteRequest& write, uint64_t cookie, std::string* error) override {
    ++attempts;
    if (eagain_every != 0 && attempts % eagain_every == 0) return -EAGAIN;
    if (write.length == fail_length) {
      *error = "scripted failure";
      return -EIO;
    }
    accepted.fetch_add(1);
    // The proxy's cookie names the channel (a plain write's reaches here as
    // it is, with or without the semantics layer: cookie_codec.hpp).
    posted.push_back({cookie::channel_slot(cookie), static_cast<uint32_t>(write.dst_offset)});
    pending.push_back(cookie);
    return COURIER_OK;
  }
  int poll(courier_nic_completion_v1* out, uint32_t max) override {
    std::shuffle(pending.begin(), pending.end(), rng);
    uint32_t n = 0;
    while (n < max && !pending.empty()) {
      out[n] = {};
      out[n].kind = COURIER_NIC_COMP_TX;
      out[n].cookie = pending.back();
      out[n].status = COURIER_OK;
      pending.pop_back();
      ++n;
    }
    return static_cast<int>(n);
  }
  std::string last_error() const override { return "none"; }
  std::atomic<uint64_t> accepted{0};  // writes taken, readable while the proxy runs

  uint64_t attempts = 0;
  uint64_t eagain_every = 0;
  uint32_t fail_length = 0;
  std::vector<std::pair<uint32_t, uint32_t>> posted;  // (channel, dst_offset)
  std::deque<uint64_t> pending;
  std::mt19937 rng{7};
};

struct ProxyFixture {
  explicit ProxyFixture(uint32_t channels, uint32_t depth = 64, uint32_t inflight = 32) {
    for (uint32_t c = 0; c < channels; ++c) {
      rings.push_back(std::make_unique<TestRing>(depth, inflight));
      rings.back()->ch.channel_id = c;
      proxy_channels.push_back(std::make_unique<ProxyChannel>(c, rings.back()->slots.data(),
                                                              rings.back()->control.get(), depth));
    }
  }
  std::unique_ptr<ProxyThread> make_proxy(ProxyTransport& transport) {
    std::vector<ProxyChannel*> mine;
    for (auto& c : proxy_channels) mine.push_back(c.get());
    ProxyOptions options;
    options.poll_batch = 4;
    return std::make_unique<ProxyThread>(0, transport, mine, options, log);
  }
  Logger log{LogLevel::error};
  std::vector<std::unique_ptr<TestRing>> rings;
  std::vector<std::unique_ptr<ProxyChannel>> proxy_channels;
};

}  // namespace

TEST_CASE("writes from several channels are posted in ticket order and all complete") {
  ProxyFixture fx(3);
  ScriptedTransport transport;
  transport.eagain_every = 5;
  auto proxy = fx.make_proxy(transport);
  proxy->start();
  constexpr uint32_t kPerChannel = 3000;
  std::vector<std::thread> producers;
  for (uint32_t c = 0; c < 3; ++c) {
    producers.emplace_back([&, c] {
      for (uint32_t i = 0; i < kPerChannel; ++i) {
        CHECK(device::push(fx.rings[c]->ch, write_cmd(0, i, 16), nullptr) == PushStatus::ok);
      }
      CHECK(device::drain(fx.rings[c]->ch) == PushStatus::ok);
    });
  }
  for (auto& t : producers) t.join();
  proxy->stop();
  // Per channel, the posts follow ticket order despite -EAGAIN retries.
  std::vector<uint32_t> next(3, 0);
  bool ordered = true;
  for (auto [channel, offset] : transport.posted) {
    if (offset != next[channel]) ordered = false;
    next[channel]++;
  }
  CHECK(ordered);
  for (uint32_t c = 0; c < 3; ++c) {
    CHECK(next[c] == kPerChannel);
    CHECK(fx.proxy_channels[c]->commands.load() == kPerChannel + 1);  // + DRAIN
    CHECK(fx.rings[c]->control->completed == kPerChannel + 1);
    CHECK(fx.rings[c]->control->error == 0);
  }
}

TEST_CASE("a failed post and an unsupported op are recorded, completed and reported by DRAIN") {
  ProxyFixture fx(1);
  ScriptedTransport transport;
  transport.fail_length = 13;
  auto proxy = fx.make_proxy(transport);
  proxy->start();
  DeviceChannel& ch = fx.rings[0]->ch;
  REQUIRE(device::push(ch, write_cmd(0, 0, 8), nullptr) == PushStatus::ok);
  uint64_t bad = 0;
  REQUIRE(device::push(ch, write_cmd(0, 1, 13), &bad) == PushStatus::ok);
  CHECK(device::drain(ch) == PushStatus::channel_failed);
  uint64_t error = fx.rings[0]->control->error;
  CHECK((error & 0xff) == static_cast<uint64_t>(ChannelErrorCode::post_failed));
  CHECK((error >> 8) == bad + 1);
  CHECK(fx.proxy_channels[0]->errors.load() == 1);

  TransferCmd atomic;
  REQUIRE(encode_atomic(0, 0, 0, AtomicOp::add_u64, 1, &atomic) == CmdStatus::ok);
  REQUIRE(device::push(ch, atomic, nullptr) == PushStatus::ok);
  CHECK(device::drain(ch) == PushStatus::channel_failed);
  CHECK(fx.proxy_channels[0]->errors.load() == 2);
  proxy->stop();
}

TEST_CASE("run() executes set-up work on the proxy thread and propagates exceptions") {
  ProxyFixture fx(1);
  ScriptedTransport transport;
  auto proxy = fx.make_proxy(transport);
  std::thread::id inline_id;
  proxy->run([&] { inline_id = std::this_thread::get_id(); });
  CHECK(inline_id == std::this_thread::get_id());  // not started: inline
  proxy->start();
  std::thread::id proxy_id;
  proxy->run([&] { proxy_id = std::this_thread::get_id(); });
  CHECK(proxy_id != std::this_thread::get_id());
  CHECK_THROWS_WITH_AS(proxy->run([] { throw Error("boom"); }), "boom", Error);
  proxy->stop();
}

TEST_CASE("immediate-data arrivals are counted") {
  class ImmTransport final : public ProxyTransport {
   public:
    uint32_t caps() const override { return kOrderedCaps; }
    int post_write(const WriteRequest&, uint64_t, std::string*) override { return -ENOTSUP; }
    int poll(courier_nic_completion_v1* out, uint32_t max) override {
      uint32_t n = 0;
      while (n < max && remaining > 0) {
        out[n] = {};
        out[n].kind = COURIER_NIC_COMP_RX_IMM;
        out[n].imm = encode_write_imm(true, 3, static_cast<uint16_t>(37 - remaining));
        ++n;
        --remaining;
      }
      return static_cast<int>(n);
    }
    std::string last_error() const override { return ""; }
    std::atomic<int> remaining{37};
  };
  ProxyFixture fx(1);
  ImmTransport transport;
  auto proxy = fx.make_proxy(transport);
  proxy->start();
  while (proxy->imm_received() < 37) std::this_thread::yield();
  proxy->stop();
  CHECK(proxy->imm_received() == 37);
}

TEST_CASE("a refused post is retried even when no completion arrives to make room") {
  // The proxy normally retries a refused post after a completion; with
  // nothing in flight none will come, so the retry must not depend on one.
  ProxyFixture fx(1);
  class RefusesThreeTimes final : public ProxyTransport {
   public:
    uint32_t caps() const override { return kOrderedCaps; }
    int post_write(const WriteRequest&, uint64_t cookie, std::string*) override {
      if (++attempts <= 3) return -EAGAIN;
      done.push_back(cookie);
      return COURIER_OK;
    }
    int poll(courier_nic_completion_v1* out, uint32_t max) override {
      uint32_t n = 0;
      for (; n < max && !done.empty(); ++n) {
        out[n] = {};
        out[n].kind = COURIER_NIC_COMP_TX;
        out[n].cookie = done.back();
        done.pop_back();
      }
      return static_cast<int>(n);
    }
    std::string last_error() const override { return "none"; }
    uint32_t attempts = 0;
    std::vector<uint64_t> done;
  } transport;
  auto proxy = fx.make_proxy(transport);
  proxy->start();
  CHECK(device::push(fx.rings[0]->ch, write_cmd(0, 0, 16), nullptr) == PushStatus::ok);
  CHECK(device::drain(fx.rings[0]->ch) == PushStatus::ok);
  proxy->stop();
  CHECK(transport.attempts == 4);
  CHECK(fx.rings[0]->control->completed == 2);
}

TEST_CASE("a channel that fills the transport every time does not starve the others") {
  ProxyFixture fx(2, 256, 256);
  ScriptedTransport transport;
  transport.eagain_every = 2;  // full after every post
  // Channel 0 has a long burst before the proxy starts, channel 1 one
  // command: it must go out early, not after channel 0's burst.
  constexpr uint32_t kBurst = 200;
  for (uint32_t i = 0; i < kBurst; ++i) {
    REQUIRE(device::push(fx.rings[0]->ch, write_cmd(0, i * 64, 16), nullptr) == PushStatus::ok);
  }
  REQUIRE(device::push(fx.rings[1]->ch, write_cmd(0, 7, 16), nullptr) == PushStatus::ok);
  auto proxy = fx.make_proxy(transport);
  proxy->start();
  CHECK(device::drain(fx.rings[0]->ch) == PushStatus::ok);
  CHECK(device::drain(fx.rings[1]->ch) == PushStatus::ok);
  proxy->stop();
  REQUIRE(transport.posted.size() == kBurst + 1);
  size_t position = 0;
  while (position < transport.posted.size() && transport.posted[position].first != 1) ++position;
  CHECK(position < 4);  // after at most a couple of channel 0's posts
}

TEST_CASE("a BARRIER waiting for another rank holds back only its own channel") {
  ProxyFixture fx(2);
  ScriptedTransport transport;
  // Two ranks on one host; this proxy is rank 0 (the host leader). Rank 1
  // is simulated by writing its arrival into the shared block by hand.
  std::vector<std::string> hosts = {"h", "h"};
  BarrierTopology topology = make_barrier_topology(0, hosts);
  topology.block_bytes = barrier_block_bytes(2);
  std::vector<uint64_t> segment(topology.block_bytes * 2 / 8, 0);
  topology.segment = reinterpret_cast<std::byte*>(segment.data());
  std::vector<uint64_t> staging(2 * 2), landing(2 * 2);
  ProxyOptions options;
  SemanticsOptions semantics;  // the BARRIER is the semantics layer's
  semantics.world_size = 2;
  semantics.barrier = &topology;
  semantics.barrier_staging = staging.data();
  semantics.barrier_landing = landing.data();
  semantics.channels = 2;
  courier::testing::stack_semantics(options, semantics, fx.log);
  std::vector<ProxyChannel*> mine = {fx.proxy_channels[0].get(), fx.proxy_channels[1].get()};
  ProxyThread proxy(0, transport, mine, options, fx.log);

  DeviceChannel& ch0 = fx.rings[0]->ch;
  DeviceChannel& ch1 = fx.rings[1]->ch;
  TransferCmd barrier;
  REQUIRE(encode_barrier(42, &barrier) == CmdStatus::ok);
  uint64_t barrier_ticket = 0;
  // Both before the proxy starts: it takes them in one batch, and the WRITE
  // must wait behind the BARRIER all the same.
  REQUIRE(device::push(ch0, barrier, &barrier_ticket) == PushStatus::ok);
  REQUIRE(device::push(ch0, write_cmd(1, 7, 16), nullptr) == PushStatus::ok);  // behind it
  proxy.start();
  // Channel 1 moves on while channel 0 waits.
  for (uint32_t i = 0; i < 100; ++i) {
    REQUIRE(device::push(ch1, write_cmd(1, 100 + i, 16), nullptr) == PushStatus::ok);
  }
  CHECK(device::drain(ch1) == PushStatus::ok);
  CHECK_FALSE(device::is_complete(ch0, barrier_ticket));
  CHECK(transport.accepted.load() == 100);  // channel 1's, not the WRITE behind the BARRIER

  // Rank 1 arrives with the same epoch: the barrier completes, then the
  // write behind it is posted.
  segment[128 / 8 + 1] = 42;  // epochs[local index 1]
  std::atomic_ref<uint64_t>(segment[0]).fetch_add(1);
  CHECK(device::drain(ch0) == PushStatus::ok);
  proxy.stop();
  CHECK(fx.rings[0]->control->error == 0);
  bool write_after_barrier_posted = false;
  for (auto [channel, offset] : transport.posted) {
    if (channel == 0 && offset == 7) write_after_barrier_posted = true;
  }
  CHECK(write_after_barrier_posted);
  // The host leader released the host (generation 1).
  CHECK(std::atomic_ref<uint64_t>(segment[64 / 8]).load() == 1);
}
