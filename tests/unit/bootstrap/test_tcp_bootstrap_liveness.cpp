// Peer liveness of the TCP bootstrap: deaths between collectives are
// reported to watch_peers() subscribers on every surviving rank and make the
// next collective fail at once; an orderly goodbye is not a death.
#include <future>
#include <stdexcept>

#include "tests/unit/bootstrap/test_support.hpp"

namespace courier::test {
namespace {

// What a watch_peers() handler saw; waited for with a deadline.
class DeathRecord {
 public:
  PeerFailureHandler handler() {
    return [this](int rank, const std::string& reason) {
      std::lock_guard lock(mutex_);
      rank_ = rank;
      reason_ = reason;
      ++calls_;
      seen_.notify_all();
    };
  }
  bool wait() {
    std::unique_lock lock(mutex_);
    return seen_.wait_for(lock, kPatience, [&] { return calls_ > 0; });
  }
  int calls() {
    std::lock_guard lock(mutex_);
    return calls_;
  }
  int rank() {
    std::lock_guard lock(mutex_);
    return rank_;
  }
  std::string reason() {
    std::lock_guard lock(mutex_);
    return reason_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable seen_;
  int calls_ = 0;
  int rank_ = -1;
  std::string reason_;
};

// A rank 2 that joins by hand, so the test decides how it leaves.
RawClient join_by_hand(uint16_t port, int world_size) {
  RawClient client(port);
  client.send(hello_frame(2, world_size, kToken));
  REQUIRE(client.read_frame_type() == wire::FrameType::welcome);
  return client;
}

TEST_CASE("wire: a gone frame carries the dead rank and the message") {
  std::vector<std::byte> frame = wire::encode_gone_frame(7, "rank 7 is gone");
  wire::FrameHeader header = wire::decode_header(
      std::span<const std::byte, wire::kHeaderBytes>(frame.data(), wire::kHeaderBytes));
  CHECK(header.type == static_cast<uint16_t>(wire::FrameType::gone));
  CHECK(!wire::check_header(header, wire::kMaxNoticeBytes, "x"));
  std::optional<wire::Gone> gone =
      wire::decode_gone_payload(std::span(frame).subspan(wire::kHeaderBytes));
  REQUIRE(gone);
  CHECK(gone->rank == 7);
  CHECK(gone->message == "rank 7 is gone");
  CHECK(!wire::decode_gone_payload(std::vector<std::byte>(3)));
  CHECK(wire::to_string(wire::FrameType::goodbye) == "goodbye");
}

TEST_CASE("tcp bootstrap: a rank that dies between collectives is reported everywhere") {
  LogCapture log;
  const uint16_t port = net::pick_free_tcp_port();
  DeathRecord seen[2];
  std::promise<void> reported;
  std::shared_future<void> all_reported = reported.get_future().share();
  auto threads = start_ranks({0, 1}, [&](int rank) {
    auto bootstrap = make_tcp_bootstrap(options_for(rank, 3, port), log.logger());
    PeerWatch watch = bootstrap->watch_peers(seen[rank].handler());
    all_reported.wait();
    bootstrap->barrier();  // must throw the report at once
    return std::vector<std::vector<std::byte>>{};
  });
  {
    RawClient rank2 = join_by_hand(port, 3);
    rank2.close();  // no goodbye: a death
  }
  for (int rank = 0; rank < 2; ++rank) {
    INFO("rank ", rank);
    REQUIRE(seen[rank].wait());
    CHECK(seen[rank].rank() == 2);
    CHECK(seen[rank].reason().find("bootstrap: rank 2 (127.0.0.1:") != std::string::npos);
    CHECK(seen[rank].reason().find("is gone: its connection to the rendezvous") !=
          std::string::npos);
  }
  reported.set_value();
  std::vector<RankOutcome> outcomes = join_all(threads);
  for (int rank = 0; rank < 2; ++rank) {
    INFO("rank ", rank);
    CHECK(!outcomes[static_cast<size_t>(rank)].ok);
    CHECK(outcomes[static_cast<size_t>(rank)].error == seen[0].reason());
    CHECK(seen[rank].calls() == 1);
  }
}

// A rank whose transport failed a command for good tells the job through
// the bootstrap, between collectives or during one; every rank's handler
// gets the suspect and the text, and the next collective throws it.
void check_failure_report(int reporter, bool during_collective) {
  LogCapture log;
  const uint16_t port = net::pick_free_tcp_port();
  DeathRecord seen[3];
  std::promise<void> reported;
  std::shared_future<void> all_reported = reported.get_future().share();
  const std::string text = "rank " + std::to_string(reporter) + ": a write to rank 2 failed";
  auto threads = start_ranks({0, 1, 2}, [&](int rank) {
    auto bootstrap = make_tcp_bootstrap(options_for(rank, 3, port), log.logger());
    PeerWatch watch = bootstrap->watch_peers(seen[rank].handler());
    bootstrap->barrier();  // everybody subscribed
    if (rank == reporter) {
      bootstrap->report_failure(2, text);
    } else if (during_collective) {
      bootstrap->barrier();  // the reporter never joins it: the report ends it
    }
    all_reported.wait();
    bootstrap->barrier();  // must throw the report at once
    return std::vector<std::vector<std::byte>>{};
  });
  for (int rank = 0; rank < 3; ++rank) {
    INFO("rank ", rank);
    REQUIRE(seen[rank].wait());
    CHECK(seen[rank].rank() == 2);
    CHECK(seen[rank].reason() == text);
  }
  reported.set_value();
  std::vector<RankOutcome> outcomes = join_all(threads);
  for (int rank = 0; rank < 3; ++rank) {
    INFO("rank ", rank);
    CHECK(!outcomes[static_cast<size_t>(rank)].ok);
    CHECK(outcomes[static_cast<size_t>(rank)].error == text);
    CHECK(seen[rank].calls() == 1);
  }
}

TEST_CASE("tcp bootstrap: a rank's own failure reaches every rank, naming the suspect") {
  for (int reporter : {0, 1}) {
    for (bool during_collective : {false, true}) {
      CAPTURE(reporter);
      CAPTURE(during_collective);
      check_failure_report(reporter, during_collective);
    }
  }
}

TEST_CASE("tcp bootstrap: a goodbye is not a death") {
  LogCapture log(LogLevel::debug);
  const uint16_t port = net::pick_free_tcp_port();
  DeathRecord seen[2];
  std::promise<void> checked;
  std::shared_future<void> done = checked.get_future().share();
  auto threads = start_ranks({0, 1}, [&](int rank) {
    auto bootstrap = make_tcp_bootstrap(options_for(rank, 3, port), log.logger());
    PeerWatch watch = bootstrap->watch_peers(seen[rank].handler());
    done.wait();
    return std::vector<std::vector<std::byte>>{};
  });
  {
    RawClient rank2 = join_by_hand(port, 3);
    rank2.send(wire::encode_frame(wire::FrameType::goodbye, 0, {}));
  }  // and closes
  REQUIRE(log.wait_for("rank 2 (127.0.0.1:"));
  REQUIRE(log.wait_for("said goodbye"));
  // Rank 0 handled the goodbye (it logs after handling); a report would
  // have been made in the same step.
  CHECK(seen[0].calls() == 0);
  CHECK(seen[1].calls() == 0);
  checked.set_value();
  std::vector<RankOutcome> outcomes = join_all(threads);
  CHECK(outcomes[0].ok);
  CHECK(outcomes[1].ok);
}

TEST_CASE("tcp bootstrap: the other ranks report rank 0's death") {
  LogCapture log;
  const uint16_t port = net::pick_free_tcp_port();
  DeathRecord seen[3];
  std::promise<void> reported;
  std::shared_future<void> all_reported = reported.get_future().share();
  std::promise<void> joined[3];
  auto threads = start_ranks({0, 1, 2}, [&](int rank) {
    auto bootstrap = make_tcp_bootstrap(options_for(rank, 3, port), log.logger());
    PeerWatch watch = bootstrap->watch_peers(seen[rank].handler());
    joined[rank].set_value();
    if (rank == 0) {
      for (int other = 1; other < 3; ++other) joined[other].get_future().wait();
      // Destroyed while an exception unwinds the stack: no goodbye.
      auto failing = std::move(bootstrap);
      throw Error("rank 0 fails");
    }
    all_reported.wait();
    bootstrap->barrier();
    return std::vector<std::vector<std::byte>>{};
  });
  for (int rank = 1; rank < 3; ++rank) {
    INFO("rank ", rank);
    REQUIRE(seen[rank].wait());
    CHECK(seen[rank].rank() == 0);
    CHECK(seen[rank].reason().find("bootstrap: rank 0 (127.0.0.1:") != std::string::npos);
    CHECK(seen[rank].reason().find("closed without a goodbye") != std::string::npos);
  }
  reported.set_value();
  std::vector<RankOutcome> outcomes = join_all(threads);
  CHECK(outcomes[0].error == "rank 0 fails");
  for (int rank = 1; rank < 3; ++rank) {
    INFO("rank ", rank);
    CHECK(outcomes[static_cast<size_t>(rank)].error == seen[rank].reason());
  }
}

TEST_CASE("tcp bootstrap: a subscriber that comes late still hears of a death") {
  LogCapture log;
  const uint16_t port = net::pick_free_tcp_port();
  std::promise<void> dead;
  std::shared_future<void> rank2_dead = dead.get_future().share();
  DeathRecord seen;
  auto threads = start_ranks({0}, [&](int rank) {
    auto bootstrap = make_tcp_bootstrap(options_for(rank, 3, port), log.logger());
    rank2_dead.wait();
    // The barrier fails (rank 2 died), and the subscriber still hears of it.
    std::string error;
    try {
      bootstrap->barrier();
    } catch (const Error& e) {
      error = e.what();
    }
    PeerWatch watch = bootstrap->watch_peers(seen.handler());
    if (error.empty()) throw Error("the barrier succeeded without rank 2");
    return std::vector<std::vector<std::byte>>{};
  });
  auto rank1 = start_ranks({1}, [&](int rank) {
    auto bootstrap = make_tcp_bootstrap(options_for(rank, 3, port), log.logger());
    rank2_dead.wait();
    bootstrap->barrier();
    return std::vector<std::vector<std::byte>>{};
  });
  { RawClient rank2 = join_by_hand(port, 3); }  // closes without a goodbye
  dead.set_value();
  std::vector<RankOutcome> outcomes = join_all(threads);
  CHECK(outcomes[0].ok);
  REQUIRE(seen.wait());
  CHECK(seen.rank() == 2);
  std::vector<RankOutcome> other = join_all(rank1);
  CHECK(other[0].error.find("bootstrap: rank 2 (127.0.0.1:") != std::string::npos);
}

// A partition can cut a rank off from rank 0: its report_failure never
// reaches rank 0, and no relay ends the collective it waits in. Its own
// report must: here rank 0 is a stand-in that welcomes rank 1 and then
// never answers (rank 1's timeout is 30 s; the report comes after its block
// was sent).
TEST_CASE("tcp bootstrap: a rank's own failure ends the collective it waits in") {
  LogCapture log;
  bool fell_back = false;
  net::Fd listener = net::listen_tcp("127.0.0.1", 0, 4, &fell_back);
  const uint16_t port = net::local_port(listener);
  std::promise<void> finished;
  std::shared_future<void> done = finished.get_future().share();
  std::thread rank0([&] {
    net::Fd peer;
    std::string address;
    const auto give_up = std::chrono::steady_clock::now() + kPatience;
    while (!peer && std::chrono::steady_clock::now() < give_up) {
      peer = net::accept_tcp(listener, &address);
      if (!peer) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    if (!peer) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // its hello arrives
    (void)net::send_all(peer.get(), wire::encode_frame(wire::FrameType::welcome, 0, {}),
                        net::deadline_after(kPatience));
    done.wait();  // reads nothing more, answers nothing
  });
  auto rank1 = start_ranks({1}, [&](int rank) {
    auto bootstrap = make_tcp_bootstrap(options_for(rank, 2, port), log.logger());
    std::thread reporter([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      bootstrap->report_failure(0, "rank 1: a write to rank 0 failed");
    });
    try {
      bootstrap->barrier();
    } catch (...) {
      reporter.join();
      throw;
    }
    reporter.join();
    return std::vector<std::vector<std::byte>>{};
  });
  std::vector<RankOutcome> outcomes = join_all(rank1);
  finished.set_value();
  rank0.join();
  CHECK(!outcomes[0].ok);
  CHECK(outcomes[0].error ==
        "bootstrap: rank 1 stopped waiting for the result of allgather #1: it declared the job "
        "failed: rank 1: a write to rank 0 failed");
}

}  // namespace
}  // namespace courier::test
