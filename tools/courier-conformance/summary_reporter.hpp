// The doctest reporter behind courier-conformance (selected as "courier"):
// one block per test case as it ends (PASS, FAIL or SKIP, with the case's
// messages and failed checks), then a summary of every case. A case that
// logged MESSAGE("SKIP: ...") and failed nothing is a SKIP, never a PASS.
#pragma once

namespace courier::conformance {

struct RunCounts {
  unsigned passed = 0;
  unsigned failed = 0;
  unsigned skipped = 0;
};

// What the last run counted.
const RunCounts& run_counts();

}  // namespace courier::conformance
