// doctest checks the conformance cases share.
#pragma once

#include <cstdint>
#include <functional>

#include "nic_harness.hpp"

namespace courier::conformance {

// Waits for the TX completions of cookies [first, first + count): each once,
// each successful, and none again afterwards. Other completions stay pending.
void expect_completions(Session& s, uint64_t first, uint64_t count);

// An operation the target must reject (`what`: "write", "atomic"). `post`
// posts it, retrying while the endpoint is full until the deadline given.
// It has to fail at post time or in the completion for `cookie`. The
// deadline is twice the usual one: a backend may only learn of the
// rejection from its own write timeout (see docs/conformance.md).
void expect_rejected(Session& s, const char* what, uint64_t cookie,
                     const std::function<int(Clock::time_point)>& post);

}  // namespace courier::conformance
