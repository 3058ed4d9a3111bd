// Which NIC backend serves which RDMA device (docs/topology.md#backend): the
// device claims NIC plugins declare (NIC ABI 1.3), handed in as plain data by
// the core, and the rule that picks among them. Every backend name here
// comes from a plugin; topology/ knows none by itself.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "topology/machine.hpp"

namespace courier::topology {

// One kind of device a backend drives. An unset criterion matches any; at
// least one is set.
struct DeviceClaim {
  std::string driver;       // the device name without its index ("nic" for nic_0); "": any
  uint16_t pci_vendor = 0;  // 0: any
  uint16_t pci_device = 0;  // 0: any (set only with pci_vendor)

  bool matches(const Nic& nic) const;
  // How specific the claim is: the PCI device weighs most, then the driver,
  // then the vendor. Higher wins.
  int specificity() const;
  std::string text() const;  // "driver x", "PCI vendor 15b3", "driver x, PCI 15b3:1021"
};

// What one NIC backend claims.
struct BackendClaims {
  std::string backend;
  std::vector<DeviceClaim> devices;
  // Serves what no backend claims: unclaimed devices, and machines without
  // an RDMA NIC.
  bool fallback = false;
};

// The backend for one NIC, and why, for people.
struct NicBackend {
  std::string backend;  // "": nobody claims it and no backend is the fallback
  std::string why;      // "B claims driver x", "no backend claims it: F, the fallback"
};

// The backend whose claim on `nic` is the most specific (a tie: the name
// that sorts first); without one, the fallback.
NicBackend backend_for(const Nic& nic, const std::vector<BackendClaims>& claims);

// The fallback backend (the first by name of those declaring it), or "".
std::string fallback_backend(const std::vector<BackendClaims>& claims);

}  // namespace courier::topology
