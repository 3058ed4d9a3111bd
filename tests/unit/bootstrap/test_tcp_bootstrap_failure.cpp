// Job failures: every surviving rank must fail, and with a message that names
// the rank at fault.
#include <doctest/doctest.h>

#include <future>
#include <string>

#include "tests/unit/bootstrap/test_support.hpp"

namespace courier::test {
namespace {

void check_all_failed_alike(const std::vector<RankOutcome>& outcomes, const std::string& needle) {
  REQUIRE(!outcomes.empty());
  for (const RankOutcome& outcome : outcomes) {
    INFO("error: ", outcome.error);
    CHECK_FALSE(outcome.ok);
    CHECK(outcome.error.find(needle) != std::string::npos);
    CHECK(outcome.error == outcomes[0].error);
  }
}

TEST_CASE("tcp bootstrap: a size mismatch fails every rank, naming the rank") {
  LogCapture log;
  const uint16_t port = net::pick_free_tcp_port();
  auto threads = start_ranks({0, 1, 2}, [&](int rank) {
    std::unique_ptr<Bootstrap> bootstrap =
        make_tcp_bootstrap(options_for(rank, 3, port), log.logger());
    // One good round first, so the failure is in allgather #2.
    bootstrap->allgather(pattern(rank, 0, 4));
    try {
      bootstrap->allgather(pattern(rank, 1, rank == 2 ? 5 : 4));
    } catch (const Error& first) {
      // The bootstrap is unusable afterwards and says why.
      try {
        bootstrap->barrier();
      } catch (const Error& again) {
        if (std::string(again.what()) != first.what()) throw Error("second error differs");
      }
      throw;
    }
    return std::vector<std::vector<std::byte>>{};
  });
  check_all_failed_alike(
      join_all(threads),
      "bootstrap: allgather #2: rank 2 contributed 5 bytes while the other ranks "
      "contributed 4 bytes each");
}

TEST_CASE("tcp bootstrap: a block above max_message_bytes fails every rank, naming the rank") {
  LogCapture log;
  const uint16_t port = net::pick_free_tcp_port();
  auto threads = start_ranks({0, 1, 2}, [&](int rank) {
    BootstrapOptions options = options_for(rank, 3, port);
    options.max_message_bytes = 1024;
    std::unique_ptr<Bootstrap> bootstrap = make_tcp_bootstrap(options, log.logger());
    return std::vector<std::vector<std::byte>>{
        bootstrap->allgather(pattern(rank, 0, rank == 1 ? 4096 : 16))};
  });
  std::vector<RankOutcome> outcomes = join_all(threads);
  check_all_failed_alike(outcomes, "bootstrap: rank 1 (127.0.0.1:");
  CHECK(outcomes[0].error.find("sent a bad message in allgather #1: oversized message: length "
                               "field 4096 exceeds the 1024-byte limit (max_message_bytes)") !=
        std::string::npos);
}

TEST_CASE("tcp bootstrap: a join timeout names the missing ranks on every rank") {
  LogCapture log;
  const uint16_t port = net::pick_free_tcp_port();
  // Ranks 1 and 3 of 4 never start.
  auto threads = start_ranks({0, 2}, [&](int rank) {
    make_tcp_bootstrap(options_for(rank, 4, port, /*timeout_s=*/2), log.logger());
    return std::vector<std::vector<std::byte>>{};
  });
  check_all_failed_alike(
      join_all(threads),
      "bootstrap: timed out after 2 s waiting for ranks 1, 3 to join 127.0.0.1:" +
          std::to_string(port));
}

TEST_CASE("tcp bootstrap: an allgather timeout names the ranks that did not contribute") {
  LogCapture log;
  const uint16_t port = net::pick_free_tcp_port();
  std::promise<void> others_done;
  std::shared_future<void> others_done_future = others_done.get_future().share();
  auto quiet = start_ranks({2}, [&](int rank) {
    // Joins, then stays connected without calling allgather until the
    // others have given up.
    auto bootstrap = make_tcp_bootstrap(options_for(rank, 3, port, 2), log.logger());
    others_done_future.wait();
    return std::vector<std::vector<std::byte>>{};
  });
  auto threads = start_ranks({0, 1}, [&](int rank) {
    auto bootstrap = make_tcp_bootstrap(options_for(rank, 3, port, 2), log.logger());
    return std::vector<std::vector<std::byte>>{bootstrap->allgather(pattern(rank, 0, 8))};
  });
  std::vector<RankOutcome> outcomes = join_all(threads);
  others_done.set_value();
  REQUIRE(quiet[0]->join().ok);
  check_all_failed_alike(outcomes,
                         "bootstrap: timed out after 2 s in allgather #1 waiting for rank 2 at "
                         "127.0.0.1:" +
                             std::to_string(port));
}

TEST_CASE("tcp bootstrap: a rank that dies mid-job is named on the surviving ranks") {
  LogCapture log;
  const uint16_t port = net::pick_free_tcp_port();
  auto threads = start_ranks({0, 1, 2}, [&](int rank) {
    auto bootstrap = make_tcp_bootstrap(options_for(rank, 3, port), log.logger());
    bootstrap->barrier();
    if (rank == 2) return std::vector<std::vector<std::byte>>{};  // "dies": closes its socket
    return std::vector<std::vector<std::byte>>{bootstrap->allgather(pattern(rank, 1, 8))};
  });
  std::vector<RankOutcome> outcomes = join_all(threads);
  CHECK(outcomes[2].ok);
  outcomes.pop_back();
  check_all_failed_alike(outcomes, "bootstrap: rank 2 (127.0.0.1:");
  CHECK(outcomes[0].error.find("disconnected during allgather #2") != std::string::npos);
}

TEST_CASE("tcp bootstrap: a rank that dies while the others join is named") {
  LogCapture log;
  const uint16_t port = net::pick_free_tcp_port();
  // Ranks 0 and 2 of 4 run; rank 3 has not arrived yet.
  auto threads = start_ranks({0, 2}, [&](int rank) {
    make_tcp_bootstrap(options_for(rank, 4, port), log.logger());
    return std::vector<std::vector<std::byte>>{};
  });
  REQUIRE(log.wait_for("rank 2 joined from"));
  {
    // Rank 1 says a correct hello and disappears before the job starts.
    RawClient rank1(port);
    rank1.send(hello_frame(1, 4, kToken));
    REQUIRE(log.wait_for("rank 1 joined from"));
  }
  std::vector<RankOutcome> outcomes = join_all(threads);
  check_all_failed_alike(outcomes, "bootstrap: rank 1 (127.0.0.1:");
  CHECK(outcomes[0].error.find("disconnected from 127.0.0.1:" + std::to_string(port) +
                               " before all ranks joined") != std::string::npos);
}

TEST_CASE("tcp bootstrap: the loss of rank 0 is reported on the other ranks") {
  LogCapture log;
  const uint16_t port = net::pick_free_tcp_port();
  auto threads = start_ranks({0, 1, 2}, [&](int rank) {
    auto bootstrap = make_tcp_bootstrap(options_for(rank, 3, port), log.logger());
    bootstrap->barrier();
    if (rank == 0) return std::vector<std::vector<std::byte>>{};
    return std::vector<std::vector<std::byte>>{bootstrap->allgather(pattern(rank, 1, 8))};
  });
  std::vector<RankOutcome> outcomes = join_all(threads);
  CHECK(outcomes[0].ok);
  for (int rank = 1; rank < 3; ++rank) {
    INFO("rank ", rank, ": ", outcomes[static_cast<size_t>(rank)].error);
    CHECK(outcomes[static_cast<size_t>(rank)].error.find(
              "lost its connection to rank 0 at 127.0.0.1:") != std::string::npos);
  }
}

TEST_CASE("tcp bootstrap: a rank out of step with the others is a protocol error") {
  LogCapture log;
  const uint16_t port = net::pick_free_tcp_port();
  auto host = start_ranks({0}, [&](int rank) {
    auto bootstrap = make_tcp_bootstrap(options_for(rank, 2, port), log.logger());
    return std::vector<std::vector<std::byte>>{bootstrap->allgather(pattern(rank, 0, 8))};
  });
  // A hand-driven rank 1 joins properly, then sends the block of allgather
  // #5 while rank 0 is in allgather #1.
  RawClient rank1(port);
  rank1.send(hello_frame(1, 2, kToken));
  CHECK(rank1.read_frame_type() == wire::FrameType::welcome);
  rank1.send(wire::encode_frame(wire::FrameType::block, 5, pattern(1, 0, 8)));
  std::string error = rank1.read_refusal();
  CHECK(error.find("protocol error: rank 1 (127.0.0.1:") != std::string::npos);
  CHECK(error.find("sent a block message #5 during allgather #1") != std::string::npos);
  CHECK(host[0]->join().error == error);
}

}  // namespace
}  // namespace courier::test
