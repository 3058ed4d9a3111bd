#include "core/topology_choice.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <iterator>
#include <optional>

#include "core/check.hpp"
#include "core/cpu_placement.hpp"
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

topology::Policy topology_policy(const Config& config) {
  topology::Policy policy;
  policy.selection = config.nic_selection;
  policy.nics = config.nics;
  policy.nic_backend = config.nic_backend;
  policy.proxy_cpus = config.proxy_cpus;
  return policy;
}

TopologyChoice choose_from_topology(const Config& config, int device, bool device_memory) {
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
      plan = topology::plan(*machine, topology_policy(config));
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

  // The NIC backend: the paired NIC's driver decides (a rank without a GPU
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
    const topology::Nic& n = machine->nics[static_cast<size_t>(nic >= 0 ? nic : 0)];
    choice.nic_backend = topology::backend_for_driver(n.driver);
    choice.nic_why = fmt::format("{} ({}), {}", n.name, n.driver,
                                 mine != nullptr ? fmt::format("GPU {}'s NIC", device)
                                                 : std::string("the first RDMA NIC to use"));
  }
  return choice;
}

}  // namespace courier
