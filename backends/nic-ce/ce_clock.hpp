// The one clock of nic-ce: how long copies linger (COURIER_CE_LINGER_US) and
// the times COURIER_CE_TRACE prints.
#pragma once

#include <chrono>
#include <cstdint>

namespace courier::nic_ce {

inline uint64_t monotonic_ns() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

}  // namespace courier::nic_ce
