// Idle proxies (docs/fifo-and-proxy.md, "Idle proxies"): the doorbell's
// wake-up cannot be lost, crosses processes, and a ProxyThread sleeps on it
// once idle, waking for a ring, for commands nobody rang for, and to stop.
#include <doctest/doctest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include "core/proxy/doorbell.hpp"
#include "core/proxy/proxy_thread.hpp"
#include "gpu/fifo_push.hpp"
#include "test_ring.hpp"

using namespace courier;
using courier::testing::TestRing;
using courier::testing::write_cmd;

namespace {

uint32_t sleepers(const DoorbellWord& word) {
  return std::atomic_ref<const uint32_t>(word.sleepers).load();
}

// Waits (up to 30 s) until `ready` holds.
template <class Ready>
bool eventually(Ready ready) {
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!ready()) {
    if (std::chrono::steady_clock::now() > give_up) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

// Completes every write on the next poll; safe to post from the proxy
// thread while the test counts.
class CompletingTransport final : public ProxyTransport {
 public:
  uint32_t caps() const override { return COURIER_NIC_CAP_RMA_WRITE; }
  int post_write(const WriteRequest&, uint64_t cookie, std::string*) override {
    std::lock_guard lock(mutex_);
    pending_.push_back(cookie);
    ++posted_;
    return COURIER_OK;
  }
  int poll(courier_nic_completion_v1* out, uint32_t max) override {
    std::lock_guard lock(mutex_);
    uint32_t n = 0;
    while (n < max && !pending_.empty()) {
      out[n] = {};
      out[n].kind = COURIER_NIC_COMP_TX;
      out[n].cookie = pending_.back();
      pending_.pop_back();
      ++n;
    }
    return static_cast<int>(n);
  }
  std::string last_error() const override { return "none"; }
  uint64_t posted() {
    std::lock_guard lock(mutex_);
    return posted_;
  }

 private:
  std::mutex mutex_;
  std::vector<uint64_t> pending_;
  uint64_t posted_ = 0;
};

struct SleepingProxy {
  explicit SleepingProxy(uint64_t max_sleep_ns) : ring(64, 32) {
    channel = std::make_unique<ProxyChannel>(0, ring.slots.data(), ring.control.get(), 64);
    ProxyOptions options;
    options.sleep_after_ns = 1'000'000;  // 1 ms
    options.max_sleep_ns = max_sleep_ns;
    options.doorbell = Doorbell(&word);
    proxy = std::make_unique<ProxyThread>(0, transport, std::vector<ProxyChannel*>{channel.get()},
                                          options, log);
    proxy->start();
  }
  ~SleepingProxy() { proxy->stop(); }
  Logger log{LogLevel::error};
  DoorbellWord word;
  TestRing ring;
  CompletingTransport transport;
  std::unique_ptr<ProxyChannel> channel;
  std::unique_ptr<ProxyThread> proxy;
};

}  // namespace

TEST_CASE("doorbell: a ring between begin_sleep and sleep is not lost") {
  DoorbellWord word;
  Doorbell bell(&word);
  bell.ring();  // nobody sleeps: nothing to bump
  CHECK(word.rings == 0);
  const uint32_t ticket = bell.begin_sleep();
  CHECK(sleepers(word) == 1);
  bell.ring();  // after the sleeper looked for work, before it blocked
  CHECK(word.rings == 1);
  CHECK(bell.sleep(ticket, 60'000'000'000ull));  // returns at once: woken
  bell.end_sleep();
  CHECK(sleepers(word) == 0);
  const uint32_t again = bell.begin_sleep();
  CHECK_FALSE(bell.sleep(again, 1'000'000));  // nobody rings: times out
  bell.end_sleep();
}

TEST_CASE("doorbell: a ring wakes a sleeper in another process") {
  void* shared = mmap(nullptr, sizeof(DoorbellWord), PROT_READ | PROT_WRITE,
                      MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  REQUIRE(shared != MAP_FAILED);
  auto* word = new (shared) DoorbellWord();
  Doorbell bell(word);
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    const uint32_t ticket = bell.begin_sleep();
    const bool woke = bell.sleep(ticket, 60'000'000'000ull);  // only a ring ends it early
    bell.end_sleep();
    _exit(woke ? 0 : 1);
  }
  REQUIRE(eventually([&] { return sleepers(*word) == 1; }));
  bell.ring();
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  munmap(shared, sizeof(DoorbellWord));
}

TEST_CASE("an idle proxy sleeps on its doorbell; a ring and a push wake it") {
  SleepingProxy fx(60'000'000'000ull);  // only a ring can end a sleep in time
  REQUIRE(eventually([&] { return sleepers(fx.word) == 1; }));
  CHECK(device::push(fx.ring.ch, write_cmd(0, 0, 16), nullptr) == PushStatus::ok);
  Doorbell(&fx.word).ring();  // as Context::wake_proxies does before a launch
  CHECK(device::drain(fx.ring.ch) == PushStatus::ok);
  CHECK(fx.transport.posted() == 1);
  // Idle again: back to sleep.
  CHECK(eventually([&] { return sleepers(fx.word) == 1; }));
}

TEST_CASE("a sleeping proxy finds commands nobody rang for, and stops when told") {
  SleepingProxy fx(20'000'000);  // polls at least every 20 ms
  REQUIRE(eventually([&] { return sleepers(fx.word) == 1; }));
  for (uint32_t i = 0; i < 10; ++i) {
    CHECK(device::push(fx.ring.ch, write_cmd(0, i, 16), nullptr) == PushStatus::ok);
  }
  CHECK(device::drain(fx.ring.ch) == PushStatus::ok);  // no ring: found on a timeout
  CHECK(fx.transport.posted() == 10);
  REQUIRE(eventually([&] { return sleepers(fx.word) == 1; }));
  fx.proxy->stop();  // rings: returns without waiting out a sleep
  CHECK(sleepers(fx.word) == 0);
}
