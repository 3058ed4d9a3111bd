// The benchmarks' clock: monotonic nanoseconds (std::chrono::steady_clock).
#pragma once

#include <chrono>
#include <cstdint>

namespace courier::bench {

inline uint64_t steady_now_ns() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

}  // namespace courier::bench
