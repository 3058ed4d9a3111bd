// ProxyThread when a peer is gone (issue 19: "killed ranks must never hang
// the others"). A rank killed while holding a lock or queue its peers' posts
// need can keep a proxy thread inside the provider for good (libfabric 1.17
// shm: every post takes a spinlock in the target's shared region); a peer
// that stopped leaves posts refused with -EAGAIN forever. Either way:
//   - a thread that keeps getting -EAGAIN still takes set-up tasks;
//   - once the job failed it posts nothing more and fails what it holds;
//   - a thread stuck inside a transport call is given up on after a bound
//     (run() and try_stop()), with a message that says where it is stuck,
//     and a withdrawn task never runs.
// Hangs are caught by the ctest TIMEOUT; no check here depends on timing
// beyond generous bounds.
#include <doctest/doctest.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/proxy/job_failure.hpp"
#include "core/proxy/proxy_thread.hpp"
#include "core/proxy/watched_transport.hpp"
#include "gpu/fifo_push.hpp"
#include "semantic_stack.hpp"
#include "test_ring.hpp"

using namespace courier;
using courier::testing::TestRing;
using courier::testing::write_cmd;

namespace {

constexpr uint32_t kCaps = COURIER_NIC_CAP_RMA_WRITE | COURIER_NIC_CAP_ORDERED_WRITES;

// Posts to `refusing_peer` are refused with -EAGAIN, every time; posts to
// `stuck_peer` do not return until release() (the test's stand-in for a
// provider spinning on a dead rank's lock); the rest complete on the next
// poll. Counters are atomics: the test reads them while the proxy runs.
class DeadPeerTransport final : public ProxyTransport {
 public:
  static constexpr uint32_t kNone = UINT32_MAX;

  uint32_t caps() const override { return kCaps; }
  int post_write(const WriteRequest& write, uint64_t cookie, std::string*) override {
    if (write.peer < 32 && (silent_peers >> write.peer & 1u) != 0) {
      posted.fetch_add(1);  // accepted, never completed: a stopped peer
      return COURIER_OK;
    }
    if (write.peer == refusing_peer) {
      refused.fetch_add(1);
      return -EAGAIN;
    }
    if (write.peer == stuck_peer) {
      inside.store(true);
      while (!released.load()) std::this_thread::yield();
      inside.store(false);
    }
    posted.fetch_add(1);
    std::lock_guard lock(mutex_);
    done_.push_back(cookie);
    return COURIER_OK;
  }
  int poll(courier_nic_completion_v1* out, uint32_t max) override {
    std::lock_guard lock(mutex_);
    uint32_t n = 0;
    for (; n < max && !done_.empty(); ++n) {
      out[n] = {};
      out[n].kind = COURIER_NIC_COMP_TX;
      out[n].cookie = done_.back();
      done_.pop_back();
    }
    return static_cast<int>(n);
  }
  std::string last_error() const override { return "none"; }
  void release() { released.store(true); }

  uint32_t refusing_peer = kNone;
  uint32_t stuck_peer = kNone;
  uint32_t silent_peers = 0;  // bit p: posts to peer p never complete
  std::atomic<uint64_t> refused{0};
  std::atomic<uint64_t> posted{0};
  std::atomic<bool> inside{false};
  std::atomic<bool> released{false};

 private:
  std::mutex mutex_;
  std::vector<uint64_t> done_;
};

struct Fixture {
  explicit Fixture(uint32_t channels, std::FILE* log_sink = stderr)
      : log(LogLevel::error, log_sink) {
    for (uint32_t c = 0; c < channels; ++c) {
      rings.push_back(std::make_unique<TestRing>(64, 32));
      rings.back()->ch.channel_id = c;
      proxy_channels.push_back(std::make_unique<ProxyChannel>(c, rings.back()->slots.data(),
                                                              rings.back()->control.get(), 64));
    }
    options.poll_batch = 4;
    SemanticsOptions semantics;
    semantics.world_size = 4;
    semantics.job_failure = &failure;
    courier::testing::stack_semantics(options, semantics, log);
    options.job_failure = &failure;
  }
  std::unique_ptr<ProxyThread> make_proxy(ProxyTransport& transport) {
    std::vector<ProxyChannel*> mine;
    for (auto& c : proxy_channels) mine.push_back(c.get());
    return std::make_unique<ProxyThread>(0, transport, mine, options, log);
  }
  DeviceChannel& ch(uint32_t c) { return rings[c]->ch; }
  // The proxy thread writes these while the test reads them.
  uint64_t completed(uint32_t c) {
    return std::atomic_ref<uint64_t>(rings[c]->control->completed).load();
  }
  uint64_t error(uint32_t c) { return std::atomic_ref<uint64_t>(rings[c]->control->error).load(); }

  Logger log;
  JobFailure failure;
  ProxyOptions options;
  std::vector<std::unique_ptr<TestRing>> rings;
  std::vector<std::unique_ptr<ProxyChannel>> proxy_channels;
};

void wait_for(const std::atomic<bool>& flag) {
  while (!flag.load()) std::this_thread::yield();
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("a thread whose posts to one peer are refused forever still takes tasks") {
  Fixture fx(2);
  DeadPeerTransport transport;
  transport.refusing_peer = 1;
  auto proxy = fx.make_proxy(transport);
  proxy->start();
  // Channel 0 writes to the peer that never makes room. (A thread retries
  // refused posts before it takes anything new, from any channel: the
  // transport counts as full until one of its operations completes.)
  for (uint32_t i = 0; i < 4; ++i) {
    REQUIRE(device::push(fx.ch(0), write_cmd(1, i, 16), nullptr) == PushStatus::ok);
  }
  while (transport.refused.load() < 100) std::this_thread::yield();  // retried, again and again

  std::thread::id ran_on;
  proxy->run([&] { ran_on = std::this_thread::get_id(); });
  CHECK(ran_on != std::this_thread::get_id());
  CHECK(fx.completed(0) == 0);  // the refused ones wait

  // The job fails: the refused commands fail on their channel, and nothing
  // more reaches the transport, not even commands taken afterwards.
  REQUIRE(fx.failure.trip(1, "rank 1 is gone: test"));
  proxy->run([] {});
  proxy->run([] {});  // a whole step ran after the failure was seen
  const uint64_t refused = transport.refused.load();
  const uint64_t posted = transport.posted.load();
  CHECK(device::drain(fx.ch(0)) == PushStatus::channel_failed);
  const uint64_t error = fx.error(0);
  CHECK((error & 0xff) == static_cast<uint64_t>(ChannelErrorCode::post_failed));
  CHECK((error >> 8) == 1);  // ticket 0 + 1: the first refused command
  CHECK(fx.proxy_channels[0]->errors.load() >= 4);

  REQUIRE(device::push(fx.ch(1), write_cmd(0, 0, 16), nullptr) == PushStatus::ok);
  CHECK(device::drain(fx.ch(1)) == PushStatus::channel_failed);
  proxy->run([] {});
  CHECK(transport.refused.load() == refused);
  CHECK(transport.posted.load() == posted);
  proxy->stop();
}

TEST_CASE("once the job failed, the semantics layer's posts are refused too") {
  // WatchedTransport sits between the semantics layer (the proxy's top) and
  // the transport chain.
  DeadPeerTransport inner;
  JobFailure failure;
  WatchedTransport watched(inner, &failure);
  std::string error;
  WriteRequest write;
  write.peer = 2;
  write.length = 8;
  CHECK(watched.post_write(write, 1, &error) == COURIER_OK);
  REQUIRE(failure.trip(2, "rank 2 is gone: test"));
  CHECK(watched.post_write(write, 2, &error) == kCancelledByFailure);
  CHECK(contains(error, "not posted to rank 2"));
  CHECK(contains(error, "rank 2 is gone: test"));
  CHECK(watched.post_atomic(AtomicRequest{}, 3, &error) == kCancelledByFailure);
  CHECK(inner.posted.load() == 1);
  courier_nic_completion_v1 c[2];
  CHECK(watched.poll(c, 2) == 1);  // completions still come back
}

TEST_CASE("after a failure, a thread stuck inside a post is given up on, not waited for") {
  Fixture fx(1);
  fx.options.after_failure_wait_ns = 200'000'000;
  DeadPeerTransport transport;
  transport.stuck_peer = 2;
  auto proxy = fx.make_proxy(transport);
  proxy->start();
  REQUIRE(device::push(fx.ch(0), write_cmd(2, 0, 16), nullptr) == PushStatus::ok);
  wait_for(transport.inside);  // the post will not return

  REQUIRE(fx.failure.trip(2, "rank 2 is gone: test"));
  std::atomic<bool> ran{false};
  const auto start = std::chrono::steady_clock::now();
  std::string message;
  int peer = -1;
  try {
    proxy->run([&] { ran.store(true); });
  } catch (const ProxyUnresponsive& e) {
    message = e.what();
    peer = e.peer();
  }
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(60));
  CHECK(contains(message, "proxy thread 0 did not take the task"));
  CHECK(contains(message, "post_write to rank 2"));
  CHECK(contains(message, "the job failed (rank 2)"));
  CHECK(peer == 2);
  // Still stuck: the next task is refused at once, with the same story.
  CHECK_THROWS_AS(proxy->run([&] { ran.store(true); }), ProxyUnresponsive);

  std::string why;
  CHECK_FALSE(proxy->try_stop(&why));
  CHECK(contains(why, "post_write to rank 2"));

  // The provider lets go after all: the thread sees stop and ends; the
  // withdrawn tasks never ran.
  transport.release();
  proxy->stop();
  CHECK_FALSE(ran.load());
}

TEST_CASE("before any failure, run() gives up after COURIER_TIMEOUT_S and the thread recovers") {
  Fixture fx(1);
  fx.options.job_failure = nullptr;
  fx.options.stall_timeout_ns = 300'000'000;
  DeadPeerTransport transport;
  transport.stuck_peer = 3;
  auto proxy = fx.make_proxy(transport);
  proxy->start();
  REQUIRE(device::push(fx.ch(0), write_cmd(3, 0, 16), nullptr) == PushStatus::ok);
  wait_for(transport.inside);

  std::atomic<bool> ran{false};
  std::string message;
  try {
    proxy->run([&] { ran.store(true); });
  } catch (const ProxyUnresponsive& e) {
    message = e.what();
  }
  CHECK(contains(message, "COURIER_TIMEOUT_S"));
  CHECK(contains(message, "post_write to rank 3"));

  // Once the call returns the thread answers again (until its loop came
  // round, a call is refused at once: the thread still counts as stuck).
  transport.release();
  for (;;) {
    try {
      proxy->run([&] { ran.store(true); });
      break;
    } catch (const ProxyUnresponsive&) {
      std::this_thread::yield();
    }
  }
  CHECK(ran.load());
  CHECK(device::drain(fx.ch(0)) == PushStatus::ok);
  std::string why;
  CHECK(proxy->try_stop(&why));
}

// The stall report's suspect (issue 20 follow-up): over shm a stopped rank
// soon stalls the ranks that answer it, so a third rank can see two ranks
// hold back one channel each. Such a tie waits for a rank that can tell
// them apart to name one (its report fails the job); only without one does
// this rank name its own guess, and says that it was a tie.
namespace {
struct StallSetup {
  explicit StallSetup(uint32_t silent) : log_file(std::tmpfile()), fx(2, log_file) {
    fx.options.stall_timeout_ns = 100'000'000;
    fx.options.on_transport_failure = [this](int peer, const std::string& what) {
      std::lock_guard lock(mutex);
      reports.emplace_back(peer, what);
      reported.store(true);
    };
    transport.silent_peers = silent;
  }
  ~StallSetup() { std::fclose(log_file); }
  size_t report_count() {
    std::lock_guard lock(mutex);
    return reports.size();
  }
  std::string logged() {
    std::fflush(log_file);
    std::rewind(log_file);
    std::string text;
    char buffer[4096];
    for (size_t n; (n = std::fread(buffer, 1, sizeof buffer, log_file)) > 0;)
      text.append(buffer, n);
    return text;
  }
  std::FILE* log_file;
  Fixture fx;
  DeadPeerTransport transport;
  std::mutex mutex;
  std::vector<std::pair<int, std::string>> reports;
  std::atomic<bool> reported{false};
};
}  // namespace

TEST_CASE("a stall with one rank holding back the most is reported at once, naming it") {
  StallSetup s(1u << 2);
  s.fx.options.stall_tie_wait_ns = 3'600'000'000'000;  // a tie would never be reported
  auto proxy = s.fx.make_proxy(s.transport);
  proxy->start();
  REQUIRE(device::push(s.fx.ch(0), write_cmd(2, 0, 16), nullptr) == PushStatus::ok);
  REQUIRE(device::push(s.fx.ch(1), write_cmd(2, 1, 16), nullptr) == PushStatus::ok);
  REQUIRE(device::push(s.fx.ch(1), write_cmd(1, 2, 16), nullptr) == PushStatus::ok);
  wait_for(s.reported);
  REQUIRE(s.report_count() == 1);
  CHECK(s.reports[0].first == 2);
  CHECK(contains(s.reports[0].second, "most likely stuck on rank 2"));
  proxy->stop();
  CHECK_FALSE(contains(s.logged(), "hold back as many"));
}

TEST_CASE("a stall whose suspect is a tie waits; another rank's verdict ends it unreported") {
  StallSetup s((1u << 1) | (1u << 2));
  s.fx.options.stall_tie_wait_ns = 3'600'000'000'000;
  auto proxy = s.fx.make_proxy(s.transport);
  proxy->start();
  REQUIRE(device::push(s.fx.ch(0), write_cmd(1, 0, 16), nullptr) == PushStatus::ok);
  REQUIRE(device::push(s.fx.ch(1), write_cmd(2, 1, 16), nullptr) == PushStatus::ok);
  // Well past the stall timeout: the thread saw the stall (each run() is
  // a step of its loop, and an idle step checks for stalls).
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(500);
  while (std::chrono::steady_clock::now() < until) proxy->run([] {});
  CHECK(s.report_count() == 0);
  // Another rank names rank 2 (the Context fails this rank's channels with
  // its reason): this thread reports nothing of its own, then or later.
  REQUIRE(s.fx.failure.trip(2, "rank 3: most likely stuck on rank 2"));
  const auto after = std::chrono::steady_clock::now() + std::chrono::milliseconds(300);
  while (std::chrono::steady_clock::now() < after) proxy->run([] {});
  CHECK(s.report_count() == 0);
  proxy->stop();
  CHECK_FALSE(contains(s.logged(), "made no progress"));
}

TEST_CASE("a stall whose suspect is a tie names a guess once the wait is over, and says so") {
  StallSetup s((1u << 1) | (1u << 2));
  s.fx.options.stall_tie_wait_ns = 50'000'000;
  auto proxy = s.fx.make_proxy(s.transport);
  proxy->start();
  REQUIRE(device::push(s.fx.ch(0), write_cmd(1, 0, 16), nullptr) == PushStatus::ok);
  REQUIRE(device::push(s.fx.ch(1), write_cmd(2, 1, 16), nullptr) == PushStatus::ok);
  wait_for(s.reported);
  REQUIRE(s.report_count() == 1);
  CHECK((s.reports[0].first == 1 || s.reports[0].first == 2));
  proxy->stop();
  const std::string dump = s.logged();
  CHECK(contains(dump, "most likely stuck on rank"));
  CHECK(contains(dump, "2 ranks hold back as many"));
}
