// Discovery in a build without hwloc (COURIER_WITH_HWLOC=OFF): the simple
// policy of docs/topology.md. Courier knows only the CPUs this process may
// use, as one NUMA node; no GPU or NIC is paired by distance.
#include <fmt/format.h>
#include <sched.h>

#include "courier/error.hpp"
#include "topology/discovery.hpp"

namespace courier::topology {

bool have_hwloc() { return false; }

Machine discover(const std::string& xml_path) {
  if (!xml_path.empty()) {
    throw Error(fmt::format(
        "COURIER_TOPOLOGY_XML={}: this Courier was built without hwloc (COURIER_WITH_HWLOC=OFF), "
        "so it cannot read recorded topologies",
        xml_path));
  }
  Machine m;
  m.source = "this machine (built without hwloc: CPUs only)";
  m.from_hwloc = false;
  m.tree.push_back({TreeNode::Kind::machine, -1, "Machine", 0});
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    for (int i = 0; i < CPU_SETSIZE; ++i) {
      if (CPU_ISSET(i, &set)) m.allowed_cpus.push_back(i);
    }
  }
  m.numa.push_back({0, -1, m.allowed_cpus});
  return m;
}

}  // namespace courier::topology
