#include "core/job_shape.hpp"

#include <cstdio>
#include <cstring>
#include <span>
#include <vector>

#include "core/check.hpp"

namespace courier {

namespace {

struct Wire {  // JobShape as all-gathered
  uint32_t proxy_threads;
  uint32_t ep_name_bytes;
  uint8_t atomics[2];  // AtomicStrategyKind of ADD_U64, ADD_U32
  char nic_backend[32];
};

}  // namespace

void check_job_shape(Bootstrap& bootstrap, const JobShape& shape) {
  Wire mine{};
  mine.proxy_threads = shape.proxy_threads;
  mine.ep_name_bytes = shape.ep_name_bytes;
  mine.atomics[0] = static_cast<uint8_t>(shape.atomics.add_u64);
  mine.atomics[1] = static_cast<uint8_t>(shape.atomics.add_u32);
  std::snprintf(mine.nic_backend, sizeof mine.nic_backend, "%s", shape.nic_backend.c_str());
  std::vector<std::byte> all =
      bootstrap.allgather(std::as_bytes(std::span<const Wire, 1>(&mine, 1)));
  const int me = bootstrap.rank();
  for (int r = 0; r < bootstrap.size(); ++r) {
    Wire theirs;
    std::memcpy(&theirs, all.data() + r * sizeof(Wire), sizeof(Wire));
    if (std::strncmp(theirs.nic_backend, mine.nic_backend, sizeof mine.nic_backend) != 0) {
      fail(
          "rank {} uses NIC backend '{}' but rank {} uses '{}': every rank must use the same "
          "(set COURIER_NIC_BACKEND)",
          r, theirs.nic_backend, me, mine.nic_backend);
    }
    if (theirs.proxy_threads != mine.proxy_threads) {
      fail(
          "rank {} runs COURIER_PROXY_THREADS={} but rank {} runs {}: the value must be equal "
          "on every rank (proxy thread i talks to thread i of each peer)",
          r, theirs.proxy_threads, me, mine.proxy_threads);
    }
    if (std::memcmp(theirs.atomics, mine.atomics, sizeof mine.atomics) != 0) {
      fail(
          "rank {} carries out ADD_U64/ADD_U32 by {}/{} but rank {} by {}/{}: set the same "
          "COURIER_ATOMICS on every rank",
          r, to_string(static_cast<AtomicStrategyKind>(theirs.atomics[0])),
          to_string(static_cast<AtomicStrategyKind>(theirs.atomics[1])), me,
          to_string(shape.atomics.add_u64), to_string(shape.atomics.add_u32));
    }
    if (theirs.ep_name_bytes != mine.ep_name_bytes) {
      fail("rank {} has {}-byte endpoint names but rank {} has {}: mismatched NIC backends", r,
           theirs.ep_name_bytes, me, mine.ep_name_bytes);
    }
  }
}

}  // namespace courier
