// FIFO channel: many producers, one consumer, batches, back-pressure,
// completion prefix, DRAIN, timeouts and corruption detection.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <random>
#include <thread>

#include "core/proxy/fifo_consumer.hpp"
#include "courier/error.hpp"
#include "gpu/fifo_push.hpp"
#include "test_ring.hpp"

using namespace courier;
using courier::testing::TestRing;
using courier::testing::write_cmd;

namespace {

// Consumes everything, completing commands in a shuffled order after a
// delay, and checks that producers never exceed the in-flight limit.
struct Consumer {
  Consumer(TestRing& ring, uint64_t expected, uint32_t depth)
      : ring(ring), fifo(ring.slots.data(), depth, 0), tracker(depth), expected(expected) {}

  void run() {
    std::mt19937 rng(42);
    std::vector<uint64_t> waiting;
    TransferCmd batch[16];
    while (received.size() < expected || !waiting.empty()) {
      uint64_t first = fifo.next_ticket();
      uint32_t n = fifo.poll(batch, 16);
      for (uint32_t i = 0; i < n; ++i) {
        uint64_t ticket = first + i;
        if (ticket >= tracker.prefix() + ring.ch.max_inflight) limit_violations++;
        received.push_back(batch[i]);
        waiting.push_back(ticket);
      }
      if (waiting.size() >= 4 || (n == 0 && !waiting.empty())) {
        std::shuffle(waiting.begin(), waiting.end(), rng);
        for (uint64_t t : waiting) tracker.complete(t);
        waiting.clear();
        publish_completed(*ring.control, tracker.prefix());
      }
      if (n == 0) std::this_thread::yield();
    }
  }

  TestRing& ring;
  FifoConsumer fifo;
  CompletionTracker tracker;
  uint64_t expected;
  std::vector<TransferCmd> received;
  int limit_violations = 0;
};

}  // namespace

TEST_CASE("many producers, batches of 1..8, every command arrives once, in order per producer") {
  constexpr uint32_t kDepth = 64, kInflight = 32, kProducers = 4, kPerProducer = 5000;
  TestRing ring(kDepth, kInflight);
  Consumer consumer(ring, uint64_t{kProducers} * kPerProducer, kDepth);
  std::thread consumer_thread([&] { consumer.run(); });
  std::vector<std::thread> producers;
  std::atomic<int> failures{0};
  for (uint32_t p = 0; p < kProducers; ++p) {
    producers.emplace_back([&, p] {
      uint32_t sent = 0, batch_size = 1;
      while (sent < kPerProducer) {
        uint32_t n = std::min(batch_size, kPerProducer - sent);
        TransferCmd cmds[kMaxBatch];
        for (uint32_t i = 0; i < n; ++i) cmds[i] = write_cmd(p, sent + i, 1 + p);
        if (device::push_batch(ring.ch, cmds, n, nullptr) != PushStatus::ok) failures++;
        sent += n;
        batch_size = batch_size % kMaxBatch + 1;
      }
    });
  }
  for (auto& t : producers) t.join();
  consumer_thread.join();
  CHECK(failures == 0);
  CHECK(consumer.limit_violations == 0);
  REQUIRE(consumer.received.size() == kProducers * kPerProducer);
  std::vector<uint32_t> next(kProducers, 0);
  bool in_order = true;
  for (const TransferCmd& cmd : consumer.received) {
    uint32_t p = cmd.dst_rank();
    REQUIRE(p < kProducers);
    if (cmd.dst_offset() != next[p] || cmd.length() != 1 + p) in_order = false;
    next[p]++;
  }
  CHECK(in_order);
  for (uint32_t p = 0; p < kProducers; ++p) CHECK(next[p] == kPerProducer);
  CHECK(ring.head == kProducers * kPerProducer);
}

TEST_CASE("completion is an in-order prefix") {
  CompletionTracker tracker(16);
  tracker.complete(2);
  tracker.complete(1);
  CHECK(tracker.prefix() == 0);
  tracker.complete(0);
  CHECK(tracker.prefix() == 3);
  // Wrap around the ring several times.
  for (uint64_t t = 3; t < 100; ++t) tracker.complete(t);
  CHECK(tracker.prefix() == 100);
}

TEST_CASE("commands given back are taken again first, in order; peek takes nothing") {
  TestRing ring(16, 8);
  FifoConsumer fifo(ring.slots.data(), 16, 0);
  for (uint32_t i = 0; i < 5; ++i) {
    REQUIRE(device::push(ring.ch, write_cmd(0, i * 8, 8), nullptr) == PushStatus::ok);
  }
  TransferCmd got[8];
  CHECK(fifo.peek(got, 8) == 5);
  CHECK(fifo.next_ticket() == 0);
  CHECK(fifo.ready());
  REQUIRE(fifo.poll(got, 4) == 4);
  CHECK(fifo.next_ticket() == 4);
  fifo.give_back(&got[2], 2);  // tickets 2 and 3 could not be posted
  CHECK(fifo.next_ticket() == 2);
  TransferCmd again[8];
  REQUIRE(fifo.poll(again, 8) == 3);
  CHECK(again[0].word0 == got[2].word0);
  CHECK(again[0].word1 == got[2].word1);
  CHECK(again[1].dst_offset() == 24);
  CHECK(again[2].dst_offset() == 32);
  CHECK(fifo.next_ticket() == 5);
  CHECK_FALSE(fifo.ready());
}

TEST_CASE("is_complete and DRAIN wait for every earlier command") {
  TestRing ring(16, 8);
  FifoConsumer fifo(ring.slots.data(), 16, 0);
  uint64_t ticket = 0;
  REQUIRE(device::push(ring.ch, write_cmd(0, 0, 8), &ticket) == PushStatus::ok);
  CHECK(ticket == 0);
  CHECK_FALSE(device::is_complete(ring.ch, 0));
  std::atomic<bool> drained{false};
  std::thread drainer([&] {
    CHECK(device::drain(ring.ch) == PushStatus::ok);
    drained = true;
  });
  // Take the write and the DRAIN; complete the DRAIN first: not enough.
  TransferCmd got[4];
  uint32_t n = 0;
  while (n < 2) n += fifo.poll(got + n, 2 - n);
  CHECK(got[1].op() == CmdOp::drain);
  CompletionTracker tracker(16);
  tracker.complete(1);
  publish_completed(*ring.control, tracker.prefix());
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  CHECK_FALSE(drained.load());
  CHECK_FALSE(device::is_complete(ring.ch, 0));
  tracker.complete(0);
  publish_completed(*ring.control, tracker.prefix());
  drainer.join();
  CHECK(drained.load());
  CHECK(device::is_complete(ring.ch, 0));
  CHECK(device::is_complete(ring.ch, 1));
}

TEST_CASE("DRAIN reports a failure the proxy recorded on the channel") {
  TestRing ring(16, 8);
  ring.control->error = 1;      // as a proxy would set it
  ring.control->completed = 1;  // pretend the DRAIN (ticket 0) completed
  CHECK(device::drain(ring.ch) == PushStatus::channel_failed);
}

TEST_CASE("back-pressure: a full channel with no consumer times out instead of hanging") {
  TestRing ring(16, 8, /*timeout_ns=*/20'000'000);
  TransferCmd cmds[kMaxBatch];
  for (auto& c : cmds) c = write_cmd(0, 0, 1);
  REQUIRE(device::push_batch(ring.ch, cmds, 8, nullptr) == PushStatus::ok);
  CHECK(device::push(ring.ch, cmds[0], nullptr) == PushStatus::timed_out);
  // Ticket 8 stays reserved and unpublished: the channel is failed for good,
  // and every later wait says so at once instead of timing out again.
  CHECK(ring.control->error == encode_channel_error(8, ChannelErrorCode::producer_timed_out));
  ring.ch.timeout_ns = ~uint64_t{0};  // a hang here would mean no fast failure
  CHECK(device::push(ring.ch, cmds[0], nullptr) == PushStatus::channel_failed);
  CHECK(device::drain(ring.ch) == PushStatus::channel_failed);
}

TEST_CASE("a stale or duplicated completion is refused") {
  CompletionTracker tracker(16);
  tracker.complete(0);
  CHECK_THROWS_AS(tracker.complete(0), Error);  // already complete
  tracker.complete(2);
  CHECK_THROWS_AS(tracker.complete(2), Error);   // completed twice
  CHECK_THROWS_AS(tracker.complete(17), Error);  // a ring lap ahead
  CHECK(tracker.prefix() == 1);
}

TEST_CASE("batches larger than 8 or than the in-flight limit are refused") {
  TestRing ring(16, 8);
  TransferCmd cmds[kMaxBatch + 1];
  for (auto& c : cmds) c = write_cmd(0, 0, 1);
  CHECK(device::push_batch(ring.ch, cmds, kMaxBatch + 1, nullptr) == PushStatus::batch_too_large);
  CHECK(device::push_batch(ring.ch, cmds, 0, nullptr) == PushStatus::batch_too_large);
  CHECK(ring.head == 0);  // nothing reserved
}

TEST_CASE("a slot with the wrong sequence number is reported as corruption") {
  TestRing ring(16, 8);
  FifoConsumer fifo(ring.slots.data(), 16, 3);
  TransferCmd bad = write_cmd(0, 0, 1);
  bad.set_seq(7);  // ticket 0 expected
  ring.slots[0] = bad;
  TransferCmd out[1];
  try {
    fifo.poll(out, 1);
    FAIL("expected an Error");
  } catch (const Error& e) {
    std::string what = e.what();
    CHECK(what.find("FIFO channel 3") != std::string::npos);
    CHECK(what.find("sequence number 7") != std::string::npos);
  }
}

TEST_CASE("a producer blocked on a full channel is woken when its target is published") {
  TestRing ring(16, 8);
  TransferCmd cmds[kMaxBatch];
  for (auto& c : cmds) c = write_cmd(0, 0, 1);
  REQUIRE(device::push_batch(ring.ch, cmds, 8, nullptr) == PushStatus::ok);
  std::atomic<bool> pushed{false};
  std::thread producer([&] {
    CHECK(device::push(ring.ch, cmds[0], nullptr) == PushStatus::ok);
    pushed = true;
  });
  // The producer registers the completion count it waits for (hysteresis:
  // half the in-flight limit free again), then blocks.
  while (std::atomic_ref<uint64_t>(ring.control->wake_at).load() == 0) std::this_thread::yield();
  CHECK(ring.control->wake_at == 5);  // ticket 8 + 1 - 8 + 8 / 2
  publish_completed(*ring.control, 4);
  CHECK(ring.control->wake_at == 5);  // not reached: nobody woken, target kept
  CHECK_FALSE(pushed.load());
  publish_completed(*ring.control, 5);
  CHECK(ring.control->wake_at == 0);  // reached: waiters woken, target cleared
  producer.join();
  CHECK(pushed.load());
}

TEST_CASE("a producer blocked with a batch as large as the limit waits only for room") {
  // max_inflight 4, batches of 4: the resume point must not be one of the
  // producer's own, still unpublished tickets.
  TestRing ring(16, 4, /*timeout_ns=*/5'000'000'000ull);
  FifoConsumer fifo(ring.slots.data(), 16, 0);
  CompletionTracker tracker(16);
  TransferCmd cmds[4];
  for (auto& c : cmds) c = write_cmd(0, 0, 1);
  REQUIRE(device::push_batch(ring.ch, cmds, 4, nullptr) == PushStatus::ok);
  std::atomic<int> status{-1};
  std::thread producer(
      [&] { status = static_cast<int>(device::push_batch(ring.ch, cmds, 4, nullptr)); });
  while (std::atomic_ref<uint64_t>(ring.control->wake_at).load() == 0) std::this_thread::yield();
  CHECK(ring.control->wake_at <= 4);  // waits for completions, never for its own tickets 4..7
  TransferCmd got[4];
  uint32_t n = 0;
  while (n < 4) n += fifo.poll(got + n, 4 - n);
  for (uint64_t t = 0; t < 4; ++t) tracker.complete(t);
  publish_completed(*ring.control, tracker.prefix());
  producer.join();
  CHECK(status == static_cast<int>(PushStatus::ok));
  CHECK(ring.control->error == 0);
}

TEST_CASE("a fatal error replaces an earlier non-fatal one, and the first fatal one stays") {
  TestRing ring(16, 8);
  ring.control->error = encode_channel_error(3, ChannelErrorCode::post_failed);
  device::mark_channel_fatal(ring.control.get(), 9, ChannelErrorCode::proxy_failed);
  CHECK(ring.control->error == encode_channel_error(9, ChannelErrorCode::proxy_failed));
  device::mark_channel_fatal(ring.control.get(), 12, ChannelErrorCode::producer_timed_out);
  CHECK(ring.control->error == encode_channel_error(9, ChannelErrorCode::proxy_failed));
  CHECK(device::drain(ring.ch) == PushStatus::channel_failed);
}
