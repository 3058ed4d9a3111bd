// What Courier does with a machine (docs/topology.md): the NIC(s) each GPU
// uses, the NIC backend (the one claiming that NIC, topology/claims.hpp),
// and the cores of each GPU's proxy threads; every choice explained, and
// overridable.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "topology/claims.hpp"
#include "topology/machine.hpp"

namespace courier::topology {

// COURIER_NIC_SELECTION.
enum class NicSelection { automatic, nearest, numa, round_robin };
const char* to_string(NicSelection selection);

struct Policy {
  NicSelection selection = NicSelection::automatic;
  std::vector<std::string> nics;    // COURIER_NICS: only these, in this order (empty: all)
  std::string nic_backend;          // COURIER_NIC_BACKEND as given ("" : choose)
  std::vector<int32_t> proxy_cpus;  // COURIER_PROXY_CPUS (empty: choose)
};

struct GpuPlan {
  int gpu = -1;                 // index into Machine::gpus
  std::vector<int> nics;        // indices into Machine::nics
  std::vector<int> distances;   // PCIe hops to each
  std::string backend;          // the NIC backend for this GPU's traffic ("": none claims it)
  std::string backend_why;      // which claim chose it
  bool backend_forced = false;  // COURIER_NIC_BACKEND said so
  bool nics_forced = false;     // COURIER_NICS limited the choice
  std::vector<int32_t> proxy_cpus;
  bool cpus_forced = false;  // COURIER_PROXY_CPUS said so
  std::string note;          // why, when the choice is not the obvious one
};

struct Plan {
  NicSelection selection = NicSelection::automatic;
  std::vector<GpuPlan> gpus;
  std::string backend;  // for a process without a GPU (the first NIC's), and overall
  std::string backend_why;
  bool backend_forced = false;
  std::vector<NicBackend> nic_backends;  // per Machine::nics: the backend claiming it
  std::vector<std::string> notes;
};

// Pairs every GPU of `m` with NICs and cores under `policy`; each NIC's
// backend is the one whose claim on it is the most specific (`claims`: what
// the NIC plugins at hand declare). Throws courier::Error when COURIER_NICS
// names a device the machine lacks.
Plan plan(const Machine& m, const Policy& policy, const std::vector<BackendClaims>& claims);

}  // namespace courier::topology
