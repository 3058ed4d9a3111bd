// courier-info --topology --dot FILE: the machine as a Graphviz graph.
// Packages, host bridges and PCIe switches are nested clusters, GPUs and
// NICs their nodes, and each GPU is joined to the NIC(s) Courier pairs it
// with by an edge in the GPU's colour, labelled with the PCIe distance.
#pragma once

#include <string>

#include "topology/machine.hpp"
#include "topology/pairing.hpp"

namespace courier::info {

// A complete DOT document (UTF-8), ready for `dot -Tsvg`.
std::string render_dot(const topology::Machine& m, const topology::Plan& plan);

}  // namespace courier::info
