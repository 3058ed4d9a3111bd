#include "topology/claims.hpp"

#include <fmt/format.h>

namespace courier::topology {

bool DeviceClaim::matches(const Nic& nic) const {
  if (!driver.empty() && driver != nic.driver) return false;
  if (pci_vendor != 0 && pci_vendor != nic.pci_vendor) return false;
  if (pci_device != 0 && pci_device != nic.pci_device) return false;
  return true;
}

int DeviceClaim::specificity() const {
  return (pci_device != 0 ? 4 : 0) + (!driver.empty() ? 2 : 0) + (pci_vendor != 0 ? 1 : 0);
}

std::string DeviceClaim::text() const {
  std::string pci;
  if (pci_vendor != 0) {
    pci = pci_device != 0 ? fmt::format("PCI {:04x}:{:04x}", pci_vendor, pci_device)
                          : fmt::format("PCI vendor {:04x}", pci_vendor);
  }
  if (driver.empty()) return pci;
  return pci.empty() ? "driver " + driver : fmt::format("driver {}, {}", driver, pci);
}

std::string fallback_backend(const std::vector<BackendClaims>& claims) {
  std::string first;
  for (const BackendClaims& c : claims) {
    if (c.fallback && (first.empty() || c.backend < first)) first = c.backend;
  }
  return first;
}

NicBackend backend_for(const Nic& nic, const std::vector<BackendClaims>& claims) {
  // Each backend's most specific claim on this NIC.
  struct Claimant {
    const BackendClaims* backend;
    const DeviceClaim* claim;
  };
  std::vector<Claimant> claimants;
  for (const BackendClaims& c : claims) {
    const DeviceClaim* strongest = nullptr;
    for (const DeviceClaim& d : c.devices) {
      if (d.matches(nic) && (strongest == nullptr || d.specificity() > strongest->specificity())) {
        strongest = &d;
      }
    }
    if (strongest != nullptr) claimants.push_back({&c, strongest});
  }
  const Claimant* best = nullptr;
  for (const Claimant& c : claimants) {
    if (best == nullptr || c.claim->specificity() > best->claim->specificity() ||
        (c.claim->specificity() == best->claim->specificity() &&
         c.backend->backend < best->backend->backend)) {
      best = &c;
    }
  }
  if (best != nullptr) {
    std::vector<std::string> tied;  // claim it as specifically, but sort later
    for (const Claimant& c : claimants) {
      if (&c != best && c.claim->specificity() == best->claim->specificity()) {
        tied.push_back(c.backend->backend);
      }
    }
    std::string why = fmt::format("{} claims {}", best->backend->backend, best->claim->text());
    if (!tied.empty()) {
      why +=
          fmt::format(" (so does {}, as specifically: the first name wins)", fmt::join(tied, ", "));
    }
    return {best->backend->backend, why};
  }
  const std::string fallback = fallback_backend(claims);
  if (fallback.empty()) return {"", "no backend claims it, and none is the fallback"};
  return {fallback, fmt::format("no backend claims it: {}, the fallback", fallback)};
}

}  // namespace courier::topology
