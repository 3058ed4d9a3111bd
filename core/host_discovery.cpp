#include "core/host_discovery.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <random>
#include <span>

namespace courier {

HostMap discover_hosts(Bootstrap& bootstrap, const Config& config) {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  std::string boot_id;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot_id;
  struct Mine {
    char key[240];
    uint64_t job_id;
  } mine{};
  HostMap map;
  std::string key = std::string(host) + "/" + boot_id;
  map.this_host = host;
  map.how = "by hostname and boot id";
  if (config.ranks_per_host != 0) {  // simulated hosts: blocks of consecutive ranks
    key = fmt::format("simulated-host-{}", bootstrap.rank() / config.ranks_per_host);
    map.this_host = key;
    map.how = fmt::format("COURIER_RANKS_PER_HOST={}", config.ranks_per_host);
  }
  std::memcpy(mine.key, key.data(), std::min(key.size(), sizeof mine.key - 1));
  mine.job_id = std::random_device{}() * 0x100000001ull ^ static_cast<uint64_t>(::getpid());
  std::vector<std::byte> all =
      bootstrap.allgather(std::as_bytes(std::span<const Mine, 1>(&mine, 1)));
  for (int r = 0; r < bootstrap.size(); ++r) {
    Mine theirs;
    std::memcpy(&theirs, all.data() + r * sizeof(Mine), sizeof(Mine));
    theirs.key[sizeof theirs.key - 1] = '\0';
    map.keys.emplace_back(theirs.key);
    if (r == 0) map.job_id = theirs.job_id;
  }
  return map;
}

std::string host_segment_name(const HostMap& hosts, uint32_t host_leader) {
  return fmt::format("/courier-{:016x}-{}", hosts.job_id, host_leader);
}

}  // namespace courier
