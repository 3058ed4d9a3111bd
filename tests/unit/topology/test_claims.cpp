// Which backend serves a NIC (topology/claims.hpp): the most specific claim
// of the plugins at hand wins, ties go to the first name, the fallback takes
// what nobody claims; and topology::plan gives each GPU the backend of its
// own NIC.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "topology/claims.hpp"
#include "topology/pairing.hpp"

namespace {

using courier::topology::backend_for;
using courier::topology::BackendClaims;
using courier::topology::DeviceClaim;
using courier::topology::Machine;
using courier::topology::Nic;
using courier::topology::TreeNode;

Nic nic(std::string name, std::string driver, uint16_t vendor, uint16_t device) {
  Nic n;
  n.name = std::move(name);
  n.driver = std::move(driver);
  n.pci_vendor = vendor;
  n.pci_device = device;
  return n;
}

}  // namespace

TEST_CASE("a claim matches when every criterion it sets matches") {
  const Nic cx = nic("mlx5_0", "mlx5", 0x15b3, 0x1021);
  CHECK(DeviceClaim{"mlx5", 0, 0}.matches(cx));
  CHECK(DeviceClaim{"", 0x15b3, 0}.matches(cx));
  CHECK(DeviceClaim{"", 0x15b3, 0x1021}.matches(cx));
  CHECK(DeviceClaim{"mlx5", 0x15b3, 0x1021}.matches(cx));
  CHECK_FALSE(DeviceClaim{"mlx4", 0, 0}.matches(cx));
  CHECK_FALSE(DeviceClaim{"", 0x15b3, 0x1023}.matches(cx));
  CHECK_FALSE(DeviceClaim{"mlx5", 0x14e4, 0}.matches(cx));
  // A renamed device has no driver name: only PCI claims reach it.
  const Nic renamed = nic("rdmap72s0", "", 0x1d0f, 0xefa3);
  CHECK_FALSE(DeviceClaim{"efa", 0, 0}.matches(renamed));
  CHECK(DeviceClaim{"", 0x1d0f, 0}.matches(renamed));
}

TEST_CASE("the most specific claim wins: PCI device, then driver, then vendor") {
  const Nic cx = nic("mlx5_0", "mlx5", 0x15b3, 0x1023);
  const BackendClaims vendor{"a-vendor", {{"", 0x15b3, 0}}, false};
  const BackendClaims driver{"b-driver", {{"mlx5", 0, 0}}, false};
  const BackendClaims driver_vendor{"c-both", {{"mlx5", 0x15b3, 0}}, false};
  const BackendClaims device{"d-device", {{"", 0x15b3, 0x1023}}, false};
  CHECK(backend_for(cx, {vendor, driver}).backend == "b-driver");
  CHECK(backend_for(cx, {driver, driver_vendor}).backend == "c-both");
  CHECK(backend_for(cx, {vendor, driver, driver_vendor, device}).backend == "d-device");
  CHECK(backend_for(cx, {device, vendor}).why == "d-device claims PCI 15b3:1023");
  // A backend's own strongest claim counts, whatever the order of its list.
  const BackendClaims two{"e-two", {{"", 0x15b3, 0}, {"", 0x15b3, 0x1023}}, false};
  CHECK(backend_for(cx, {driver, two}).backend == "e-two");
}

TEST_CASE("equally specific claims: the first name wins, and the reason names the others") {
  const Nic cx = nic("mlx5_0", "mlx5", 0x15b3, 0x1021);
  const BackendClaims z{"zeta", {{"mlx5", 0, 0}}, false};
  const BackendClaims a{"alpha", {{"mlx5", 0, 0}}, false};
  const auto chosen = backend_for(cx, {z, a});
  CHECK(chosen.backend == "alpha");
  CHECK(chosen.why ==
        "alpha claims driver mlx5 (so does zeta, as specifically: the first name wins)");
}

TEST_CASE("what nobody claims goes to the fallback, or to nobody") {
  const Nic other = nic("irdma0", "irdma", 0x8086, 0x1592);
  const BackendClaims cx{"cx", {{"mlx5", 0, 0}}, false};
  const BackendClaims net{"net", {}, true};
  const BackendClaims net2{"another-net", {}, true};
  auto chosen = backend_for(other, {cx, net});
  CHECK(chosen.backend == "net");
  CHECK(chosen.why == "no backend claims it: net, the fallback");
  CHECK(backend_for(other, {net, net2}).backend == "another-net");
  chosen = backend_for(other, {cx});
  CHECK(chosen.backend.empty());
  CHECK(chosen.why == "no backend claims it, and none is the fallback");
}

TEST_CASE("plan: each GPU gets the backend claiming its own NIC") {
  // One switch per GPU: GPU 0 with a vendor's NIC, GPU 1 with a ConnectX.
  Machine m;
  m.source = "a test machine";
  m.tree.push_back({TreeNode::Kind::machine, -1, "Machine", 0});
  m.numa.push_back({0, 0, {0, 1, 2, 3}});
  m.allowed_cpus = {0, 1, 2, 3};
  for (int i = 0; i < 2; ++i) {
    m.tree.push_back({TreeNode::Kind::pci_switch, 0, "switch", 0});
    const int sw = static_cast<int>(m.tree.size()) - 1;
    m.tree.push_back({TreeNode::Kind::gpu, sw, "gpu", 0});
    courier::topology::Gpu g;
    g.name = "cuda" + std::to_string(i);
    g.pci.bus = static_cast<uint32_t>(i + 1);
    g.numa = 0;
    g.node = static_cast<int>(m.tree.size()) - 1;
    m.gpus.push_back(g);
    m.tree.push_back({TreeNode::Kind::nic, sw, "nic", 0});
    Nic n = i == 0 ? nic("acme_nic0", "acme_nic", 0x5e1e, 0x0001)
                   : nic("mlx5_0", "mlx5", 0x15b3, 0x1021);
    n.numa = 0;
    n.node = static_cast<int>(m.tree.size()) - 1;
    m.nics.push_back(n);
  }
  const std::vector<BackendClaims> claims = {
      {"acme", {{"acme_nic", 0, 0}}, false},
      {"cx", {{"mlx5", 0, 0}}, false},
      {"net", {}, true},
  };
  auto plan = courier::topology::plan(m, {}, claims);
  REQUIRE(plan.gpus.size() == 2);
  CHECK(plan.gpus[0].backend == "acme");
  CHECK(plan.gpus[0].backend_why == "acme claims driver acme_nic");
  CHECK(plan.gpus[1].backend == "cx");
  REQUIRE(plan.nic_backends.size() == 2);
  CHECK(plan.nic_backends[0].backend == "acme");
  CHECK(plan.backend == "acme");  // the first NIC's, for a process without a GPU

  SUBCASE("without the vendor's plugin its NIC goes to the fallback, with a note") {
    plan = courier::topology::plan(m, {}, {claims[1], claims[2]});
    CHECK(plan.gpus[0].backend == "net");
    CHECK(plan.gpus[1].backend == "cx");
  }
  SUBCASE("without a fallback either, nobody; the notes say so") {
    plan = courier::topology::plan(m, {}, {claims[1]});
    CHECK(plan.gpus[0].backend.empty());
    bool said = false;
    for (const std::string& note : plan.notes) {
      said |= note.find(
                  "acme_nic0 (acme_nic, PCI 5e1e:0001): no backend claims it, and none "
                  "is the fallback") != std::string::npos;
    }
    CHECK(said);
  }
  SUBCASE("COURIER_NIC_BACKEND overrides every claim") {
    courier::topology::Policy policy;
    policy.nic_backend = "net";
    plan = courier::topology::plan(m, policy, claims);
    CHECK(plan.gpus[0].backend == "net");
    CHECK(plan.gpus[0].backend_forced);
    CHECK(plan.nic_backends[0].backend == "acme");  // what it would have been
  }
  SUBCASE("no RDMA NIC: the fallback") {
    m.nics.clear();
    plan = courier::topology::plan(m, {}, claims);
    CHECK(plan.backend == "net");
    CHECK(plan.gpus[0].backend == "net");
    REQUIRE_FALSE(plan.notes.empty());
    CHECK(plan.notes[0] == "no RDMA NIC: net, the fallback");
  }
}
