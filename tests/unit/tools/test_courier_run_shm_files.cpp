// courier-run's removal of a dead rank's shared-memory files
// (tools/courier-run/shm_files.hpp): only the files bearing exactly that
// process id go.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "tools/courier-run/shm_files.hpp"

using courier::run::is_shm_file_of;
using courier::run::remove_shm_files_of;

TEST_CASE("a shared-memory file belongs to the process its name carries, matched whole") {
  CHECK(is_shm_file_of("courier-123-0123456789abcdef", 123));
  CHECK(is_shm_file_of("courier-ce-123-0x55d0c0ffee00", 123));
  CHECK_FALSE(is_shm_file_of("courier-1234-0123456789abcdef", 123));
  CHECK_FALSE(is_shm_file_of("courier-123-0123456789abcdef", 12));
  CHECK_FALSE(is_shm_file_of("courier-ce-1234-0x55d0c0ffee00", 123));
  CHECK_FALSE(is_shm_file_of("courier-0123-0123456789abcdef", 123));
  CHECK_FALSE(is_shm_file_of("courier-123-", 123));
  CHECK_FALSE(is_shm_file_of("courier-123", 123));
  CHECK_FALSE(is_shm_file_of("other-123-0123456789abcdef", 123));
  // The core's BARRIER segment: courier-<16 hex job id>-<host leader rank>.
  CHECK_FALSE(is_shm_file_of("courier-0000000000000123-0", 123));
}

TEST_CASE("remove_shm_files_of removes that process's files and no others") {
  char pattern[] = "/tmp/courier-shm-files-XXXXXX";
  REQUIRE(::mkdtemp(pattern) != nullptr);
  const std::string dir = pattern;
  for (const char* name :
       {"courier-123-0123456789abcdef", "courier-123-fedcba9876543210", "courier-ce-123-0x1000",
        "courier-1234-0123456789abcdef", "courier-12-0123456789abcdef"}) {
    std::ofstream(dir + "/" + name) << "x";
  }
  const courier::run::RemovedFiles result = remove_shm_files_of(123, dir);
  CHECK(result.failed.empty());
  CHECK(result.removed.size() == 3);
  for (const char* name :
       {"courier-123-0123456789abcdef", "courier-123-fedcba9876543210", "courier-ce-123-0x1000"}) {
    CHECK(::access((dir + "/" + name).c_str(), F_OK) != 0);
  }
  for (const char* name : {"courier-1234-0123456789abcdef", "courier-12-0123456789abcdef"}) {
    CHECK(::access((dir + "/" + name).c_str(), F_OK) == 0);
    ::unlink((dir + "/" + name).c_str());
  }
  ::rmdir(dir.c_str());

  const courier::run::RemovedFiles missing = remove_shm_files_of(123, dir);
  REQUIRE(missing.failed.size() == 1);
  CHECK(missing.failed[0].find(dir) != std::string::npos);
}
