// A ProxyTransport for decorator tests: answers posts from a script, records
// what reached it, completes accepted posts on poll(), and hands out extra
// completions (incoming immediate data) queued by the test. A clock the test
// advances by hand stands in for time.
#pragma once

#include <cerrno>
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "core/proxy/proxy_transport.hpp"
#include "core/proxy/retrying_transport.hpp"

namespace courier::testing {

inline constexpr uint32_t kScriptedCaps =
    COURIER_NIC_CAP_RMA_WRITE | COURIER_NIC_CAP_WRITE_IMM | COURIER_NIC_CAP_ORDERED_WRITES;

struct FakeClock {
  uint64_t now = 1'000'000;
  NanoClock fn() {
    return [this] { return now; };
  }
};

class ScriptedTransport final : public ProxyTransport {
 public:
  struct Attempt {
    uint64_t cookie;
    uint32_t peer;
    bool atomic;
    int result;
  };

  explicit ScriptedTransport(FakeClock* clock = nullptr) : clock_(clock) {}

  uint32_t caps() const override { return kScriptedCaps; }
  uint32_t atomic_ops() const override { return 0x5; }
  uint32_t atomic_native() const override { return 0x1; }
  int post_write(const WriteRequest& write, uint64_t cookie, std::string* error) override {
    return post(write.peer, false, cookie, error);
  }
  int post_atomic(const AtomicRequest& atomic, uint64_t cookie, std::string* error) override {
    return post(atomic.peer, true, cookie, error);
  }
  int poll(courier_nic_completion_v1* out, uint32_t max) override {
    uint32_t n = 0;
    while (n < max && !completions.empty()) {
      out[n++] = completions.front();
      completions.pop_front();
    }
    return static_cast<int>(n);
  }
  std::string last_error() const override { return "scripted: inner error"; }

  // Queues a completion of incoming immediate data.
  void add_rx_imm(uint32_t imm) {
    courier_nic_completion_v1 c{};
    c.kind = COURIER_NIC_COMP_RX_IMM;
    c.imm = imm;
    completions.push_back(c);
  }
  void add_tx(uint64_t cookie) {
    courier_nic_completion_v1 c{};
    c.kind = COURIER_NIC_COMP_TX;
    c.cookie = cookie;
    completions.push_back(c);
  }
  // Cookies of the posts that were accepted, in order.
  std::vector<uint64_t> accepted() const {
    std::vector<uint64_t> out;
    for (const Attempt& a : attempts) {
      if (a.result == COURIER_OK) out.push_back(a.cookie);
    }
    return out;
  }

  std::deque<int> script;  // results of the next posts; COURIER_OK once empty
  int after_script = COURIER_OK;
  std::vector<Attempt> attempts;
  std::vector<uint64_t> attempt_times;  // clock at each attempt (with a clock)
  std::deque<courier_nic_completion_v1> completions;

 private:
  int post(uint32_t peer, bool atomic, uint64_t cookie, std::string* error) {
    int rc = after_script;
    if (!script.empty()) {
      rc = script.front();
      script.pop_front();
    }
    attempts.push_back({cookie, peer, atomic, rc});
    if (clock_ != nullptr) attempt_times.push_back(clock_->now);
    if (rc == COURIER_OK) {
      add_tx(cookie);
    } else {
      *error = "scripted: refused with " + std::to_string(rc);
    }
    return rc;
  }

  FakeClock* clock_;
};

inline WriteRequest write_to(uint32_t peer, uint64_t offset = 0, uint64_t length = 64) {
  WriteRequest w;
  w.peer = peer;
  w.src_offset = w.dst_offset = offset;
  w.length = length;
  return w;
}

}  // namespace courier::testing
