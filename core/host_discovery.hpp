// Which ranks share a host (docs/semantics.md, "BARRIER"): every rank's host
// key (hostname and boot id, or simulated hosts with COURIER_RANKS_PER_HOST)
// and the job id that names the hosts' shared-memory segments, all-gathered
// once (collective).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/config.hpp"
#include "courier/bootstrap.hpp"

namespace courier {

struct HostMap {
  std::vector<std::string> keys;  // per rank; equal keys share a host
  uint64_t job_id = 0;            // rank 0's random id: unique per job
  std::string this_host;          // this rank's host, as the log names it
  std::string how;                // how hosts were told apart, for the log
};

HostMap discover_hosts(Bootstrap& bootstrap, const Config& config);

// The shared-memory segment of the host whose leader is `host_leader`.
std::string host_segment_name(const HostMap& hosts, uint32_t host_leader);

}  // namespace courier
