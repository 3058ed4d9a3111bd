// courier-info --topology (docs/topology.md): the machine (live or
// COURIER_TOPOLOGY_XML), the NIC(s), backend and proxy cores Courier picks
// for each GPU, and why; as a table, JSON, or an SVG drawing.
#pragma once

#include <string>

namespace courier::info {

struct TopologyOptions {
  bool json = false;
  std::string svg_path;  // also draw the machine into this file
};

// Prints the topology report; returns the exit status (0, or 1 with the
// error on stderr when the machine or a knob cannot be used).
int run_topology(const TopologyOptions& options);

}  // namespace courier::info
