#include "tests/support/check_harness.hpp"

#include <fmt/format.h>

#include <cstdio>
#include <exception>

#include "courier/error.hpp"

namespace courier::test {

void Checks::expect(bool ok, const std::string& what) {
  if (ok) return;
  if (failed_ < 3) messages_ += (failed_ == 0 ? "" : "; ") + what;
  ++failed_;
}

Outcome Checks::outcome(const std::string& pass_detail) const {
  if (ok()) return {Verdict::pass, pass_detail};
  return {Verdict::fail, fmt::format("{} failed check(s): {}", failed_, messages_)};
}

void expect_error(Checks& checks, const std::string& what, const std::string& needle,
                  const std::function<void()>& call, ErrorKind kind) {
  try {
    call();
    checks.expect(false, what + ": no error");
  } catch (const courier::Error& e) {
    checks.expect(std::string(e.what()).find(needle) != std::string::npos,
                  what + ": the error '" + e.what() + "' lacks '" + needle + "'");
    const bool refused = dynamic_cast<const courier::CallRefused*>(&e) != nullptr;
    const bool want_refused = kind == ErrorKind::refusal;
    checks.expect(refused == want_refused,
                  what + (want_refused ? ": not a courier::CallRefused"
                                       : ": a courier::CallRefused from a local call"));
  }
}

Outcome run_catching(const std::function<Outcome()>& body) {
  try {
    return body();
  } catch (const std::exception& e) {
    return {Verdict::fail, std::string("exception: ") + e.what()};
  }
}

void CaseLog::record(const std::string& name, const Outcome& outcome) {
  const char* tag = "PASS";
  switch (outcome.verdict) {
    case Verdict::pass:
      ++passed_;
      break;
    case Verdict::fail:
      tag = "FAIL";
      ++failed_;
      break;
    case Verdict::skip:
      tag = "SKIP";
      ++skipped_;
      break;
  }
  fmt::print("[{}] {}: {}\n", tag, name, outcome.detail);
  std::fflush(stdout);
}

}  // namespace courier::test
