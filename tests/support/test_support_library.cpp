// The shared test support library itself: the checks its users' verdicts
// rest on (ep_check, courier-semantics-check) and bfloat16 rounding.
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "courier/error.hpp"
#include "tests/support/bfloat16.hpp"
#include "tests/support/check_harness.hpp"

namespace courier::test {

TEST_CASE("Checks: passes without failed checks, else counts them and keeps the first three") {
  Checks none;
  none.expect(true, "never shown");
  Outcome pass = none.outcome("all right");
  CHECK(pass.verdict == Verdict::pass);
  CHECK(pass.detail == "all right");

  Checks four;
  four.expect(false, "a");
  four.expect(true, "not shown");
  four.expect(false, "b");
  four.expect(false, "c");
  four.expect(false, "d");
  CHECK_FALSE(four.ok());
  Outcome fail = four.outcome("all right");
  CHECK(fail.verdict == Verdict::fail);
  CHECK(fail.detail == "4 failed check(s): a; b; c");
}

TEST_CASE("expect_error: the call must throw the kind of courier::Error asked for, with the text") {
  auto failed = [](ErrorKind kind, const std::function<void()>& call) {
    Checks c;
    expect_error(c, "the call", "bad rank", call, kind);
    return c.outcome("").detail;
  };
  const auto local = [] { throw courier::Error("bad rank 7"); };
  const auto refused = [] { throw courier::CallRefused("rank 1: bad rank 7"); };
  CHECK(failed(ErrorKind::local, local).empty());
  CHECK(failed(ErrorKind::refusal, refused).empty());
  CHECK(failed(ErrorKind::local, [] {}) == "1 failed check(s): the call: no error");
  CHECK(failed(ErrorKind::local, [] { throw courier::Error("bad window"); }) ==
        "1 failed check(s): the call: the error 'bad window' lacks 'bad rank'");
  CHECK(failed(ErrorKind::local, refused) ==
        "1 failed check(s): the call: a courier::CallRefused from a local call");
  CHECK(failed(ErrorKind::refusal, local) ==
        "1 failed check(s): the call: not a courier::CallRefused");
}

TEST_CASE("run_catching: an exception fails the case with its text") {
  Outcome o = run_catching([]() -> Outcome { throw std::runtime_error("peer 2 is gone"); });
  CHECK(o.verdict == Verdict::fail);
  CHECK(o.detail == "exception: peer 2 is gone");
  o = run_catching([] { return Outcome{Verdict::skip, "not offered"}; });
  CHECK(o.verdict == Verdict::skip);
  CHECK(o.detail == "not offered");
}

TEST_CASE("CaseLog counts each verdict") {
  CaseLog log;
  log.record("one", {Verdict::pass, "ok"});
  log.record("two", {Verdict::fail, "1 failed check(s): x"});
  log.record("three", {Verdict::skip, "not offered"});
  log.record("four", {Verdict::pass, "ok"});
  CHECK(log.passed() == 2);
  CHECK(log.failed() == 1);
  CHECK(log.skipped() == 1);
}

TEST_CASE("bfloat16: round to nearest, ties to even; NaN stays NaN") {
  CHECK(to_bf16(1.0f) == 0x3F80);
  CHECK(to_bf16(-2.0f) == 0xC000);
  CHECK(from_bf16(0x3F80) == 1.0f);
  CHECK(round_bf16(-37.0f) == -37.0f);  // small integers are exact
  // 1 + 2^-8 lies halfway between 1 and 1 + 2^-7: to even (1).
  CHECK(round_bf16(1.0f + 0x1p-8f) == 1.0f);
  // 1 + 3 * 2^-8 lies halfway between 1 + 2^-7 and 1 + 2^-6: to even.
  CHECK(round_bf16(1.0f + 3 * 0x1p-8f) == 1.0f + 0x1p-6f);
  // Just above halfway: up, where truncation would go down.
  CHECK(round_bf16(1.0f + 0x1p-8f + 0x1p-20f) == 1.0f + 0x1p-7f);
  CHECK(std::isinf(round_bf16(std::numeric_limits<float>::infinity())));
  CHECK(std::isnan(round_bf16(std::numeric_limits<float>::quiet_NaN())));
  CHECK(std::isnan(from_bf16(to_bf16(std::bit_cast<float>(0x7F800001u)))));  // signalling
}

}  // namespace courier::test
