// What a Context takes from topology/ (docs/topology.md): where its proxy
// threads run, and which NIC backend to try first.
//
// Proxy CPUs: COURIER_PROXY_CPUS; else the CPUs topology gives this rank's
// GPU (its NUMA node's allowed CPUs, shared with the node's other GPUs);
// else the default split of the allowed CPUs among the host's ranks
// (core/cpu_placement.hpp). NIC backend: unless COURIER_NIC_BACKEND names
// one, the backend claiming the NIC paired with this rank's GPU (the device
// claims of the NIC plugins found, NIC ABI 1.3) is tried first.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/config.hpp"
#include "core/registry.hpp"
#include "topology/claims.hpp"
#include "topology/pairing.hpp"

namespace courier {

struct TopologyChoice {
  std::vector<int32_t> proxy_cpus;  // empty: leave placement to the kernel
  std::string proxy_why;            // for the log
  std::string nic_backend;          // to try first ("": no preference)
  std::vector<std::string> nics;    // the NICs paired with this rank's GPU, nearest first
  std::string nic_why;
};

// The pairing policy the knobs ask for (COURIER_NIC_SELECTION, COURIER_NICS,
// COURIER_NIC_BACKEND, COURIER_PROXY_CPUS): what the Context and
// courier-info --topology both plan with.
topology::Policy topology_policy(const Config& config);

// What the usable NIC plugins claim, as topology takes it: per plugin its
// name, the devices it claims and whether it is the fallback.
std::vector<topology::BackendClaims> nic_backend_claims(const std::vector<NicPlugin>& plugins);
// The same for the NIC plugins of COURIER_BACKEND_PATH and the install's
// plugin directory, scanned afresh (for a caller without a Registry).
std::vector<topology::BackendClaims> nic_backend_claims(const Config& config);

// `claims`: nic_backend_claims() of the registry the NIC backend will be
// opened from. `device` is this rank's GPU index (PCI bus-id order),
// `device_memory` whether the GPU backend has real devices (not host
// memory). Throws courier::Error when COURIER_PROXY_CPUS leaves no CPU this
// process may use.
TopologyChoice choose_from_topology(const Config& config,
                                    const std::vector<topology::BackendClaims>& claims, int device,
                                    bool device_memory);

}  // namespace courier
