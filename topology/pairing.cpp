#include "topology/pairing.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <tuple>

#include "courier/error.hpp"

namespace courier::topology {

const char* to_string(NicSelection selection) {
  switch (selection) {
    case NicSelection::automatic:
      return "auto";
    case NicSelection::nearest:
      return "nearest";
    case NicSelection::numa:
      return "numa";
    case NicSelection::round_robin:
      return "round-robin";
  }
  return "?";
}

namespace {

struct Candidate {
  int gpu, nic, distance;
  bool other_numa;
  bool operator<(const Candidate& o) const {
    return std::tie(distance, other_numa, gpu, nic) <
           std::tie(o.distance, o.other_numa, o.gpu, o.nic);
  }
};

// Every (GPU, NIC) pair, nearest first; a NIC on another NUMA node than the
// GPU loses a tie.
std::vector<Candidate> candidates(const Machine& m, const std::vector<int>& nics) {
  std::vector<Candidate> all;
  for (int g = 0; g < static_cast<int>(m.gpus.size()); ++g) {
    for (int n : nics) {
      int d = m.distance(m.gpus[g].node, m.nics[n].node);
      if (d < 0) d = 1 << 20;
      all.push_back({g, n, d, m.gpus[g].numa != m.nics[n].numa});
    }
  }
  std::sort(all.begin(), all.end());
  return all;
}

// Balanced: every GPU gets its nearest NICs, no NIC serving more GPUs than
// needed. With at least as many NICs as GPUs each GPU gets N / G of them
// (the first N % G GPUs to reach for one get one more); with fewer, a NIC
// serves at most ceil(G / N) GPUs.
void balanced(const Machine& m, const std::vector<int>& nics, std::vector<GpuPlan>& out) {
  const size_t G = m.gpus.size(), N = nics.size();
  const std::vector<Candidate> order = candidates(m, nics);
  if (N >= G) {
    std::map<int, bool> taken;
    const size_t per = N / G;
    size_t extra = N % G;
    for (int round = 0; round < 2; ++round) {
      for (const Candidate& c : order) {
        GpuPlan& p = out[static_cast<size_t>(c.gpu)];
        const size_t cap = round == 0 ? per : per + 1;
        if (taken[c.nic] || p.nics.size() >= cap) continue;
        if (round == 1) {
          if (extra == 0) break;
          --extra;
        }
        taken[c.nic] = true;
        p.nics.push_back(c.nic);
      }
    }
  } else {
    const size_t cap = (G + N - 1) / N;
    std::map<int, size_t> load;
    for (const Candidate& c : order) {
      GpuPlan& p = out[static_cast<size_t>(c.gpu)];
      if (!p.nics.empty() || load[c.nic] >= cap) continue;
      ++load[c.nic];
      p.nics.push_back(c.nic);
    }
  }
}

void nearest(const Machine& m, const std::vector<int>& nics, std::vector<GpuPlan>& out) {
  for (const Candidate& c : candidates(m, nics)) {
    GpuPlan& p = out[static_cast<size_t>(c.gpu)];
    // All NICs at the GPU's smallest distance (the first candidate's).
    if (p.nics.empty() || c.distance == p.distances.front()) {
      p.nics.push_back(c.nic);
      p.distances.push_back(c.distance);
    }
  }
}

void by_numa(const Machine& m, const std::vector<int>& nics, std::vector<GpuPlan>& out) {
  std::map<int, size_t> turn;  // per NUMA node: how many of its GPUs got a NIC
  for (size_t g = 0; g < m.gpus.size(); ++g) {
    std::vector<int> local;
    for (int n : nics) {
      if (m.nics[n].numa == m.gpus[g].numa) local.push_back(n);
    }
    const std::vector<int>& pool = local.empty() ? nics : local;
    if (local.empty()) out[g].note = "no NIC on its NUMA node";
    out[g].nics.push_back(pool[turn[m.gpus[g].numa]++ % pool.size()]);
  }
}

void round_robin(const Machine& m, const std::vector<int>& nics, std::vector<GpuPlan>& out) {
  const size_t G = m.gpus.size(), N = nics.size();
  for (size_t g = 0; g < G; ++g) {
    if (N >= G) {
      for (size_t j = g; j < N; j += G) out[g].nics.push_back(nics[j]);
    } else {
      out[g].nics.push_back(nics[g % N]);
    }
  }
}

// Splits `cpus` evenly and contiguously among `parts`; returns part `i`.
std::vector<int32_t> share(const std::vector<int32_t>& cpus, size_t i, size_t parts) {
  if (cpus.empty() || parts == 0) return {};
  if (cpus.size() < parts) return {cpus[i % cpus.size()]};
  const size_t base = cpus.size() / parts, extra = cpus.size() % parts;
  const size_t begin = i * base + std::min(i, extra);
  const size_t count = base + (i < extra ? 1 : 0);
  return {cpus.begin() + static_cast<long>(begin), cpus.begin() + static_cast<long>(begin + count)};
}

void place_proxies(const Machine& m, const Policy& policy, Plan& plan) {
  if (!policy.proxy_cpus.empty()) {
    for (GpuPlan& p : plan.gpus) {
      p.proxy_cpus = policy.proxy_cpus;
      p.cpus_forced = true;
    }
    return;
  }
  // The allowed CPUs of each GPU's NUMA node, shared by the GPUs there; a
  // GPU whose node has none allowed shares the allowed CPUs of the others.
  std::map<int, std::vector<int32_t>> pool;  // NUMA node -> its allowed CPUs
  std::map<int, std::vector<size_t>> users;
  std::vector<int32_t> elsewhere;
  for (const GpuPlan& p : plan.gpus) {
    const int numa = m.gpus[static_cast<size_t>(p.gpu)].numa;
    std::vector<int32_t> allowed;
    if (const NumaNode* n = m.numa_node(numa)) {
      std::set_intersection(n->cpus.begin(), n->cpus.end(), m.allowed_cpus.begin(),
                            m.allowed_cpus.end(), std::back_inserter(allowed));
    }
    pool[allowed.empty() ? -1 : numa] = allowed.empty() ? m.allowed_cpus : allowed;
    users[allowed.empty() ? -1 : numa].push_back(static_cast<size_t>(p.gpu));
  }
  for (auto& [numa, gpus] : users) {
    for (size_t i = 0; i < gpus.size(); ++i) {
      GpuPlan& p = plan.gpus[gpus[i]];
      p.proxy_cpus = share(pool[numa], i, gpus.size());
      if (numa == -1) {
        const int own = m.gpus[gpus[i]].numa;
        const std::string why =
            own < 0 ? "its NUMA node is unknown"
                    : fmt::format("the allowed cpuset has no CPU of its NUMA node {}", own);
        p.note += (p.note.empty() ? "" : "; ") + why + ": proxies on other allowed CPUs";
      }
    }
  }
}

}  // namespace

Plan plan(const Machine& m, const Policy& policy, const std::vector<BackendClaims>& claims) {
  Plan result;
  result.selection = policy.selection;
  // The NICs to choose from: all, or those COURIER_NICS names, in its order.
  std::vector<int> nics;
  if (policy.nics.empty()) {
    for (int n = 0; n < static_cast<int>(m.nics.size()); ++n) nics.push_back(n);
  } else {
    for (const std::string& name : policy.nics) {
      auto it = std::find_if(m.nics.begin(), m.nics.end(),
                             [&](const Nic& nic) { return nic.name == name; });
      if (it == m.nics.end()) {
        std::vector<std::string> have;
        for (const Nic& nic : m.nics) have.push_back(nic.name);
        throw Error(fmt::format(
            "COURIER_NICS names '{}', which {} does not have (it has: {})", name, m.source,
            have.empty() ? "no RDMA NIC" : fmt::format("{}", fmt::join(have, ", "))));
      }
      nics.push_back(static_cast<int>(it - m.nics.begin()));
    }
  }
  for (size_t g = 0; g < m.gpus.size(); ++g) {
    GpuPlan p;
    p.gpu = static_cast<int>(g);
    p.nics_forced = !policy.nics.empty();
    result.gpus.push_back(p);
  }
  if (!nics.empty() && !m.gpus.empty()) {
    switch (policy.selection) {
      case NicSelection::automatic:
        balanced(m, nics, result.gpus);
        break;
      case NicSelection::nearest:
        nearest(m, nics, result.gpus);
        break;
      case NicSelection::numa:
        by_numa(m, nics, result.gpus);
        break;
      case NicSelection::round_robin:
        round_robin(m, nics, result.gpus);
        break;
    }
  }
  // The backend: forced, or the one claiming the (first) NIC; without a
  // NIC, the fallback.
  for (const Nic& nic : m.nics) result.nic_backends.push_back(backend_for(nic, claims));
  const std::string fallback = fallback_backend(claims);
  const NicBackend no_nic{fallback, fallback.empty()
                                        ? "no RDMA NIC, and no backend is the fallback"
                                        : fmt::format("no RDMA NIC: {}, the fallback", fallback)};
  auto choose = [&](const std::vector<int>& paired, std::string& backend, std::string& why) {
    if (!policy.nic_backend.empty()) {
      backend = policy.nic_backend;
      why = "COURIER_NIC_BACKEND";
      return;
    }
    const NicBackend& chosen =
        paired.empty() ? no_nic : result.nic_backends[static_cast<size_t>(paired.front())];
    backend = chosen.backend;
    why = chosen.why;
  };
  result.backend_forced = !policy.nic_backend.empty();
  choose(nics, result.backend, result.backend_why);
  for (GpuPlan& p : result.gpus) {
    p.distances.clear();
    for (int n : p.nics) p.distances.push_back(m.distance(m.gpus[p.gpu].node, m.nics[n].node));
    p.backend_forced = result.backend_forced;
    choose(p.nics, p.backend, p.backend_why);
    if (p.nics.empty() && !nics.empty()) p.note = "no NIC left for it";
  }
  if (nics.empty()) {
    result.notes.push_back(m.nics.empty() ? no_nic.why : "COURIER_NICS left no NIC");
  }
  for (size_t n = 0; n < m.nics.size(); ++n) {
    if (result.nic_backends[n].backend.empty() && !result.backend_forced) {
      result.notes.push_back(
          fmt::format("{} ({}, PCI {}): {}; every usable backend is tried by name", m.nics[n].name,
                      m.nics[n].driver.empty() ? "driver unknown" : m.nics[n].driver,
                      m.nics[n].pci_id(), result.nic_backends[n].why));
    }
  }
  if (!m.from_hwloc) {
    result.notes.push_back(
        "built without hwloc: GPUs and NICs are not paired by distance; proxies may use every "
        "allowed CPU");
  }
  place_proxies(m, policy, result);
  return result;
}

}  // namespace courier::topology
