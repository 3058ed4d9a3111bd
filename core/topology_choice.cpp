#include "core/topology_choice.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <iterator>
#include <optional>

#include "core/check.hpp"
#include "core/cpu_placement.hpp"
#include "core/log.hpp"
#include "core/plugin_loader.hpp"
#include "topology/discovery.hpp"
#include "topology/pairing.hpp"

namespace courier {

namespace {

std::vector<int32_t> intersect(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  std::vector<int32_t> both;
  std::set_intersection(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(both));
  return both;
}

}  // namespace

std::vector<topology::BackendClaims> nic_backend_claims(const std::vector<NicPlugin>& plugins) {
  std::vector<topology::BackendClaims> all;
  for (const NicPlugin& plugin : plugins) {
    topology::BackendClaims mine;
    mine.backend = plugin.name;
    for (const courier_nic_claim_v1& claim : nic_claims(plugin)) {
      if ((claim.flags & COURIER_NIC_CLAIM_FALLBACK) != 0) {
        mine.fallback = true;
        continue;
      }
      mine.devices.push_back(
          {claim.driver != nullptr ? claim.driver : "", claim.pci_vendor, claim.pci_device});
    }
    all.push_back(std::move(mine));
  }
  return all;
}

std::vector<topology::BackendClaims> nic_backend_claims(const Config& config) {
  // The registry of the caller said everything about these files already:
  // this scan only reads the claims, quietly.
  Logger quiet(LogLevel::error);
  const Registry registry(config.backend_path, quiet);
  return nic_backend_claims(registry.nic_plugins());
}

topology::Policy topology_policy(const Config& config) {
  topology::Policy policy;
  policy.selection = config.nic_selection;
  policy.nics = config.nics;
  policy.nic_backend = config.nic_backend;
  policy.proxy_cpus = config.proxy_cpus;
  return policy;
}

TopologyChoice choose_from_topology(const Config& config,
                                    const std::vector<topology::BackendClaims>& claims, int device,
                                    bool device_memory) {
  TopologyChoice choice;
  const std::vector<int32_t> allowed = allowed_cpus();
  // The machine and its plan, when topology can tell anything. This machine
  // unreadable leaves the defaults (courier-info --topology says why); a
  // COURIER_TOPOLOGY_XML or COURIER_NICS the user gave and Courier cannot
  // honour is an error (the messages name the variable).
  std::optional<topology::Machine> machine;
  std::optional<topology::Plan> plan;
  try {
    machine = topology::discover(config.topology_xml);
  } catch (const Error&) {
    if (!config.topology_xml.empty()) throw;
  }
  if (machine) {
    try {
      plan = topology::plan(*machine, topology_policy(config), claims);
    } catch (const Error&) {
      // Without hwloc no NIC is known, so COURIER_NICS is left to the NIC backend.
      if (machine->from_hwloc) throw;
    }
  }
  // This rank's GPU as topology sees it: one rank per GPU of the machine.
  const topology::GpuPlan* mine = nullptr;
  if (plan && device_memory && device >= 0 && static_cast<size_t>(device) < plan->gpus.size() &&
      static_cast<size_t>(config.job.local_size) <= plan->gpus.size()) {
    mine = &plan->gpus[static_cast<size_t>(device)];
  }

  if (!config.proxy_cpus.empty()) {
    choice.proxy_cpus = intersect(config.proxy_cpus, allowed);
    if (choice.proxy_cpus.empty()) {
      fail("COURIER_PROXY_CPUS={} names no CPU this process may use (it may use {})",
           fmt::join(config.proxy_cpus, ","), fmt::join(allowed, ","));
    }
    choice.proxy_why = "COURIER_PROXY_CPUS";
  } else if (mine != nullptr && !intersect(mine->proxy_cpus, allowed).empty()) {
    const topology::Gpu& g = machine->gpus[static_cast<size_t>(device)];
    choice.proxy_cpus = intersect(mine->proxy_cpus, allowed);
    choice.proxy_why = fmt::format("GPU {} ({}) on NUMA node {} ({})", device, g.pci.text(), g.numa,
                                   machine->source);
  } else {
    choice.proxy_cpus =
        default_rank_cpus(allowed, static_cast<size_t>(sysconf(_SC_NPROCESSORS_ONLN)),
                          config.job.local_rank, config.job.local_size);
    choice.proxy_why = "the default split among the host's ranks";
  }

  // The NIC backend: the one claiming the paired NIC (a rank without a GPU
  // topology sees takes the machine's first NIC).
  if (plan && !machine->nics.empty()) {
    int nic = -1;
    if (mine != nullptr && !mine->nics.empty()) {
      nic = mine->nics.front();
    } else {
      const std::string first = config.nics.empty() ? machine->nics.front().name : config.nics[0];
      for (size_t i = 0; i < machine->nics.size(); ++i) {
        if (machine->nics[i].name == first) nic = static_cast<int>(i);
      }
    }
    if (mine != nullptr) {
      for (int paired : mine->nics) {
        choice.nics.push_back(machine->nics[static_cast<size_t>(paired)].name);
      }
    }
    const size_t index = static_cast<size_t>(nic >= 0 ? nic : 0);
    const topology::Nic& n = machine->nics[index];
    const topology::NicBackend& claimed = plan->nic_backends[index];
    choice.nic_backend = claimed.backend;
    choice.nic_why =
        fmt::format("{} ({}), {}; {}", n.name, n.driver.empty() ? "PCI " + n.pci_id() : n.driver,
                    mine != nullptr ? fmt::format("GPU {}'s NIC", device)
                                    : std::string("the first RDMA NIC to use"),
                    claimed.why);
  }
  return choice;
}

}  // namespace courier
