// courier-info --topology (docs/topology.md): the machine (live or
// COURIER_TOPOLOGY_XML), the NIC(s), backend and proxy cores Courier picks
// for each GPU, and why; as a table or JSON, and drawn with Graphviz.
#pragma once

#include <string>

namespace courier::info {

struct TopologyOptions {
  bool json = false;
  std::string dot_path;  // also write the machine as a DOT graph into this file
  std::string svg_path;  // also draw it into this file, with Graphviz's dot
};

// Prints the topology report and writes the pictures asked for; returns the
// exit status (0, or 1 with the error on stderr when the machine or a knob
// cannot be used, or the picture cannot be made: then nothing is written).
int run_topology(const TopologyOptions& options);

}  // namespace courier::info
