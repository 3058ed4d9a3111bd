// Allgather results travel down the result tree (result_tree.hpp):
// rank 0 sends two copies, not one per rank; every rank receives one; a
// parent that dies fails its children naming it; a stranger on a tree link
// is refused without holding up the job; rank 0 failing right after it sent
// a result does not fail the ranks that result is still travelling to.
#include <doctest/doctest.h>

#include <cstring>
#include <functional>
#include <future>
#include <thread>

#include "core/bootstrap/result_tree.hpp"
#include "tests/unit/bootstrap/test_support.hpp"

namespace courier::test {
namespace {

std::vector<std::byte> concatenation(int world_size, int round, size_t size) {
  std::vector<std::byte> all;
  for (int from = 0; from < world_size; ++from) {
    std::vector<std::byte> block = pattern(from, round, size);
    all.insert(all.end(), block.begin(), block.end());
  }
  return all;
}

std::vector<std::byte> traffic_bytes(const Bootstrap::Traffic& traffic) {
  std::vector<std::byte> bytes(sizeof traffic);
  std::memcpy(bytes.data(), &traffic, sizeof traffic);
  return bytes;
}

Bootstrap::Traffic traffic_of(const std::vector<std::byte>& bytes) {
  Bootstrap::Traffic traffic;
  REQUIRE(bytes.size() == sizeof traffic);
  std::memcpy(&traffic, bytes.data(), sizeof traffic);
  return traffic;
}

TcpBootstrapTuning short_grace() {
  TcpBootstrapTuning tuning;
  tuning.reply_grace = std::chrono::milliseconds(500);
  return tuning;
}

// Joins as rank `rank` of `world` and returns the welcome's result-tree parent.
wire::TreeParent join_raw(RawClient& client, int rank, int world, uint16_t tree_port = 0) {
  client.send(hello_frame(rank, world, kToken, tree_port));
  wire::FrameReader welcome = client.read_frame();
  REQUIRE(welcome.header().type == static_cast<uint16_t>(wire::FrameType::welcome));
  std::optional<wire::TreeParent> parent = wire::decode_welcome_payload(welcome.payload());
  REQUIRE(parent.has_value());
  return *parent;
}

// Rank 1 of 4 by hand: joins with `tree_listener` as its result-tree port,
// contributes its block to allgather #1 and takes the result, passing it
// on to nobody.
void rank1_takes_result(RawClient& rank1, const net::Fd& tree_listener) {
  (void)join_raw(rank1, 1, 4, net::local_port(tree_listener));
  rank1.send(wire::encode_frame(wire::FrameType::block, 1, pattern(1, 0, 16)));
  CHECK(rank1.read_frame(1 << 20).header().type == static_cast<uint16_t>(wire::FrameType::result));
}

// Ranks 0, 2 and 3 of a 4-rank job whose rank 1 is hand-driven (its
// result-tree port is `tree_listener`), each on its thread: a bootstrap
// with `timeout_s(rank)` seconds of patience and `tuning`, allgather #1,
// then `after(rank, bootstrap)`. Each rank's results are allgather #1's.
std::vector<std::unique_ptr<RankThread>> start_all_but_rank1(
    uint16_t port, LogCapture& log, const std::function<int(int)>& timeout_s,
    const TcpBootstrapTuning& tuning, const std::function<void(int, Bootstrap&)>& after) {
  return start_ranks({0, 2, 3}, [&log, port, timeout_s, tuning, after](int rank) {
    std::unique_ptr<Bootstrap> bootstrap =
        make_tcp_bootstrap(options_for(rank, 4, port, timeout_s(rank)), log.logger(), tuning);
    std::vector<std::vector<std::byte>> results;
    results.push_back(bootstrap->allgather(pattern(rank, 0, 16)));
    after(rank, *bootstrap);
    return results;
  });
}

TEST_CASE("result tree: the heap order over ranks and when it is used") {
  CHECK(result_tree::parent_of(1) == 0);
  CHECK(result_tree::parent_of(2) == 0);
  CHECK(result_tree::parent_of(3) == 1);
  CHECK(result_tree::parent_of(6) == 2);
  CHECK(result_tree::has_children(4, 10));
  CHECK_FALSE(result_tree::has_children(5, 10));  // 11 would be its first child
  // Three ranks all hear from rank 0; a barrier's empty result stays one
  // round trip; any other result goes down the tree.
  CHECK_FALSE(result_tree::used_for(3, 1 << 20));
  CHECK_FALSE(result_tree::used_for(64, 0));
  CHECK(result_tree::used_for(4, 1));
  CHECK(result_tree::used_for(1024, 20));
}

TEST_CASE("tcp bootstrap: 11 ranks pass results down the tree; rank 0 sends two copies") {
  constexpr int kWorld = 11;  // three levels below rank 0, a rank with one child (4: 9, 10)
  const size_t sizes[] = {16, 0, 4096, 1};
  LogCapture log;
  const uint16_t port = net::pick_free_tcp_port();
  std::vector<int> ranks;
  for (int rank = 0; rank < kWorld; ++rank) ranks.push_back(rank);
  auto threads = start_ranks(ranks, [&](int rank) {
    std::unique_ptr<Bootstrap> bootstrap =
        make_tcp_bootstrap(options_for(rank, kWorld, port), log.logger());
    std::vector<std::vector<std::byte>> results;
    for (int round = 0; round < 4; ++round) {
      results.push_back(bootstrap->allgather(pattern(rank, round, sizes[round])));
    }
    bootstrap->barrier();
    results.push_back(traffic_bytes(bootstrap->traffic()));
    return results;
  });
  std::vector<RankOutcome> outcomes = join_all(threads);

  const uint64_t header = wire::kHeaderBytes;
  for (int rank = 0; rank < kWorld; ++rank) {
    const RankOutcome& outcome = outcomes[static_cast<size_t>(rank)];
    INFO("rank ", rank, ": ", outcome.error);
    REQUIRE(outcome.ok);
    REQUIRE(outcome.results.size() == 5);
    uint64_t sent = 0;
    uint64_t received = 0;
    const uint64_t children = (2 * rank + 1 < kWorld ? 1 : 0) + (2 * rank + 2 < kWorld ? 1 : 0);
    for (int round = 0; round < 5; ++round) {  // the barrier is an empty round
      const size_t size = round < 4 ? sizes[round] : 0;
      if (round < 4) {
        CHECK(outcome.results[static_cast<size_t>(round)] == concatenation(kWorld, round, size));
      }
      const uint64_t result = header + kWorld * size;
      if (rank == 0) {
        received += (kWorld - 1) * (header + size);
        sent += (size == 0 ? kWorld - 1 : 2) * result;  // small: everybody; large: ranks 1, 2
      } else {
        sent += header + size + (size == 0 ? 0 : children * result);
        received += result;  // once, from rank 0 or from its parent
      }
    }
    const Bootstrap::Traffic traffic = traffic_of(outcome.results[4]);
    CHECK(traffic.bytes_sent == sent);
    CHECK(traffic.bytes_received == received);
  }
}

TEST_CASE("tcp bootstrap: a tree parent that dies before passing a result on fails its child") {
  // World 4: rank 1 (hand-driven) is rank 3's parent. It takes the result
  // from rank 0 and dies without passing it on.
  LogCapture log;
  const uint16_t port = net::pick_free_tcp_port();
  bool fell_back = false;
  net::Fd tree_listener = net::listen_tcp("127.0.0.1", 0, 4, &fell_back);
  auto ranks = start_all_but_rank1(
      port, log, [](int) { return 10; }, TcpBootstrapTuning{},
      // Rank 1 is gone by now: the barrier fails on 0 and 2.
      [](int, Bootstrap& bootstrap) { bootstrap.barrier(); });
  {
    RawClient rank1(port);
    rank1_takes_result(rank1, tree_listener);
    tree_listener.reset();
    rank1.close();  // no goodbye: a death
  }
  std::vector<RankOutcome> outcomes = join_all(ranks);
  // Rank 3 never got the result; every rank's failure names rank 1.
  INFO("rank 0: ", outcomes[0].error, "\nrank 2: ", outcomes[1].error,
       "\nrank 3: ", outcomes[2].error);
  for (const RankOutcome& outcome : outcomes) {
    CHECK_FALSE(outcome.ok);
    CHECK(outcome.error.find("rank 1 (") != std::string::npos);
  }
  CHECK(outcomes[2].results.empty());
}

// A 4-rank job whose rank 3 is hand-driven: it joins, contributes its
// block, lets `before_link(parent)` act on its parent's tree port (rank 1's),
// then opens its link as itself and takes the result. Checks that every
// real rank completed and the result is right.
void rank3_by_hand(LogCapture& log,
                   const std::function<void(const wire::TreeParent&)>& before_link) {
  const uint16_t port = net::pick_free_tcp_port();
  auto ranks = start_ranks({0, 1, 2}, [&](int rank) {
    std::unique_ptr<Bootstrap> bootstrap =
        make_tcp_bootstrap(options_for(rank, 4, port), log.logger());
    return std::vector<std::vector<std::byte>>{bootstrap->allgather(pattern(rank, 0, 16))};
  });
  std::vector<std::byte> received;
  {
    RawClient rank3(port);
    const wire::TreeParent parent = join_raw(rank3, 3, 4);
    CHECK(parent.host == "127.0.0.1");
    REQUIRE(parent.port != 0);
    rank3.send(wire::encode_frame(wire::FrameType::block, 1, pattern(3, 0, 16)));
    before_link(parent);
    RawClient link(parent.port);
    link.send(hello_frame(3, 4, kToken));
    wire::FrameReader result = link.read_frame(1 << 20);
    CHECK(result.header().type == static_cast<uint16_t>(wire::FrameType::result));
    CHECK(result.header().sequence == 1);
    received = result.payload();
    rank3.send(wire::encode_frame(wire::FrameType::goodbye, 1, {}));
  }
  std::vector<RankOutcome> outcomes = join_all(ranks);
  for (const RankOutcome& outcome : outcomes) {
    INFO(outcome.error);
    CHECK(outcome.ok);
  }
  CHECK(received == concatenation(4, 0, 16));
}

TEST_CASE("tcp bootstrap: rank 0 failing right after a collective does not fail its result's way") {
  // World 4: rank 0 sends allgather #1's result to ranks 1 and 2 and fails
  // at once (its bootstrap goes while an exception unwinds: no goodbye).
  // Rank 3 (hand-driven) opens its link to rank 1 only after that: rank 1
  // holds the result and passes it on; rank 0's end is not this
  // collective's failure.
  LogCapture log;
  const uint16_t port = net::pick_free_tcp_port();
  std::promise<void> rank0_gone;
  std::future<void> rank0_gone_seen = rank0_gone.get_future();
  auto ranks = start_ranks({0, 1, 2}, [&](int rank) {
    if (rank != 0) {
      std::unique_ptr<Bootstrap> bootstrap =
          make_tcp_bootstrap(options_for(rank, 4, port, 10), log.logger());
      return std::vector<std::vector<std::byte>>{bootstrap->allgather(pattern(rank, 0, 16))};
    }
    std::vector<std::byte> result;
    try {
      std::unique_ptr<Bootstrap> bootstrap =
          make_tcp_bootstrap(options_for(0, 4, port, 10), log.logger());
      result = bootstrap->allgather(pattern(0, 0, 16));
      throw Error("rank 0 fails right after allgather #1");
    } catch (const Error&) {
      // The bootstrap went while the error unwound.
    }
    rank0_gone.set_value();
    return std::vector<std::vector<std::byte>>{result};
  });
  std::vector<std::byte> received;
  {
    RawClient rank3(port);
    const wire::TreeParent parent = join_raw(rank3, 3, 4);
    REQUIRE(parent.port != 0);
    rank3.send(wire::encode_frame(wire::FrameType::block, 1, pattern(3, 0, 16)));
    rank0_gone_seen.wait();
    // Rank 1, waiting for this link, looks at rank 0's connection every
    // 100 ms: let it see the end first.
    std::this_thread::sleep_for(std::chrono::milliseconds(400));
    RawClient link(parent.port);
    link.send(hello_frame(3, 4, kToken));
    wire::FrameReader result = link.read_frame(1 << 20);
    CHECK(result.header().type == static_cast<uint16_t>(wire::FrameType::result));
    received = result.payload();
  }
  std::vector<RankOutcome> outcomes = join_all(ranks);
  const std::vector<std::byte> expected = concatenation(4, 0, 16);
  for (const RankOutcome& outcome : outcomes) {
    INFO(outcome.error);
    REQUIRE(outcome.ok);
    REQUIRE(outcome.results.size() == 1);
    CHECK(outcome.results[0] == expected);
  }
  CHECK(received == expected);
}

TEST_CASE("tcp bootstrap: a tree wait ends soon after rank 0's end when the result is not coming") {
  // World 4: rank 1 (hand-driven) takes the result from rank 0 and holds
  // it back; rank 0 then fails (no goodbye). Rank 3 waits on its link to
  // rank 1 with 30 s of patience, but fails once the grace after rank 0's
  // end has passed, naming rank 0.
  LogCapture log;
  const uint16_t port = net::pick_free_tcp_port();
  bool fell_back = false;
  net::Fd tree_listener = net::listen_tcp("127.0.0.1", 0, 4, &fell_back);
  auto ranks = start_all_but_rank1(
      port, log, [](int) { return 30; }, short_grace(),
      [](int rank, Bootstrap&) {
        if (rank == 0) throw Error("rank 0 fails right after allgather #1");
      });
  RawClient rank1(port);
  rank1_takes_result(rank1, tree_listener);
  std::vector<RankOutcome> outcomes = join_all(ranks);
  INFO("rank 0: ", outcomes[0].error, "\nrank 2: ", outcomes[1].error,
       "\nrank 3: ", outcomes[2].error);
  CHECK(outcomes[0].error == "rank 0 fails right after allgather #1");
  CHECK(outcomes[1].ok);  // rank 2 had its result from rank 0
  CHECK_FALSE(outcomes[2].ok);
  CHECK(outcomes[2].error.find("rank 3 lost its connection to rank 0 at") != std::string::npos);
  CHECK(outcomes[2].error.find("while waiting for the result of allgather #1: rank 0 closed") !=
        std::string::npos);
}

TEST_CASE("tcp bootstrap: a stranger on a tree link is refused and the job goes on") {
  // Rank 3 knocks with the wrong token first.
  LogCapture log;
  rank3_by_hand(log, [](const wire::TreeParent& parent) {
    RawClient stranger(parent.port);
    stranger.send(hello_frame(3, 4, "not-the-job-token"));
    CHECK(stranger.read_refusal().empty());  // closed, nothing said
  });
  CHECK(log.contains("refused a result-tree connection"));
  CHECK(log.contains("wrong job token"));
}

TEST_CASE("tcp bootstrap: idle connections on a tree port do not lock the real child out") {
  // More idle connections than the parent keeps waiting at once, open
  // while rank 3 connects.
  LogCapture log;
  std::vector<std::unique_ptr<RawClient>> idle;
  rank3_by_hand(log, [&](const wire::TreeParent& parent) {
    for (int i = 0; i < 20; ++i) idle.push_back(std::make_unique<RawClient>(parent.port));
  });
  CHECK(log.contains("the oldest goes"));
}

TEST_CASE("tcp bootstrap: a child that stops reading fails the job, not its sibling") {
  // World 5: rank 1's children are rank 3 (hand-driven: it opens its link
  // and never reads) and rank 4. Blocks of 1 MiB fill rank 3's socket.
  // Rank 1 gives up first (2 s), the others would wait 30 s.
  LogCapture log;
  const uint16_t port = net::pick_free_tcp_port();
  constexpr size_t kBlock = size_t{1} << 20;
  std::vector<std::vector<std::byte>> got(5);
  auto ranks = start_ranks({0, 1, 2, 4}, [&](int rank) {
    std::unique_ptr<Bootstrap> bootstrap = make_tcp_bootstrap(
        options_for(rank, 5, port, rank == 1 ? 2 : 30), log.logger(), short_grace());
    got[static_cast<size_t>(rank)] = bootstrap->allgather(pattern(rank, 0, kBlock));
    bootstrap->barrier();  // rank 1 reported rank 3 by now: this fails
    return std::vector<std::vector<std::byte>>{};
  });
  RawClient rank3(port);
  const wire::TreeParent parent = join_raw(rank3, 3, 5);
  rank3.send(wire::encode_frame(wire::FrameType::block, 1, pattern(3, 0, kBlock)));
  RawClient link(parent.port);
  link.send(hello_frame(3, 5, kToken));
  std::vector<RankOutcome> outcomes = join_all(ranks);  // rank 3 reads nothing meanwhile
  const std::vector<std::byte> expected = concatenation(5, 0, kBlock);
  for (const RankOutcome& outcome : outcomes) {
    INFO(outcome.error);
    CHECK_FALSE(outcome.ok);
    CHECK(outcome.error.find("on to rank 3, which took") != std::string::npos);
  }
  // Every rank got its result, rank 4 (rank 3's sibling) included.
  for (int rank : {0, 1, 2, 4}) {
    INFO("rank ", rank);
    CHECK(got[static_cast<size_t>(rank)] == expected);
  }
  CHECK(log.contains("passing the result of allgather #1 on to rank 3"));
}

TEST_CASE("tcp bootstrap: a parent that holds a result back is named to every rank") {
  // World 4: rank 1 (hand-driven) takes the result from rank 0, stays
  // connected and never passes it on to rank 3. Rank 3 gives up first
  // (2 s), the others would wait 30 s.
  LogCapture log;
  const uint16_t port = net::pick_free_tcp_port();
  bool fell_back = false;
  net::Fd tree_listener = net::listen_tcp("127.0.0.1", 0, 4, &fell_back);
  auto ranks = start_all_but_rank1(
      port, log, [](int rank) { return rank == 3 ? 2 : 30; }, short_grace(),
      [](int, Bootstrap& bootstrap) { bootstrap.barrier(); });
  RawClient rank1(port);
  rank1_takes_result(rank1, tree_listener);
  std::vector<RankOutcome> outcomes = join_all(ranks);
  INFO("rank 0: ", outcomes[0].error, "\nrank 2: ", outcomes[1].error,
       "\nrank 3: ", outcomes[2].error);
  for (const RankOutcome& outcome : outcomes) {
    CHECK_FALSE(outcome.ok);
    CHECK(outcome.error.find("rank 3 timed out after 2 s waiting for rank 1 at") !=
          std::string::npos);
  }
  CHECK(outcomes[2].results.empty());  // rank 3 never got it
}

}  // namespace
}  // namespace courier::test
