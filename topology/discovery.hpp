// Finding the machine (docs/topology.md): hwloc's view of this machine, or
// of a recorded one (COURIER_TOPOLOGY_XML), reduced to topology::Machine.
#pragma once

#include <string>

#include "topology/machine.hpp"

namespace courier::topology {

// Whether this build has hwloc (COURIER_WITH_HWLOC); without it discovery
// knows only the CPUs this process may use.
bool have_hwloc();

// The machine from `xml_path` (a topology recorded with
// `lstopo --of xml --whole-io`), or this machine when empty. Throws
// courier::Error naming the file when it is missing, unreadable, malformed or
// has no I/O objects, or when this build has no hwloc and a file is given.
Machine discover(const std::string& xml_path);

}  // namespace courier::topology
