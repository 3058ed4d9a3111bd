// topology::plan on machines built by hand: each NIC selection policy, the
// balance rules, COURIER_NICS and COURIER_PROXY_CPUS, and proxy CPU shares.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "courier/error.hpp"
#include "topology/pairing.hpp"

namespace {

using courier::topology::BackendClaims;
using courier::topology::Gpu;
using courier::topology::Machine;
using courier::topology::Nic;
using courier::topology::NicSelection;
using courier::topology::TreeNode;

// Two packages (NUMA 0 and 1, 8 CPUs each); each package has `switches`
// PCIe switches, each with `gpus` GPUs and `nics` NICs behind it.
Machine machine(int switches, int gpus, int nics) {
  Machine m;
  m.source = "a test machine";
  m.tree.push_back({TreeNode::Kind::machine, -1, "Machine", -1});
  int gpu = 0, nic = 0;
  for (int p = 0; p < 2; ++p) {
    m.numa.push_back({p, p, {}});
    for (int c = 0; c < 8; ++c) {
      m.numa.back().cpus.push_back(p * 8 + c);
      m.allowed_cpus.push_back(p * 8 + c);
    }
    m.tree.push_back({TreeNode::Kind::package, 0, "Package", p});
    const int package = static_cast<int>(m.tree.size()) - 1;
    m.tree.push_back({TreeNode::Kind::host_bridge, package, "Host bridge", p});
    const int bridge = static_cast<int>(m.tree.size()) - 1;
    for (int s = 0; s < switches; ++s) {
      m.tree.push_back({TreeNode::Kind::pci_switch, bridge, "switch", p});
      const int sw = static_cast<int>(m.tree.size()) - 1;
      for (int i = 0; i < gpus; ++i, ++gpu) {
        m.tree.push_back({TreeNode::Kind::gpu, sw, "gpu", p});
        Gpu g;
        g.name = "cuda" + std::to_string(gpu);
        g.pci.bus = static_cast<uint32_t>(gpu + 1);
        g.numa = p;
        g.node = static_cast<int>(m.tree.size()) - 1;
        m.gpus.push_back(g);
      }
      for (int i = 0; i < nics; ++i, ++nic) {
        m.tree.push_back({TreeNode::Kind::nic, sw, "nic", p});
        Nic n;
        n.name = "mlx5_" + std::to_string(nic);
        n.driver = "mlx5";
        n.pci_vendor = 0x15b3;
        n.pci_device = 0x1021;
        n.numa = p;
        n.node = static_cast<int>(m.tree.size()) - 1;
        m.nics.push_back(n);
      }
    }
  }
  return m;
}

// What two plugins of a test claim: "rdma" the machine's NICs, "net" the
// rest.
const std::vector<BackendClaims> kClaims = {
    {"rdma", {{"mlx5", 0, 0}}, false},
    {"net", {}, true},
};

std::vector<std::string> nics_of(const Machine& m, const courier::topology::GpuPlan& p) {
  std::vector<std::string> names;
  for (int n : p.nics) names.push_back(m.nics[static_cast<size_t>(n)].name);
  return names;
}

}  // namespace

TEST_CASE("auto pairs each GPU with the NIC behind its switch and splits its node's CPUs") {
  const Machine m = machine(2, 1, 1);  // 4 GPUs, 4 NICs
  const auto plan = courier::topology::plan(m, {}, kClaims);
  REQUIRE(plan.gpus.size() == 4);
  for (size_t g = 0; g < 4; ++g) {
    CHECK(nics_of(m, plan.gpus[g]) == std::vector<std::string>{"mlx5_" + std::to_string(g)});
    CHECK(plan.gpus[g].distances == std::vector<int>{2});
    CHECK(plan.gpus[g].backend == "rdma");
  }
  CHECK(plan.gpus[0].proxy_cpus == std::vector<int32_t>{0, 1, 2, 3});
  CHECK(plan.gpus[1].proxy_cpus == std::vector<int32_t>{4, 5, 6, 7});
  CHECK(plan.gpus[3].proxy_cpus == std::vector<int32_t>{12, 13, 14, 15});
}

TEST_CASE("auto gives each GPU several NICs when NICs outnumber GPUs") {
  const Machine m = machine(1, 1, 2);  // 2 GPUs, 4 NICs
  const auto plan = courier::topology::plan(m, {}, kClaims);
  CHECK(nics_of(m, plan.gpus[0]) == std::vector<std::string>{"mlx5_0", "mlx5_1"});
  CHECK(nics_of(m, plan.gpus[1]) == std::vector<std::string>{"mlx5_2", "mlx5_3"});
}

TEST_CASE("auto shares a NIC between no more GPUs than needed") {
  const Machine m = machine(1, 2, 1);  // 4 GPUs, 2 NICs: each NIC serves the 2 behind it
  const auto plan = courier::topology::plan(m, {}, kClaims);
  CHECK(nics_of(m, plan.gpus[0]) == std::vector<std::string>{"mlx5_0"});
  CHECK(nics_of(m, plan.gpus[1]) == std::vector<std::string>{"mlx5_0"});
  CHECK(nics_of(m, plan.gpus[2]) == std::vector<std::string>{"mlx5_1"});
  CHECK(nics_of(m, plan.gpus[3]) == std::vector<std::string>{"mlx5_1"});
}

TEST_CASE("round-robin ignores distance; numa stays on the node") {
  const Machine m = machine(2, 1, 1);
  courier::topology::Policy rr;
  rr.selection = NicSelection::round_robin;
  rr.nics = {"mlx5_3", "mlx5_2", "mlx5_1", "mlx5_0"};
  const auto plan = courier::topology::plan(m, rr, kClaims);
  CHECK(nics_of(m, plan.gpus[0]) == std::vector<std::string>{"mlx5_3"});
  CHECK(plan.gpus[0].distances.front() > 2);
  CHECK(plan.gpus[0].nics_forced);

  courier::topology::Policy numa;
  numa.selection = NicSelection::numa;
  const auto by_numa = courier::topology::plan(m, numa, kClaims);
  for (size_t g = 0; g < 4; ++g) {
    const int nic = by_numa.gpus[g].nics.front();
    CHECK(m.nics[static_cast<size_t>(nic)].numa == m.gpus[g].numa);
  }
}

TEST_CASE("forced backend and CPUs are used and marked") {
  const Machine m = machine(1, 1, 1);
  courier::topology::Policy policy;
  policy.nic_backend = "ofi";
  policy.proxy_cpus = {3, 4};
  const auto plan = courier::topology::plan(m, policy, kClaims);
  CHECK(plan.backend == "ofi");
  CHECK(plan.backend_forced);
  CHECK(plan.gpus[1].backend_forced);
  CHECK(plan.gpus[1].proxy_cpus == std::vector<int32_t>{3, 4});
  CHECK(plan.gpus[1].cpus_forced);
}

TEST_CASE("COURIER_NICS naming a missing device is an error listing the machine's") {
  const Machine m = machine(1, 1, 1);
  courier::topology::Policy policy;
  policy.nics = {"mlx5_9"};
  try {
    courier::topology::plan(m, policy, kClaims);
    FAIL("no error");
  } catch (const courier::Error& e) {
    const std::string what = e.what();
    CHECK(what.find("COURIER_NICS names 'mlx5_9'") != std::string::npos);
    CHECK(what.find("mlx5_0, mlx5_1") != std::string::npos);
  }
}

TEST_CASE("a GPU whose NUMA node has no allowed CPU shares the allowed ones, with a note") {
  Machine m = machine(1, 1, 1);
  m.allowed_cpus = {0, 1, 2, 3, 4, 5, 6, 7};  // NUMA 0 only
  const auto plan = courier::topology::plan(m, {}, kClaims);
  CHECK(plan.gpus[0].proxy_cpus == std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7});
  CHECK(plan.gpus[1].proxy_cpus == std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7});
  CHECK(plan.gpus[1].note.find("no CPU of its NUMA node 1") != std::string::npos);
}
