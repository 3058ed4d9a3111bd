// The shm regions of processes that no longer exist, and only those that no
// endpoint holds locked, are removed when nic-ofi starts
// (nic/ofi/ofi_fabric.hpp).
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <string>

#include "nic/ofi/ofi_fabric.hpp"

using courier::ofi::remove_stale_shm_regions;
using courier::ofi::shm_region_owner;

TEST_CASE("an shm region's name gives its process, or 0 for any other name") {
  CHECK(shm_region_owner("courier-123-0123456789abcdef") == 123);
  CHECK(shm_region_owner("courier-4194304-ffffffffffffffff") == 4194304);
  CHECK(shm_region_owner("courier-0123-0123456789abcdef") == 0);
  CHECK(shm_region_owner("courier--0123456789abcdef") == 0);
  CHECK(shm_region_owner("courier-123-0123456789abcde") == 0);
  CHECK(shm_region_owner("courier-123-0123456789abcdef0") == 0);
  CHECK(shm_region_owner("courier-123-0123456789ABCDEF") == 0);
  CHECK(shm_region_owner("courier-99999999999-0123456789abcdef") == 0);
  // nic-ce's segments and the core's BARRIER segment are not nic-ofi's.
  CHECK(shm_region_owner("courier-ce-123-0x55d0c0ffee00") == 0);
  CHECK(shm_region_owner("courier-0123456789abcdef-0") == 0);
  CHECK(shm_region_owner("fi_shm_123") == 0);
}

TEST_CASE("remove_stale_shm_regions removes the regions of processes that are gone") {
  // A process id that existed and is free now (reaped; reuse is unlikely
  // within the test, and the check below would catch it).
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) ::_exit(0);
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  REQUIRE(::kill(child, 0) != 0);

  char pattern[] = "/tmp/courier-ofi-regions-XXXXXX";
  REQUIRE(::mkdtemp(pattern) != nullptr);
  const std::string dir = pattern;
  const std::string gone = "courier-" + std::to_string(child) + "-0123456789abcdef";
  const std::string alive = "courier-" + std::to_string(::getpid()) + "-0123456789abcdef";
  const std::string init = "courier-1-0123456789abcdef";  // exists, maybe not signallable
  const std::string other = "courier-ce-" + std::to_string(child) + "-0x1000";
  // An id that means nothing here (another pid namespace's process), whose
  // endpoint holds the region locked as open_endpoint_stack does.
  const std::string locked = "courier-" + std::to_string(child) + "-fedcba9876543210";
  for (const std::string& name : {gone, alive, init, other, locked}) {
    std::ofstream(dir + "/" + name) << "x";
  }
  const int lock_fd = ::open((dir + "/" + locked).c_str(), O_RDONLY | O_CLOEXEC);
  REQUIRE(lock_fd >= 0);
  REQUIRE(::flock(lock_fd, LOCK_SH) == 0);

  const courier::ofi::StaleRegions result = remove_stale_shm_regions(dir);
  ::close(lock_fd);
  CHECK(result.failed.empty());
  REQUIRE(result.removed.size() == 1);
  CHECK(result.removed[0].path == dir + "/" + gone);
  CHECK(result.removed[0].owner == child);
  CHECK(::access((dir + "/" + gone).c_str(), F_OK) != 0);
  for (const std::string& name : {alive, init, other, locked}) {
    CHECK(::access((dir + "/" + name).c_str(), F_OK) == 0);
    ::unlink((dir + "/" + name).c_str());
  }
  ::rmdir(dir.c_str());
}
