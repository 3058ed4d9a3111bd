// COURIER_FAULTS parsing and FaultInjectingTransport against a scripted
// transport: faults happen at the configured rates (statistical bounds),
// deterministically for a seed, and each does what it claims: posts really
// reach the transport out of order, only RX_IMM is duplicated, delays hold
// completions back, failures are transient ones that RetryingTransport absorbs.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <vector>

#include "core/config.hpp"
#include "core/faults/fault_injecting_transport.hpp"
#include "core/faults/fault_spec.hpp"
#include "core/faults/transport_chain.hpp"
#include "core/proxy/retrying_transport.hpp"
#include "courier/error.hpp"
#include "scripted_transport.hpp"

using namespace courier;
using courier::testing::FakeClock;
using courier::testing::kScriptedCaps;
using courier::testing::ScriptedTransport;
using courier::testing::write_to;

namespace {

std::string parse_error(std::string_view text) {
  try {
    parse_fault_spec(text);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

FaultSpec spec_of(std::string_view text) { return parse_fault_spec(text); }

// Binomial count within 6 standard deviations of n * p.
void check_rate(uint64_t count, uint64_t n, double p) {
  double mean = static_cast<double>(n) * p;
  double sigma = std::sqrt(static_cast<double>(n) * p * (1 - p));
  INFO("count " << count << " of " << n << " at p=" << p);
  CHECK(static_cast<double>(count) > mean - 6 * sigma);
  CHECK(static_cast<double>(count) < mean + 6 * sigma);
}

// Everything poll() returns until it has been empty for a while (clock
// advanced past every delay and hold).
std::vector<courier_nic_completion_v1> drain(ProxyTransport& t, FakeClock& clock) {
  std::vector<courier_nic_completion_v1> got;
  courier_nic_completion_v1 batch[16];
  int empty = 0;
  while (empty < 3) {
    int n = t.poll(batch, 16);
    REQUIRE(n >= 0);
    got.insert(got.end(), batch, batch + n);
    empty = n == 0 ? empty + 1 : 0;
    clock.now += 1'000'000;
  }
  return got;
}

}  // namespace

TEST_CASE("COURIER_FAULTS parses every key; empty means off") {
  FaultSpec s = spec_of("reorder=0.3,delay_us=50,dup=0.01,fail=0.001,seed=7");
  CHECK(s.reorder == doctest::Approx(0.3));
  CHECK(s.delay_us == 50);
  CHECK(s.dup == doctest::Approx(0.01));
  CHECK(s.fail == doctest::Approx(0.001));
  CHECK(s.seed == 7);
  CHECK(s.active());
  CHECK(s.describe() == "reorder=0.3,delay_us=50,dup=0.01,fail=0.001,seed=7");
  CHECK_FALSE(spec_of("").active());
  CHECK_FALSE(spec_of("seed=3").active());  // no fault asked for: no decorator
  CHECK(spec_of(" fail = 1 , seed=18446744073709551615").fail == 1.0);
  CHECK(spec_of("reorder=0").describe() == "off");
}

TEST_CASE("COURIER_FAULTS errors name the variable and the bad part") {
  CHECK(parse_error("reorder=2") ==
        "COURIER_FAULTS='reorder=2': reorder must be a probability in [0, 1] (got '2')");
  CHECK(parse_error("dup=-0.1").find("dup must be a probability in [0, 1]") != std::string::npos);
  CHECK(parse_error("fail=nan").find("fail must be a probability") != std::string::npos);
  CHECK(parse_error("fail=0.5x").find("fail must be a probability") != std::string::npos);
  CHECK(parse_error("jitter=1") ==
        "COURIER_FAULTS='jitter=1': unknown key 'jitter' (expected reorder, delay_us, dup, fail, "
        "malform, seed)");
  CHECK(parse_error("malform=1.5").find("malform must be a probability") != std::string::npos);
  CHECK(parse_fault_spec("malform=0.25").malform == 0.25);
  CHECK_FALSE(parse_fault_spec("malform=0.25").active());  // no transport decorator needed
  CHECK(parse_error("reorder").find(
            "COURIER_FAULTS='reorder': 'reorder' is not a key=value pair") == 0);
  CHECK(parse_error("reorder=0.1,,dup=0.1").find("'' is not a key=value pair") !=
        std::string::npos);
  CHECK(parse_error("delay_us=-5").find("delay_us must be an integer in [0, 1000000] (got '-5')") !=
        std::string::npos);
  CHECK(parse_error("delay_us=2.5").find("delay_us must be an integer") != std::string::npos);
  CHECK(parse_error("seed=abc").find("seed must be a non-negative integer (got 'abc')") !=
        std::string::npos);
  CHECK(parse_error("dup=0.1,dup=0.2").find("dup is given twice") != std::string::npos);
  CHECK(parse_error("reorder=0.1").empty());
}

TEST_CASE("caps() clears ORDERED_WRITES only when posts are reordered") {
  ScriptedTransport inner;
  CHECK(FaultInjectingTransport(inner, spec_of("delay_us=10,dup=0.5,fail=0.5"), 0).caps() ==
        kScriptedCaps);
  uint32_t reordering = FaultInjectingTransport(inner, spec_of("reorder=0.1"), 0).caps();
  CHECK((reordering & COURIER_NIC_CAP_ORDERED_WRITES) == 0);
  CHECK(reordering == (kScriptedCaps & ~uint32_t{COURIER_NIC_CAP_ORDERED_WRITES}));
  FaultInjectingTransport t(inner, spec_of("reorder=0.1"), 0);
  CHECK(t.atomic_ops() == inner.atomic_ops());
  CHECK(t.atomic_native() == inner.atomic_native());
}

TEST_CASE("injected failures are transient (-EBUSY), never reach the transport, at rate p") {
  ScriptedTransport inner;
  FaultInjectingTransport t(inner, spec_of("fail=0.1,seed=1"), 0);
  const uint64_t n = 20000;
  uint64_t refused = 0;
  for (uint64_t i = 0; i < n; ++i) {
    std::string error;
    int rc = t.post_write(write_to(1), i, &error);
    if (rc == -EBUSY) {
      ++refused;
      CHECK(error.find("injected transient failure") != std::string::npos);
    } else {
      CHECK(rc == COURIER_OK);
    }
  }
  CHECK(t.stats().failed == refused);
  CHECK(inner.attempts.size() == n - refused);
  check_rate(refused, n, 0.1);
}

TEST_CASE("the same seed and calls give the same faults; another thread index others") {
  auto run = [](uint32_t thread_index) {
    FakeClock clock;
    ScriptedTransport inner;
    FaultInjectingTransport t(inner, spec_of("reorder=0.3,delay_us=50,dup=0.2,fail=0.1,seed=7"),
                              thread_index, nullptr, clock.fn());
    std::vector<int64_t> trace;  // post results, then completions as seen by the caller
    courier_nic_completion_v1 batch[8];
    for (uint64_t i = 0; i < 2000; ++i) {
      std::string error;
      trace.push_back(t.post_write(write_to(i % 3), i, &error));
      if (i % 5 == 0) inner.add_rx_imm(static_cast<uint32_t>(i));
      if (i % 4 == 0) {
        int n = t.poll(batch, 8);
        for (int k = 0; k < n; ++k) {
          trace.push_back(static_cast<int64_t>(
              batch[k].kind == COURIER_NIC_COMP_TX ? batch[k].cookie : 1'000'000 + batch[k].imm));
        }
        clock.now += 7'000;
      }
    }
    std::vector<uint64_t> accepted = inner.accepted();
    trace.insert(trace.end(), accepted.begin(), accepted.end());
    FaultStats s = t.stats();
    trace.insert(trace.end(), {static_cast<int64_t>(s.failed), static_cast<int64_t>(s.reordered),
                               static_cast<int64_t>(s.shuffled), static_cast<int64_t>(s.delayed),
                               static_cast<int64_t>(s.duplicated)});
    return trace;
  };
  CHECK(run(0) == run(0));
  CHECK(run(0) != run(1));
}

TEST_CASE("reorder hands posts to the transport out of order, and loses none") {
  FakeClock clock;
  ScriptedTransport inner;
  FaultInjectingTransport t(inner, spec_of("reorder=0.3,seed=11"), 0, nullptr, clock.fn());
  const uint64_t n = 5000;
  for (uint64_t i = 0; i < n; ++i) {
    std::string error;
    REQUIRE(t.post_write(write_to(static_cast<uint32_t>(i % 2)), i, &error) == COURIER_OK);
  }
  check_rate(t.stats().reordered, n, 0.3);
  std::vector<courier_nic_completion_v1> done = drain(t, clock);  // releases the last held
  CHECK(t.held_posts() == 0);

  std::vector<uint64_t> order = inner.accepted();
  REQUIRE(order.size() == n);
  std::vector<uint64_t> sorted = order;
  std::sort(sorted.begin(), sorted.end());
  for (uint64_t i = 0; i < n; ++i) REQUIRE(sorted[i] == i);  // each exactly once
  // Adjacent inversions: a later post reached the transport first.
  uint64_t inversions = 0;
  for (size_t i = 1; i < order.size(); ++i) inversions += order[i] < order[i - 1] ? 1 : 0;
  CHECK(inversions > n / 10);
  // A held post waits for a later post to its own peer, not to another peer.
  std::map<uint64_t, size_t> position;
  for (size_t i = 0; i < order.size(); ++i) position[order[i]] = i;
  uint64_t overtaken = 0;
  for (uint64_t i = 0; i + 2 < n; ++i) overtaken += position[i + 2] < position[i] ? 1 : 0;
  CHECK(overtaken > 0);
  CHECK(done.size() == n);
}

TEST_CASE("a post offered again after -EAGAIN draws no second fault") {
  FakeClock clock;
  ScriptedTransport inner;
  FaultInjectingTransport t(inner, spec_of("reorder=0.5,fail=0.2,seed=21"), 0, nullptr, clock.fn());
  const uint64_t n = 4000;
  for (uint64_t i = 0; i < n; ++i) {
    inner.script = {-EAGAIN};  // full once for each new request that reaches it
    std::string error;
    int rc = t.post_write(write_to(1), i, &error);
    if (rc == -EAGAIN) {
      size_t before = inner.attempts.size();
      REQUIRE(t.post_write(write_to(1), i, &error) == COURIER_OK);
      // This time it reached the transport (held posts of the peer follow it).
      REQUIRE(inner.attempts.size() > before);
      CHECK(inner.attempts[before].cookie == i);
      CHECK(inner.attempts[before].result == COURIER_OK);
    } else {
      CHECK((rc == COURIER_OK || rc == -EBUSY));
    }
  }
  // Each request was drawn once: the rates stay those configured.
  check_rate(t.stats().failed, n, 0.2);
  check_rate(t.stats().reordered, n, 0.8 * 0.5);
}

TEST_CASE("a held post goes out after a bounded time even without later posts") {
  FakeClock clock;
  ScriptedTransport inner;
  FaultInjectingTransport t(inner, spec_of("reorder=1"), 0, nullptr, clock.fn());
  std::string error;
  REQUIRE(t.post_write(write_to(4), 99, &error) == COURIER_OK);
  courier_nic_completion_v1 c[4];
  CHECK(t.poll(c, 4) == 0);
  CHECK(inner.attempts.empty());
  CHECK(t.held_posts() == 1);
  clock.now += FaultInjectingTransport::kMaxHoldNs;
  CHECK(t.poll(c, 4) == 1);  // handed over, and the scripted transport completes at once
  CHECK(c[0].cookie == 99);
  CHECK(inner.accepted() == std::vector<uint64_t>{99});
}

TEST_CASE("completion batches are shuffled with probability reorder") {
  FakeClock clock;
  ScriptedTransport inner;
  FaultInjectingTransport t(inner, spec_of("reorder=0.5,seed=3"), 0, nullptr, clock.fn());
  const int batches = 400;
  int out_of_order = 0;
  for (int b = 0; b < batches; ++b) {
    for (uint64_t k = 0; k < 8; ++k) inner.add_tx(k);
    courier_nic_completion_v1 c[8];
    REQUIRE(t.poll(c, 8) == 8);
    std::set<uint64_t> cookies;
    bool sorted = true;
    for (int k = 0; k < 8; ++k) {
      cookies.insert(c[k].cookie);
      sorted &= c[k].cookie == static_cast<uint64_t>(k);
    }
    CHECK(cookies.size() == 8);
    out_of_order += sorted ? 0 : 1;
  }
  check_rate(t.stats().shuffled, batches, 0.5);
  CHECK(out_of_order > 0);
  CHECK(static_cast<uint64_t>(out_of_order) <= t.stats().shuffled);
}

TEST_CASE("dup duplicates RX_IMM completions only, at rate p") {
  FakeClock clock;
  ScriptedTransport inner;
  FaultInjectingTransport t(inner, spec_of("dup=0.25,seed=5"), 0, nullptr, clock.fn());
  const uint32_t n = 8000;
  std::map<uint32_t, int> imm_seen;
  std::map<uint64_t, int> tx_seen;
  courier_nic_completion_v1 c[16];
  for (uint32_t i = 0; i < n; ++i) {
    inner.add_rx_imm(i);
    inner.add_tx(i);
    int got = t.poll(c, 16);
    for (int k = 0; k < got; ++k) {
      if (c[k].kind == COURIER_NIC_COMP_RX_IMM) ++imm_seen[c[k].imm];
      if (c[k].kind == COURIER_NIC_COMP_TX) ++tx_seen[c[k].cookie];
    }
  }
  for (const courier_nic_completion_v1& x : drain(t, clock)) {
    if (x.kind == COURIER_NIC_COMP_RX_IMM) ++imm_seen[x.imm];
    if (x.kind == COURIER_NIC_COMP_TX) ++tx_seen[x.cookie];
  }
  REQUIRE(imm_seen.size() == n);
  REQUIRE(tx_seen.size() == n);
  uint64_t twice = 0;
  for (const auto& [imm, count] : imm_seen) {
    CHECK((count == 1 || count == 2));
    twice += count == 2 ? 1 : 0;
  }
  for (const auto& [cookie, count] : tx_seen) CHECK(count == 1);
  CHECK(twice == t.stats().duplicated);
  check_rate(twice, n, 0.25);
}

TEST_CASE("delay holds completions back until their release time") {
  FakeClock clock;
  ScriptedTransport inner;
  FaultInjectingTransport t(inner, spec_of("delay_us=100,seed=9"), 0, nullptr, clock.fn());
  const uint32_t n = 200;
  for (uint32_t i = 0; i < n; ++i) {
    inner.add_tx(i);
    inner.add_rx_imm(i);
  }
  std::vector<courier_nic_completion_v1> c(2 * n);
  int first = t.poll(c.data(), 2 * n);  // everything arrives now; most is held back
  CHECK(first < static_cast<int>(2 * n) / 10);
  CHECK(t.stats().delayed > 2 * n * 9 / 10);
  clock.now += 50'000;
  int middle = t.poll(c.data(), 2 * n);
  CHECK(middle > 0);
  CHECK(first + middle < static_cast<int>(2 * n));
  clock.now += 50'000;  // past the bound: the rest comes out
  int last = t.poll(c.data(), 2 * n);
  CHECK(first + middle + last == static_cast<int>(2 * n));
  CHECK(t.poll(c.data(), 2 * n) == 0);
}

TEST_CASE("RetryingTransport over injected failures delivers every post exactly once") {
  FakeClock clock;
  ScriptedTransport inner;
  auto faults = std::make_unique<FaultInjectingTransport>(
      inner, spec_of("fail=0.3,reorder=0.2,delay_us=20,seed=13"), 0, nullptr, clock.fn());
  FaultInjectingTransport& injector = *faults;
  RetryPolicy policy;
  policy.retries = 64;
  RetryingTransport t(std::move(faults), policy, clock.fn());
  const uint64_t n = 3000;
  std::map<uint64_t, int> completed;
  courier_nic_completion_v1 c[16];
  for (uint64_t i = 0; i < n; ++i) {
    std::string error;
    REQUIRE(t.post_write(write_to(static_cast<uint32_t>(i % 4)), i, &error) == COURIER_OK);
    int got = t.poll(c, 16);
    for (int k = 0; k < got; ++k) {
      CHECK(c[k].status == COURIER_OK);
      ++completed[c[k].cookie];
    }
    clock.now += 1'000;
  }
  for (const courier_nic_completion_v1& x : drain(t, clock)) {
    CHECK(x.status == COURIER_OK);
    ++completed[x.cookie];
  }
  CHECK(completed.size() == n);
  for (const auto& [cookie, count] : completed) CHECK(count == 1);
  CHECK(inner.accepted().size() == n);
  CHECK(injector.stats().failed > 0);
  CHECK(t.retries_made() >= injector.stats().failed);
}

TEST_CASE("make_transport_chain inserts the fault decorator only when a fault is asked for") {
  Logger log(LogLevel::error);
  ScriptedTransport endpoint;
  Config config;
  auto plain = make_transport_chain(endpoint, config, 0, log);
  CHECK(dynamic_cast<RetryingTransport*>(plain.get()) != nullptr);
  CHECK(plain->caps() == kScriptedCaps);

  config.faults = spec_of("reorder=0.5,fail=1,seed=2");
  config.retry_count = 2;
  auto faulty = make_transport_chain(endpoint, config, 1, log);
  CHECK((faulty->caps() & COURIER_NIC_CAP_ORDERED_WRITES) == 0);
  // Every post fails transiently: retried twice, then one failed completion.
  std::string error;
  REQUIRE(faulty->post_write(write_to(1), 8, &error) == COURIER_OK);
  courier_nic_completion_v1 c[4];
  int n = 0;
  for (int i = 0; i < 1'000'000 && n == 0; ++i) n = faulty->poll(c, 4);
  REQUIRE(n == 1);
  CHECK(c[0].cookie == 8);
  CHECK(c[0].status == -EIO);
  CHECK(faulty->last_error().find("after 3 attempts") != std::string::npos);
  CHECK(endpoint.attempts.empty());
}
