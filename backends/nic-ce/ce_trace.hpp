// COURIER_CE_TRACE: what an endpoint prints when it closes, for tuning: how
// many copies carried its writes, a timeline of its last launches (when
// launched, when poll saw them complete, writes and copies in each, bytes,
// when the first and the last of those writes were posted, when submitting
// began) and the mean time inside post_write and inside each pass over a
// peer's operations.
#pragma once

#include <cstdint>
#include <vector>

#include "ce_clock.hpp"

namespace courier::nic_ce {

// Calls timed, and their time summed.
struct TimeSum {
  uint64_t ns = 0;
  uint64_t calls = 0;
};

// Adds the time of the enclosing scope to `sum` when `on`.
class TraceTimer {
 public:
  TraceTimer(bool on, TimeSum& sum) : sum_(on ? &sum : nullptr) {
    if (sum_ == nullptr) return;
    ++sum_->calls;
    start_ = monotonic_ns();
  }
  ~TraceTimer() {
    if (sum_ != nullptr) sum_->ns += monotonic_ns() - start_;
  }
  TraceTimer(const TraceTimer&) = delete;
  TraceTimer& operator=(const TraceTimer&) = delete;

 private:
  TimeSum* sum_;
  uint64_t start_ = 0;
};

class LaunchTrace {
 public:
  // A launch started now: `writes` posted writes in `copies` copies (0 for
  // an atomic). Returns its entry, for completed().
  int64_t launched(uint32_t writes, uint32_t copies, uint64_t bytes, uint64_t first_posted_ns,
                   uint64_t last_posted_ns, uint64_t submit_ns);
  // Poll saw the launch of `entry` complete.
  void completed(int64_t entry);
  // To stderr; `batching`: COURIER_CE_BATCH.
  void print(bool batching) const;

  TimeSum& posting() { return posting_; }      // inside post_write
  TimeSum& advancing() { return advancing_; }  // inside a pass over a peer's operations

 private:
  struct Entry {
    uint64_t launched_ns, completed_ns;
    uint32_t writes, copies;
    uint64_t bytes;
    uint64_t first_posted_ns, last_posted_ns;  // when its writes were posted
    uint64_t submit_ns;                        // when submitting it began
  };
  std::vector<Entry> ring_;  // the last launches, sized on first use
  uint64_t next_ = 0, writes_ = 0, copies_ = 0, launches_ = 0;
  TimeSum posting_, advancing_;
};

}  // namespace courier::nic_ce
