// RetryingTransport against a scripted transport and a hand-driven clock:
// transient failures (-EBUSY) are re-posted with growing gaps, exhausted
// retries fail exactly once with a message, and each peer keeps post order;
// once the job failed, nothing held is re-posted.
#include <doctest/doctest.h>

#include <vector>

#include "core/proxy/retrying_transport.hpp"
#include "scripted_transport.hpp"

using namespace courier;
using courier::testing::FakeClock;
using courier::testing::ScriptedTransport;
using courier::testing::write_to;

namespace {

RetryPolicy policy_with(uint32_t retries) {
  RetryPolicy policy;
  policy.retries = retries;
  return policy;
}

// Polls every `step_ns` until `want` completions came back or `polls` ran out.
std::vector<courier_nic_completion_v1> poll_until(RetryingTransport& t, FakeClock& clock,
                                                  size_t want, uint64_t step_ns,
                                                  int polls = 100000) {
  std::vector<courier_nic_completion_v1> got;
  courier_nic_completion_v1 batch[8];
  for (int i = 0; i < polls && got.size() < want; ++i) {
    int n = t.poll(batch, 8);
    REQUIRE(n >= 0);
    got.insert(got.end(), batch, batch + n);
    clock.now += step_ns;
  }
  return got;
}

}  // namespace

TEST_CASE("a transient failure is re-posted with growing gaps until it succeeds") {
  FakeClock clock;
  ScriptedTransport inner(&clock);
  inner.script = {-EBUSY, -EBUSY, -EBUSY, COURIER_OK};
  RetryingTransport t(inner, policy_with(7), clock.fn());
  std::string error;
  CHECK(t.post_write(write_to(1), 42, &error) == COURIER_OK);  // accepted, kept
  CHECK(t.held() == 1);

  // Not due yet: polling at the same instant re-posts nothing.
  courier_nic_completion_v1 c[4];
  CHECK(t.poll(c, 4) == 0);
  CHECK(inner.attempts.size() == 1);

  std::vector<courier_nic_completion_v1> got = poll_until(t, clock, 1, 500);
  REQUIRE(got.size() == 1);
  CHECK(got[0].kind == COURIER_NIC_COMP_TX);
  CHECK(got[0].cookie == 42);
  CHECK(got[0].status == COURIER_OK);
  REQUIRE(inner.attempts.size() == 4);
  CHECK(t.held() == 0);
  CHECK(t.retries_made() == 3);
  const auto& at = inner.attempt_times;
  uint64_t first_gap = at[1] - at[0];
  CHECK(first_gap >= static_cast<uint64_t>(RetryPolicy{}.first_delay.count()));
  CHECK(at[2] - at[1] > first_gap);
  CHECK(at[3] - at[2] > at[2] - at[1]);
}

TEST_CASE("the back-off doubles and stops at its cap") {
  FakeClock clock;
  ScriptedTransport inner(&clock);
  inner.after_script = -EBUSY;
  RetryPolicy policy = policy_with(12);
  policy.first_delay = std::chrono::microseconds(2);
  policy.max_delay = std::chrono::microseconds(32);
  RetryingTransport t(inner, policy, clock.fn());
  std::string error;
  REQUIRE(t.post_write(write_to(0), 1, &error) == COURIER_OK);
  std::vector<courier_nic_completion_v1> got = poll_until(t, clock, 1, 100);  // 0.1 us steps
  REQUIRE(got.size() == 1);
  REQUIRE(inner.attempt_times.size() == 13);
  std::vector<uint64_t> gaps;
  for (size_t i = 1; i < inner.attempt_times.size(); ++i) {
    gaps.push_back(inner.attempt_times[i] - inner.attempt_times[i - 1]);
  }
  // Each gap is the delay rounded up to the poll step.
  CHECK(gaps[0] >= 2000);
  CHECK(gaps[0] < 2100 + 100);
  CHECK(gaps[4] >= 32000);
  for (size_t i = 5; i < gaps.size(); ++i) CHECK(gaps[i] < 32000 + 200);
}

TEST_CASE("exhausted retries yield exactly one failed completion that says what failed") {
  FakeClock clock;
  ScriptedTransport inner(&clock);
  inner.after_script = -EBUSY;
  RetryingTransport t(inner, policy_with(3), clock.fn());
  std::string error;
  CHECK(t.post_write(write_to(2, 4096, 7168), 77, &error) == COURIER_OK);

  std::vector<courier_nic_completion_v1> got = poll_until(t, clock, 2, 10'000, 2000);
  REQUIRE(got.size() == 1);
  CHECK(got[0].kind == COURIER_NIC_COMP_TX);
  CHECK(got[0].cookie == 77);
  CHECK(got[0].status == -EIO);
  CHECK(inner.attempts.size() == 4);  // the post and 3 retries
  CHECK(t.held() == 0);
  // last_error() describes the failure the last poll returned... which was
  // followed by empty polls: it then asks the inner transport.
  CHECK(t.last_error() == "scripted: inner error");

  // Once more, reading the message right after the failing poll.
  FakeClock clock2;
  ScriptedTransport inner2(&clock2);
  inner2.after_script = -EBUSY;
  RetryingTransport t2(inner2, policy_with(3), clock2.fn());
  REQUIRE(t2.post_write(write_to(2, 4096, 7168), 78, &error) == COURIER_OK);
  courier_nic_completion_v1 c[4];
  int n = 0;
  for (int i = 0; i < 1000 && n == 0; ++i) {
    clock2.now += 10'000;
    n = t2.poll(c, 4);
  }
  REQUIRE(n == 1);
  std::string message = t2.last_error();
  CHECK(message.find("write to rank 2") != std::string::npos);
  CHECK(message.find("7168 bytes") != std::string::npos);
  CHECK(message.find("offset 4096") != std::string::npos);
  CHECK(message.find("after 4 attempts") != std::string::npos);
  CHECK(message.find("COURIER_RETRY_COUNT=3") != std::string::npos);
}

TEST_CASE("with COURIER_RETRY_COUNT=0 a transient failure fails at once") {
  FakeClock clock;
  ScriptedTransport inner(&clock);
  inner.script = {-EBUSY};
  RetryingTransport t(inner, policy_with(0), clock.fn());
  std::string error;
  CHECK(t.post_write(write_to(1), 5, &error) == COURIER_OK);
  courier_nic_completion_v1 c[4];
  REQUIRE(t.poll(c, 4) == 1);
  CHECK(c[0].cookie == 5);
  CHECK(c[0].status == -EIO);
  CHECK(t.last_error().find("after 1 attempt,") != std::string::npos);
  CHECK(inner.attempts.size() == 1);
}

TEST_CASE("later requests to the same peer queue behind a retrying one; other peers pass") {
  FakeClock clock;
  ScriptedTransport inner(&clock);
  inner.script = {-EBUSY};  // the first post, to peer 1, fails once
  RetryingTransport t(inner, policy_with(7), clock.fn());
  std::string error;
  REQUIRE(t.post_write(write_to(1, 0), 1, &error) == COURIER_OK);
  REQUIRE(t.post_write(write_to(1, 64), 2, &error) == COURIER_OK);
  REQUIRE(t.post_write(write_to(2, 0), 3, &error) == COURIER_OK);
  AtomicRequest atomic;
  atomic.peer = 1;
  REQUIRE(t.post_atomic(atomic, 4, &error) == COURIER_OK);
  REQUIRE(t.post_write(write_to(2, 64), 5, &error) == COURIER_OK);

  // Peer 2 went straight through; peer 1's later requests wait.
  CHECK(inner.accepted() == std::vector<uint64_t>{3, 5});
  CHECK(t.held() == 3);

  std::vector<courier_nic_completion_v1> got = poll_until(t, clock, 5, 1000);
  CHECK(got.size() == 5);
  CHECK(inner.accepted() == std::vector<uint64_t>{3, 5, 1, 2, 4});
  CHECK(inner.attempts.back().atomic);
  CHECK(t.held() == 0);
}

TEST_CASE("a full transport (-EAGAIN) goes back to the proxy; a queued request waits for room") {
  FakeClock clock;
  ScriptedTransport inner(&clock);
  inner.script = {-EAGAIN};
  RetryingTransport t(inner, policy_with(7), clock.fn());
  std::string error;
  CHECK(t.post_write(write_to(1), 1, &error) == -EAGAIN);
  CHECK(t.held() == 0);

  // Behind a retrying request, -EAGAIN on its turn is not a failed attempt.
  inner.script = {-EBUSY, COURIER_OK, -EAGAIN, -EAGAIN, COURIER_OK};
  REQUIRE(t.post_write(write_to(1, 0), 10, &error) == COURIER_OK);
  REQUIRE(t.post_write(write_to(1, 64), 11, &error) == COURIER_OK);
  std::vector<courier_nic_completion_v1> got = poll_until(t, clock, 2, 1000);
  CHECK(got.size() == 2);
  CHECK(inner.accepted() == std::vector<uint64_t>{10, 11});
  CHECK(t.retries_made() == 1);
}

TEST_CASE("a layer's own post refused for room is kept and posted in the peer's order") {
  FakeClock clock;
  ScriptedTransport inner(&clock);
  RetryPolicy policy = policy_with(0);  // no retries: keeping is not retrying
  policy.max_held = 1;
  RetryingTransport t(inner, policy, clock.fn());
  std::string error;
  WriteRequest answer = write_to(1, 0);
  answer.keep_when_full = true;
  // Full: kept (no attempt used), and the peer's later posts queue behind
  // it (a plain one only while there is room to keep it).
  inner.script = {-EAGAIN};
  CHECK(t.post_write(answer, 20, &error) == COURIER_OK);
  CHECK(t.held() == 1);
  CHECK(t.post_write(write_to(1, 64), 21, &error) == -EAGAIN);    // max_held: the caller keeps it
  CHECK(t.post_write(answer, 22, &error) == COURIER_OK);          // kept beyond max_held
  CHECK(t.post_write(write_to(2, 0), 30, &error) == COURIER_OK);  // another peer passes
  CHECK(t.held() == 2);
  inner.script = {-EAGAIN, -EAGAIN};  // still full twice, then room
  std::vector<courier_nic_completion_v1> got = poll_until(t, clock, 3, 1000);
  CHECK(got.size() == 3);
  for (const courier_nic_completion_v1& c : got) CHECK(c.status == COURIER_OK);
  CHECK(inner.accepted() == std::vector<uint64_t>{30, 20, 22});
  CHECK(t.retries_made() == 0);
  CHECK(t.held() == 0);
  // A plain post refused for room still goes back to its caller.
  inner.script = {-EAGAIN};
  CHECK(t.post_write(write_to(1, 128), 23, &error) == -EAGAIN);
}

TEST_CASE("a hard error on a re-post fails the request with that status") {
  FakeClock clock;
  ScriptedTransport inner(&clock);
  inner.script = {-EBUSY, -EINVAL};
  RetryingTransport t(inner, policy_with(7), clock.fn());
  std::string error;
  REQUIRE(t.post_write(write_to(3), 9, &error) == COURIER_OK);
  courier_nic_completion_v1 c[4];
  int n = 0;
  for (int i = 0; i < 1000 && n == 0; ++i) {
    clock.now += 1000;
    n = t.poll(c, 4);
  }
  REQUIRE(n == 1);
  CHECK(c[0].cookie == 9);
  CHECK(c[0].status == -EINVAL);
  CHECK(t.last_error().find("refused with -22") != std::string::npos);
}

TEST_CASE("other errors and capabilities pass through") {
  ScriptedTransport inner;
  inner.script = {-EINVAL};
  RetryingTransport t(inner, RetryPolicy{});
  std::string error;
  CHECK(t.post_write(write_to(1), 1, &error) == -EINVAL);
  CHECK(error == "scripted: refused with -22");
  CHECK(t.caps() == inner.caps());
  CHECK(t.atomic_ops() == inner.atomic_ops());
  CHECK(t.atomic_native() == inner.atomic_native());
  // Completions of incoming data come through untouched.
  inner.add_rx_imm(1234);
  courier_nic_completion_v1 c[4];
  REQUIRE(t.poll(c, 4) == 1);
  CHECK(c[0].kind == COURIER_NIC_COMP_RX_IMM);
  CHECK(c[0].imm == 1234);
}

TEST_CASE("once the job failed, held requests are cancelled instead of re-posted") {
  // A post to a dead rank may never return (libfabric shm spins on a lock
  // the dead rank held): after the failure nothing is handed on any more.
  FakeClock clock;
  ScriptedTransport inner(&clock);
  inner.script = {-EBUSY, -EBUSY};
  JobFailure failure;
  RetryingTransport t(inner, policy_with(7), clock.fn());
  t.watch_failure(&failure);
  std::string error;
  CHECK(t.post_write(write_to(2), 7, &error) == COURIER_OK);  // kept for a retry
  CHECK(t.post_write(write_to(2), 8, &error) == COURIER_OK);  // queued behind it
  CHECK(t.held() == 2);
  REQUIRE(inner.attempts.size() == 1);

  REQUIRE(failure.trip(2, "rank 2 is gone"));
  clock.now += 1'000'000'000;  // long past the retry's due time
  std::vector<courier_nic_completion_v1> got = poll_until(t, clock, 2, 1000, 10);
  REQUIRE(got.size() == 2);
  CHECK(got[0].cookie == 7);
  CHECK(got[1].cookie == 8);
  for (const courier_nic_completion_v1& c : got) {
    CHECK(c.kind == COURIER_NIC_COMP_TX);
    CHECK(c.status == kCancelledByFailure);
  }
  // The last poll returned cookie 8: its message says why it was dropped.
  CHECK(t.last_error().find("not re-posted") != std::string::npos);
  CHECK(t.last_error().find("rank 2 is gone") != std::string::npos);
  CHECK(inner.attempts.size() == 1);  // neither was posted again
  CHECK(t.held() == 0);
}
