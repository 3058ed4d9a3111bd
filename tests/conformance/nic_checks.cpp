#include "nic_checks.hpp"

#include <doctest/doctest.h>

#include <cerrno>
#include <vector>

namespace courier::conformance {

void expect_completions(Session& s, uint64_t first, uint64_t count) {
  std::vector<int> seen(count, 0);
  const auto until = deadline();
  uint64_t outstanding = count;
  while (outstanding > 0 && Clock::now() < until) {
    s.pump();
    for (auto it = s.pending.begin(); it != s.pending.end();) {
      const uint64_t index = it->cookie - first;
      if (it->kind != COURIER_NIC_COMP_TX || index >= count) {
        ++it;
        continue;
      }
      CHECK_MESSAGE(it->status == 0, "cookie " << it->cookie << " failed with " << it->status
                                               << ": " << backend_error());
      CHECK_MESSAGE(seen[index] == 0, "cookie " << it->cookie << " completed twice");
      if (seen[index]++ == 0) --outstanding;
      it = s.pending.erase(it);
    }
  }
  CHECK_MESSAGE(outstanding == 0, outstanding << " of " << count << " operations never completed");
  // Nothing may complete a second time afterwards either.
  s.pump();
  for (const courier_nic_completion_v1& c : s.pending) {
    CHECK_MESSAGE((c.kind != COURIER_NIC_COMP_TX || c.cookie - first >= count),
                  "cookie " << c.cookie << " completed twice");
  }
}

void expect_rejected(Session& s, const char* what, uint64_t cookie,
                     const std::function<int(Clock::time_point)>& post) {
  const auto until = Clock::now() + 2 * kWaitLimit;
  const int rc = post(until);
  if (rc < 0) {
    CHECK_MESSAGE(rc != -ETIMEDOUT, "the endpoint stayed full");
    CHECK_FALSE(backend_error().empty());
    MESSAGE("refused at post: " << backend_error());
    return;
  }
  courier_nic_completion_v1 c{};
  REQUIRE_MESSAGE(s.take_tx(cookie, &c, until),
                  "no completion within the deadline: the " << what << " hangs");
  CHECK_MESSAGE(c.status < 0, "the " << what << " completed successfully");
  MESSAGE("error completion " << c.status << ": " << backend_error());
}

}  // namespace courier::conformance
