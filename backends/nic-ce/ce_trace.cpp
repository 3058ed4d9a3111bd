#include "ce_trace.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdio>

namespace courier::nic_ce {

namespace {
constexpr size_t kTraceEntries = 256;
}  // namespace

int64_t LaunchTrace::launched(uint32_t writes, uint32_t copies, uint64_t bytes,
                              uint64_t first_posted_ns, uint64_t last_posted_ns,
                              uint64_t submit_ns) {
  if (ring_.size() < kTraceEntries) ring_.resize(kTraceEntries);
  const uint64_t slot = next_++ % kTraceEntries;
  ring_[slot] = Entry{.launched_ns = monotonic_ns(),
                      .completed_ns = 0,
                      .writes = writes,
                      .copies = copies,
                      .bytes = bytes,
                      .first_posted_ns = first_posted_ns,
                      .last_posted_ns = last_posted_ns,
                      .submit_ns = submit_ns};
  writes_ += writes;
  copies_ += copies;
  ++launches_;
  return static_cast<int64_t>(slot);
}

void LaunchTrace::completed(int64_t entry) {
  if (entry < 0) return;
  ring_[static_cast<size_t>(entry)].completed_ns = monotonic_ns();
}

void LaunchTrace::print(bool batching) const {
  std::fprintf(stderr,
               "nic-ce trace: %llu writes in %llu copies, %llu launches (batching %s); the last "
               "launches, us since the first shown: launched, completed (seen by poll), writes, "
               "copies, KiB, first and last write posted, submitting began\n",
               static_cast<unsigned long long>(writes_), static_cast<unsigned long long>(copies_),
               static_cast<unsigned long long>(launches_), batching ? "on" : "off");
  std::fprintf(
      stderr,
      "  post_write: %llu calls, %.0f ns each; advancing a peer: %llu calls, %.0f ns each\n",
      static_cast<unsigned long long>(posting_.calls),
      posting_.calls > 0 ? static_cast<double>(posting_.ns) / posting_.calls : 0.0,
      static_cast<unsigned long long>(advancing_.calls),
      advancing_.calls > 0 ? static_cast<double>(advancing_.ns) / advancing_.calls : 0.0);
  const uint64_t n = std::min<uint64_t>(next_, kTraceEntries);
  const uint64_t first = next_ - n;
  const uint64_t t0 = n > 0 ? ring_[first % kTraceEntries].launched_ns : 0;
  for (uint64_t i = first; i < next_; ++i) {
    const Entry& e = ring_[i % kTraceEntries];
    auto since = [&](uint64_t ns) { return ns != 0 ? (static_cast<double>(ns) - t0) / 1e3 : -1.0; };
    std::fprintf(stderr, "  %10.1f %10.1f %5u %5u %10.1f %10.1f %10.1f %10.1f\n",
                 since(e.launched_ns), since(e.completed_ns), e.writes, e.copies, e.bytes / 1024.0,
                 since(e.first_posted_ns), since(e.last_posted_ns), since(e.submit_ns));
  }
}

}  // namespace courier::nic_ce
