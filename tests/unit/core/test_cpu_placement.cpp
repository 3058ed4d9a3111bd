// Default CPU placement: each rank of a host gets its own share of the CPUs
// the process may use.
#include <doctest/doctest.h>

#include <algorithm>

#include "core/cpu_placement.hpp"

using namespace courier;

TEST_CASE("CPUs are split evenly among the ranks of a host") {
  const std::vector<int32_t> cpus = {0, 1, 2, 3, 4, 5, 6, 7};
  CHECK(cpu_share(cpus, 0, 2) == std::vector<int32_t>{0, 1, 2, 3});
  CHECK(cpu_share(cpus, 1, 2) == std::vector<int32_t>{4, 5, 6, 7});
  CHECK(cpu_share(cpus, 2, 3) == std::vector<int32_t>{4, 5});  // 8 / 3: two each
  CHECK(cpu_share(cpus, 0, 1) == cpus);
}

TEST_CASE("a restricted affinity mask is respected") {
  const std::vector<int32_t> cpus = {3, 7, 11, 15};  // e.g. a cgroup's cpuset
  CHECK(cpu_share(cpus, 1, 2) == std::vector<int32_t>{11, 15});
}

TEST_CASE("with fewer CPUs than ranks, ranks share CPUs round-robin") {
  const std::vector<int32_t> cpus = {0, 1};
  CHECK(cpu_share(cpus, 0, 4) == std::vector<int32_t>{0});
  CHECK(cpu_share(cpus, 1, 4) == std::vector<int32_t>{1});
  CHECK(cpu_share(cpus, 2, 4) == std::vector<int32_t>{0});
  CHECK(cpu_share(cpus, 3, 4) == std::vector<int32_t>{1});
}

TEST_CASE("pinning only when Courier may partition the whole machine among several ranks") {
  const std::vector<int32_t> all = {0, 1, 2, 3};
  CHECK(default_rank_cpus(all, 4, 1, 2) == std::vector<int32_t>{2, 3});
  CHECK(default_rank_cpus(all, 4, 0, 1).empty());     // a lone rank: no partition
  CHECK(default_rank_cpus({2, 3}, 4, 0, 2).empty());  // a launcher bound it already
  CHECK(default_rank_cpus({0, 1}, 2, 2, 4).empty());  // fewer CPUs than ranks
}

TEST_CASE("nothing to split gives nothing to pin") { CHECK(cpu_share({}, 0, 2).empty()); }

TEST_CASE("this process may run on at least one CPU, each listed once") {
  std::vector<int32_t> cpus = allowed_cpus();
  REQUIRE_FALSE(cpus.empty());
  CHECK(std::is_sorted(cpus.begin(), cpus.end()));
  CHECK(std::adjacent_find(cpus.begin(), cpus.end()) == cpus.end());
}
