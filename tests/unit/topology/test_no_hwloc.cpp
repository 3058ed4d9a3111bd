// Discovery in a build without hwloc (topology/no_hwloc_discovery.cpp, the
// simple policy of docs/topology.md), linked into this test on its own so
// every build checks it.
#include <doctest/doctest.h>

#include <string>

#include "courier/error.hpp"
#include "topology/discovery.hpp"
#include "topology/pairing.hpp"

TEST_CASE("without hwloc: this process's CPUs, no devices, and it says so") {
  CHECK_FALSE(courier::topology::have_hwloc());
  const auto m = courier::topology::discover("");
  CHECK_FALSE(m.from_hwloc);
  CHECK(m.gpus.empty());
  CHECK(m.nics.empty());
  CHECK_FALSE(m.allowed_cpus.empty());
  REQUIRE(m.numa.size() == 1);
  CHECK(m.numa[0].cpus == m.allowed_cpus);
  // No NIC is known: the fallback of the plugins at hand.
  const auto plan = courier::topology::plan(m, {}, {{"net", {}, true}});
  CHECK(plan.backend == "net");
  bool said = false;
  for (const std::string& note : plan.notes)
    said |= note.find("built without hwloc") != std::string::npos;
  CHECK(said);
}

TEST_CASE("without hwloc: a recorded topology is an error naming the variable") {
  try {
    courier::topology::discover("/some/machine.xml");
    FAIL("no error");
  } catch (const courier::Error& e) {
    CHECK(std::string(e.what()).find("COURIER_TOPOLOGY_XML=/some/machine.xml") !=
          std::string::npos);
  }
}
