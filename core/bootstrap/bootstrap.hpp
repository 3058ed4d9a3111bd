// Out-of-band bootstrap: how the ranks of a job find each other and exchange
// endpoint names and memory keys before the data path exists.
//
// Two implementations of include/courier/bootstrap.hpp: a TCP rendezvous
// hosted by rank 0 (tcp_bootstrap.cpp, the default) and MPI
// (mpi_bootstrap.cpp, with COURIER_WITH_MPI).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "courier/bootstrap.hpp"  // the interface; here: how Courier's launchers make one

namespace courier {

class Logger;

struct BootstrapOptions {
  int rank = -1;
  int world_size = -1;
  // TCP rendezvous: rank 0 listens on `port` (bound on `host`'s address, or
  // on all addresses when host is empty); the others connect to host:port.
  std::string host;
  uint16_t port = 0;
  // The job's secret; every connection to rank 0 must present it.
  std::string job_token;
  // Any wait longer than this fails with a message naming the missing ranks.
  int timeout_s = 60;
  // Largest message a rank-0 server accepts from one rank (bytes).
  size_t max_message_bytes = size_t{64} << 20;
};

// Connects (or, on rank 0, listens and accepts) and returns once all ranks
// have joined. Throws courier::Error on timeout, naming the missing ranks.
std::unique_ptr<Bootstrap> make_tcp_bootstrap(const BootstrapOptions& options, Logger& log);

// True when this build has MPI support (COURIER_WITH_MPI).
bool mpi_bootstrap_available();
// Uses MPI_COMM_WORLD (initializing MPI when the program did not). Throws
// courier::Error when MPI support was not built.
std::unique_ptr<Bootstrap> make_mpi_bootstrap(Logger& log);

}  // namespace courier
