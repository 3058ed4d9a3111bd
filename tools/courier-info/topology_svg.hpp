// courier-info --topology --svg FILE: the machine drawn as nested boxes
// (packages, host bridges, PCIe switches, GPUs, NICs), with each GPU and
// the NIC(s) Courier pairs it with highlighted in the same colour.
#pragma once

#include <string>

#include "topology/machine.hpp"
#include "topology/pairing.hpp"

namespace courier::info {

// A complete, standalone SVG document.
std::string render_svg(const topology::Machine& m, const topology::Plan& plan);

}  // namespace courier::info
