// The MPI bootstrap's unit-testable part: a build without MPI says how to get
// it. (With MPI, tests/integration/launch runs it under mpirun.)
#include <doctest/doctest.h>

#include "core/bootstrap/bootstrap.hpp"
#include "core/log.hpp"
#include "courier/error.hpp"

namespace courier {
namespace {

// Skipped in MPI builds: tests/integration/launch covers those under mpirun.
TEST_CASE("mpi bootstrap: without MPI support the error says how to enable it" *
          doctest::skip(mpi_bootstrap_available())) {
  Logger log;
  CHECK_THROWS_WITH_AS(make_mpi_bootstrap(log), doctest::Contains("COURIER_WITH_MPI=ON"), Error);
}

}  // namespace
}  // namespace courier
