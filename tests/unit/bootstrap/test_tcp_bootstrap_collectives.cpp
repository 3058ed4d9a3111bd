// The TCP bootstrap doing its job: joining, allgather, barrier.
#include <doctest/doctest.h>

#include "tests/unit/bootstrap/test_support.hpp"

namespace courier::test {
namespace {

// Each rank joins, runs allgathers of several sizes (including empty and
// 1 MiB blocks), a barrier, and returns what the allgathers produced.
std::vector<std::vector<std::byte>> run_rounds(int rank, int world_size, uint16_t port,
                                               Logger& log) {
  std::unique_ptr<Bootstrap> bootstrap =
      make_tcp_bootstrap(options_for(rank, world_size, port), log);
  if (bootstrap->rank() != rank || bootstrap->size() != world_size || bootstrap->kind() != "tcp") {
    throw Error("bootstrap reports the wrong rank, size or kind");
  }
  std::vector<std::vector<std::byte>> results;
  const size_t sizes[] = {16, 0, 1, size_t{1} << 20, 7};
  for (int round = 0; round < 5; ++round) {
    results.push_back(bootstrap->allgather(pattern(rank, round, sizes[round])));
    bootstrap->barrier();
  }
  return results;
}

void check_rounds(const std::vector<RankOutcome>& outcomes, int world_size) {
  const size_t sizes[] = {16, 0, 1, size_t{1} << 20, 7};
  for (int rank = 0; rank < world_size; ++rank) {
    const RankOutcome& outcome = outcomes[static_cast<size_t>(rank)];
    INFO("rank ", rank, ": ", outcome.error);
    REQUIRE(outcome.ok);
    REQUIRE(outcome.results.size() == 5);
    for (int round = 0; round < 5; ++round) {
      std::vector<std::byte> expected;
      for (int from = 0; from < world_size; ++from) {
        std::vector<std::byte> block = pattern(from, round, sizes[round]);
        expected.insert(expected.end(), block.begin(), block.end());
      }
      CHECK(outcome.results[static_cast<size_t>(round)] == expected);
    }
  }
}

void check_world(int world_size) {
  LogCapture log;
  const uint16_t port = net::pick_free_tcp_port();
  std::vector<int> ranks;
  for (int rank = 0; rank < world_size; ++rank) ranks.push_back(rank);
  auto threads = start_ranks(
      ranks, [&](int rank) { return run_rounds(rank, world_size, port, log.logger()); });
  check_rounds(join_all(threads), world_size);
}

TEST_CASE("tcp bootstrap: a single rank needs no network") {
  LogCapture log;
  BootstrapOptions options = options_for(0, 1, 0);
  options.host.clear();
  std::unique_ptr<Bootstrap> bootstrap = make_tcp_bootstrap(options, log.logger());
  CHECK(bootstrap->size() == 1);
  std::vector<std::byte> mine = pattern(0, 0, 9);
  CHECK(bootstrap->allgather(mine) == mine);
  CHECK(bootstrap->allgather({}).empty());
  bootstrap->barrier();
}

TEST_CASE("tcp bootstrap: allgather and barrier with 2 ranks") { check_world(2); }

TEST_CASE("tcp bootstrap: allgather and barrier with 4 ranks") { check_world(4); }

TEST_CASE("tcp bootstrap: ranks started before rank 0 wait for it") {
  LogCapture log(LogLevel::debug);
  const uint16_t port = net::pick_free_tcp_port();
  // Rank 1 starts alone and retries; rank 0 starts once rank 1 has been
  // refused at least once.
  auto clients =
      start_ranks({1}, [&](int rank) { return run_rounds(rank, 2, port, log.logger()); });
  REQUIRE(log.wait_for("retrying"));
  auto host = start_ranks({0}, [&](int rank) { return run_rounds(rank, 2, port, log.logger()); });
  std::vector<RankOutcome> outcomes = join_all(host);
  outcomes.push_back(clients[0]->join());
  check_rounds(outcomes, 2);
}

TEST_CASE("tcp bootstrap: rank 0 on all addresses, ranks connecting by host name") {
  LogCapture log;
  const uint16_t port = net::pick_free_tcp_port();
  auto threads = start_ranks({0, 1, 2}, [&](int rank) {
    BootstrapOptions options = options_for(rank, 3, port);
    // Rank 0 binds 0.0.0.0; "localhost" may resolve to ::1 first, which the
    // clients must skip over to 127.0.0.1.
    options.host = rank == 0 ? "" : "localhost";
    auto bootstrap = make_tcp_bootstrap(options, log.logger());
    return std::vector<std::vector<std::byte>>{bootstrap->allgather(pattern(rank, 0, 3))};
  });
  std::vector<std::byte> expected;
  for (int rank = 0; rank < 3; ++rank) {
    std::vector<std::byte> block = pattern(rank, 0, 3);
    expected.insert(expected.end(), block.begin(), block.end());
  }
  for (const RankOutcome& outcome : join_all(threads)) {
    INFO(outcome.error);
    REQUIRE(outcome.ok);
    CHECK(outcome.results.at(0) == expected);
  }
  CHECK(log.contains("rank 0 is waiting for 2 ranks at 0.0.0.0:" + std::to_string(port)));
}

TEST_CASE("tcp bootstrap: options are checked and errors name the option") {
  LogCapture log;
  BootstrapOptions options = options_for(3, 2, 29500);
  CHECK_THROWS_WITH_AS(make_tcp_bootstrap(options, log.logger()),
                       doctest::Contains("options.rank = 3 is outside [0, 2)"), Error);
  options = options_for(0, 0, 29500);
  CHECK_THROWS_WITH_AS(make_tcp_bootstrap(options, log.logger()),
                       doctest::Contains("options.world_size = 0"), Error);
  options = options_for(0, 2, 0);
  CHECK_THROWS_WITH_AS(make_tcp_bootstrap(options, log.logger()),
                       doctest::Contains("options.port = 0"), Error);
  options = options_for(1, 2, 29500);
  options.host.clear();
  CHECK_THROWS_WITH_AS(make_tcp_bootstrap(options, log.logger()),
                       doctest::Contains("rank 1 has no options.host"), Error);
  options = options_for(1, 2, 29500, 0);
  CHECK_THROWS_WITH_AS(make_tcp_bootstrap(options, log.logger()),
                       doctest::Contains("options.timeout_s = 0"), Error);
  options = options_for(1, 2, 29500);
  options.job_token.assign(wire::kMaxTokenBytes + 1, 'x');
  CHECK_THROWS_WITH_AS(make_tcp_bootstrap(options, log.logger()),
                       doctest::Contains("options.job_token"), Error);
}

TEST_CASE("tcp bootstrap: an unresolvable rank 0 host is reported by name") {
  LogCapture log;
  // Depending on the resolver this fails at once (no such name) or after the
  // timeout (resolver unreachable); either way the message names the host.
  BootstrapOptions options = options_for(1, 2, 29500, 2);
  options.host = "no-such-host.invalid";
  CHECK_THROWS_WITH_AS(make_tcp_bootstrap(options, log.logger()),
                       doctest::Contains("no-such-host.invalid"), Error);
}

}  // namespace
}  // namespace courier::test
