// The check harness of Courier's multi-rank test programs (ep_check,
// courier-semantics-check). A case collects its failed checks in Checks and
// ends with an Outcome; CaseLog prints one "[PASS|FAIL|SKIP] <case>: <detail>"
// line per case and counts the verdicts for the program's own summary line,
// which the ctests match.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace courier::test {

enum class Verdict { pass, fail, skip };

struct Outcome {
  Verdict verdict = Verdict::pass;
  std::string detail;
};

// Collects the failed checks of one case; the first few are kept as text.
class Checks {
 public:
  void expect(bool ok, const std::string& what);
  bool ok() const { return failed_ == 0; }
  // Passes with `pass_detail`, or fails with "N failed check(s): <first
  // few>".
  Outcome outcome(const std::string& pass_detail) const;

 private:
  uint64_t failed_ = 0;
  std::string messages_;
};

// What expect_error wants thrown: a plain courier::Error (a local call), or
// a courier::CallRefused (a collective call every rank refused together).
enum class ErrorKind { local, refusal };

// Runs `call`, which must throw the `kind` of courier::Error with `needle`
// in its text; `what` names the call in the failed checks.
void expect_error(Checks& checks, const std::string& what, const std::string& needle,
                  const std::function<void()>& call, ErrorKind kind = ErrorKind::local);

// Runs a case's body; an exception fails the case with its text (so that
// the next case still runs).
Outcome run_catching(const std::function<Outcome()>& body);

// Prints each case's line as it ends (flushed, so that a hung peer leaves
// the cases done so far in the log) and counts the verdicts.
class CaseLog {
 public:
  void record(const std::string& name, const Outcome& outcome);
  int passed() const { return passed_; }
  int failed() const { return failed_; }
  int skipped() const { return skipped_; }

 private:
  int passed_ = 0, failed_ = 0, skipped_ = 0;
};

}  // namespace courier::test
