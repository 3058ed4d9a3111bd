// One rank of a real multi-process bootstrap check (launch_tests.sh).
//
//   bootstrap_check            TCP bootstrap from courier-run's environment
//   bootstrap_check --mpi      MPI bootstrap (run under mpirun)
//   bootstrap_check --die R    TCP; rank R exits with status 5 after joining,
//                              the others must fail naming rank R
//   bootstrap_check --free-port  print a free TCP port on 127.0.0.1 and exit
//
// Each rank allgathers rank-dependent blocks of several sizes, checks every
// byte, runs a barrier and prints "bootstrap_check: rank R of N ok (KIND)".
// The environment is read with std::getenv on purpose: this checks the
// contract courier-run documents, independently of core/config.cpp.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/bootstrap/bootstrap.hpp"
#include "core/bootstrap/socket.hpp"
#include "core/check.hpp"
#include "core/log.hpp"
#include "courier/error.hpp"

namespace {

std::string require_env(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') courier::fail("bootstrap_check: {} is not set", name);
  return value;
}

courier::BootstrapOptions options_from_environment() {
  courier::BootstrapOptions options;
  options.rank = std::atoi(require_env("COURIER_RANK").c_str());
  options.world_size = std::atoi(require_env("COURIER_WORLD_SIZE").c_str());
  std::string address = require_env("COURIER_BOOTSTRAP");
  size_t colon = address.rfind(':');
  if (colon == std::string::npos)
    courier::fail("bootstrap_check: bad COURIER_BOOTSTRAP '{}'", address);
  options.host = address.substr(0, colon);
  options.port = static_cast<uint16_t>(std::atoi(address.c_str() + colon + 1));
  options.job_token = require_env("COURIER_JOB_TOKEN");
  options.timeout_s = 60;
  return options;
}

std::vector<std::byte> block(int rank, int round, size_t size) {
  std::vector<std::byte> bytes(size);
  for (size_t i = 0; i < size; ++i) {
    bytes[i] = static_cast<std::byte>((rank * 29 + round * 7 + static_cast<int>(i * 3)) & 0xff);
  }
  return bytes;
}

void check_rounds(courier::Bootstrap& bootstrap) {
  const size_t sizes[] = {8, 0, 1, 4096, size_t{1} << 20};
  for (int round = 0; round < 5; ++round) {
    std::vector<std::byte> result =
        bootstrap.allgather(block(bootstrap.rank(), round, sizes[round]));
    if (result.size() != sizes[round] * static_cast<size_t>(bootstrap.size())) {
      courier::fail("bootstrap_check: round {}: {} bytes instead of {}", round, result.size(),
                    sizes[round] * static_cast<size_t>(bootstrap.size()));
    }
    for (int from = 0; from < bootstrap.size(); ++from) {
      std::vector<std::byte> expected = block(from, round, sizes[round]);
      if (!std::equal(expected.begin(), expected.end(),
                      result.begin() +
                          static_cast<std::ptrdiff_t>(sizes[round] * static_cast<size_t>(from)))) {
        courier::fail("bootstrap_check: round {}: the block of rank {} is wrong", round, from);
      }
    }
    bootstrap.barrier();
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  courier::Logger log(courier::LogLevel::warn);
  try {
    if (!args.empty() && args[0] == "--free-port") {
      std::printf("%u\n", static_cast<unsigned>(courier::net::pick_free_tcp_port()));
      return 0;
    }
    std::unique_ptr<courier::Bootstrap> bootstrap;
    int die_rank = -1;
    if (!args.empty() && args[0] == "--mpi") {
      bootstrap = courier::make_mpi_bootstrap(log);
    } else {
      if (args.size() == 2 && args[0] == "--die") die_rank = std::atoi(args[1].c_str());
      bootstrap = courier::make_tcp_bootstrap(options_from_environment(), log);
    }
    log.set_rank(bootstrap->rank());
    if (bootstrap->rank() == die_rank) {
      std::printf("bootstrap_check: rank %d leaving the job\n", die_rank);
      std::fflush(stdout);
      std::_Exit(5);  // a crash, as far as the other ranks can tell
    }
    check_rounds(*bootstrap);
    std::printf("bootstrap_check: rank %d of %d ok (%s)\n", bootstrap->rank(), bootstrap->size(),
                std::string(bootstrap->kind()).c_str());
    return 0;
  } catch (const courier::Error& error) {
    std::fprintf(stderr, "bootstrap_check: %s\n", error.what());
    return 1;
  }
}
