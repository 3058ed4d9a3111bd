#include "summary_reporter.hpp"

#include <doctest/doctest.h>

#include <cstdio>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

namespace courier::conformance {
namespace {

constexpr const char* kSkipPrefix = "SKIP: ";

struct CaseResult {
  std::string name;
  bool failed = false;
  std::vector<std::string> skips;  // reasons, without the prefix
  std::vector<std::string> lines;  // messages and failures, in order
  double seconds = 0;

  const char* status() const {
    if (failed) return "FAIL";
    return skips.empty() ? "PASS" : "SKIP";
  }
};

RunCounts counts;

// The INFO / *_MESSAGE texts in scope at a failure, one per line.
std::string active_contexts() {
  std::string text;
  const int n = doctest::IReporter::get_num_active_contexts();
  const doctest::IContextScope* const* contexts = doctest::IReporter::get_active_contexts();
  for (int i = 0; i < n; ++i) {
    std::ostringstream context;
    contexts[i]->stringify(&context);
    text += "\n      " + context.str();
  }
  return text;
}

std::string where(const char* file, int line) {
  std::string path = file ? file : "?";
  // The file name is enough to find the check; the build path is noise.
  if (const size_t slash = path.rfind('/'); slash != std::string::npos) {
    path = path.substr(slash + 1);
  }
  return path + ":" + std::to_string(line);
}

class SummaryReporter : public doctest::IReporter {
 public:
  explicit SummaryReporter(const doctest::ContextOptions& options)
      : options_(options), out_(*options.cout) {}

  // --list: one case name a line, nothing else.
  void report_query(const doctest::QueryData& query) override {
    if (!options_.list_test_cases) return;
    for (unsigned i = 0; i < query.num_data; ++i) out_ << query.data[i]->m_name << "\n";
  }

  void test_run_start() override { counts = {}; }

  void test_run_end(const doctest::TestRunStats&) override {
    if (results_.empty()) return;
    out_ << "\nSummary:\n";
    for (const CaseResult& result : results_) {
      out_ << "  " << result.status() << "  " << result.name << "\n";
      if (!result.failed) {
        for (const std::string& skip : result.skips) out_ << "          skipped: " << skip << "\n";
      }
    }
    out_ << counts.passed << " passed, " << counts.failed << " failed, " << counts.skipped
         << " skipped\n";
    out_.flush();
  }

  void test_case_start(const doctest::TestCaseData& test) override {
    current_ = CaseResult{};
    current_.name = test.m_name;
  }
  void test_case_reenter(const doctest::TestCaseData&) override {}

  void test_case_end(const doctest::CurrentTestCaseStats& stats) override {
    current_.failed = current_.failed || !stats.testCaseSuccess;
    current_.seconds = stats.seconds;
    if (current_.failed) {
      ++counts.failed;
    } else if (!current_.skips.empty()) {
      ++counts.skipped;
    } else {
      ++counts.passed;
    }
    char seconds[32];
    std::snprintf(seconds, sizeof seconds, "%.1f s", current_.seconds);
    out_ << current_.status() << "  " << current_.name << "  (" << seconds << ")\n";
    for (const std::string& line : current_.lines) out_ << "    " << line << "\n";
    out_.flush();
    results_.push_back(std::move(current_));
  }

  void test_case_exception(const doctest::TestCaseException& exception) override {
    current_.failed = true;
    std::string text = std::string(exception.is_crash ? "crashed: " : "exception: ") +
                       exception.error_string.c_str();
    const int n = doctest::IReporter::get_num_stringified_contexts();
    const doctest::String* contexts = doctest::IReporter::get_stringified_contexts();
    for (int i = n - 1; i >= 0; --i) text += std::string("\n      ") + contexts[i].c_str();
    current_.lines.push_back(text);
  }

  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}

  void log_assert(const doctest::AssertData& check) override {
    if (!check.m_failed) return;
    std::string text = "FAILED " + where(check.m_file, check.m_line) + ": " + check.m_expr;
    if (check.m_threw) {
      text += std::string("  threw: ") + check.m_exception.c_str();
    } else if (check.m_decomp.size() > 0 && check.m_decomp != check.m_expr) {
      text += std::string("  values: ") + check.m_decomp.c_str();
    }
    current_.lines.push_back(text + active_contexts());
  }

  void log_message(const doctest::MessageData& message) override {
    const std::string text = message.m_string.c_str();
    if (message.m_severity & doctest::assertType::is_warn) {
      // MESSAGE(): information about the backend, or a skip.
      if (text.rfind(kSkipPrefix, 0) == 0) current_.skips.push_back(text.substr(6));
      current_.lines.push_back(text);
      return;
    }
    // FAIL_CHECK / FAIL: a failure with a message.
    current_.lines.push_back("FAILED " + where(message.m_file, message.m_line) + ": " + text +
                             active_contexts());
  }

  void test_case_skipped(const doctest::TestCaseData&) override {}

 private:
  const doctest::ContextOptions& options_;
  std::ostream& out_;
  CaseResult current_;
  std::vector<CaseResult> results_;
};

}  // namespace

const RunCounts& run_counts() { return counts; }

DOCTEST_REGISTER_REPORTER("courier", 0, SummaryReporter);

}  // namespace courier::conformance
