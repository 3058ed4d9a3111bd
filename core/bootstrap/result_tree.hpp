// How the TCP bootstrap spreads an allgather's result (docs/bootstrap.md,
// "The result tree"). Rank 0 sending the result to every rank itself would
// send world_size results, quadratic in the job (100-byte blocks at 1024
// ranks: about 100 MB per allgather); along a binary tree every rank
// receives the result once and passes it on to at most two others.
//
// The tree is the heap order over ranks: rank r's parent is (r - 1) / 2,
// its children are 2r + 1 and 2r + 2. Ranks 1 and 2 get the result from
// rank 0 over their rendezvous connections, as every rank does for small
// jobs; every other rank gets it from its parent over a link it opens on
// the first allgather that needs it. A parent listens from the start: its
// port travels in its hello, its address in its children's welcome.
#pragma once

#include <poll.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/bootstrap/bootstrap.hpp"
#include "core/bootstrap/bootstrap_wire.hpp"
#include "core/bootstrap/socket.hpp"
#include "core/check.hpp"

namespace courier {

class Logger;

namespace result_tree {

constexpr int parent_of(int rank) { return (rank - 1) / 2; }
constexpr bool has_children(int rank, int world) { return 2 * rank + 1 < world; }
// Whether an allgather of `block_bytes` per rank spreads its result along
// the tree: whenever there is a result and a rank below ranks 1 and 2.
// (A barrier's empty result costs rank 0 a header per rank: it stays one
// round trip.) Every rank decides alike from its own block size; ranks
// whose sizes differ fail the allgather at rank 0 before any result is sent.
constexpr bool used_for(int world, uint64_t block_bytes) { return world >= 4 && block_bytes > 0; }

}  // namespace result_tree

// A failure of a tree link itself (a parent that closed it, a child that
// never opened it): the caller may find a better explanation from rank 0,
// else reports `suspect` to every rank.
class TreeLinkError : public Error {
 public:
  TreeLinkError(int suspect, const std::string& message) : Error(message), suspect_(suspect) {}
  int suspect() const { return suspect_; }

 private:
  int suspect_;
};

// One non-zero rank's links in the result tree. Used only inside the
// rendezvous client's collectives, on its thread.
class ResultTreeLinks {
 public:
  // What a wait also watches: `fd()` (rank 0's connection, -1 for none) and
  // `check()`, called whenever that fd is readable and at least every
  // 100 ms; check() throws to end the wait (rank 0 reported a failure).
  struct Aside {
    std::function<int()> fd;
    std::function<void()> check;
    // Rank 0's connection ended (check saw it): a parent that refuses
    // connections is gone for good, not starting.
    std::function<bool()> rank0_gone;
  };

  ResultTreeLinks(const BootstrapOptions& options, Logger& log);

  // Before the hello: a rank with children listens on every address of
  // the family of `rendezvous` (its connection to rank 0; children come to
  // the address rank 0 sees it at) and returns the port, else 0.
  uint16_t listen(const net::Fd& rendezvous);
  // From the welcome: the parent's listener (ranks 3 and up).
  void set_parent(wire::TreeParent parent) { parent_ = std::move(parent); }

  // The payload of collective `sequence`'s result (`expected` bytes) from
  // the parent, connecting to it first the first time.
  std::vector<std::byte> receive(uint64_t sequence, uint64_t expected, net::Deadline deadline,
                                 const Aside& aside);
  // Passes the result frame on to the children, to both at once, accepting
  // their links first the first time. A child whose link fails is logged
  // and skipped (its death is for rank 0 to announce); one still holding
  // bytes at the deadline is returned, with why, for the caller to report.
  struct Stuck {
    int rank = -1;
    std::string message;
  };
  std::vector<Stuck> forward(std::span<const std::byte> frame, uint64_t sequence,
                             net::Deadline deadline, const Aside& aside);

  uint64_t bytes_sent() const { return sent_; }
  uint64_t bytes_received() const { return received_; }

 private:
  struct Child {
    int rank = -1;
    net::Fd fd;
  };
  void connect_parent(net::Deadline deadline, const Aside& aside);
  void accept_children(uint64_t sequence, net::Deadline deadline, const Aside& aside);
  // The child rank a complete frame greets as, or -1 with *reason.
  int child_hello(wire::FrameReader& reader, const std::vector<int>& awaited,
                  std::string* reason) const;
  // Waits until one of `fds` has an event (true) or the deadline passed
  // (false), serving `aside` meanwhile.
  bool wait_until(std::vector<pollfd>& fds, net::Deadline deadline, const Aside& aside);
  // The same, throwing TreeLinkError naming `suspect` and saying this rank
  // timed out `waiting_for` at the deadline.
  void wait(std::vector<pollfd>& fds, net::Deadline deadline, const Aside& aside,
            const std::string& waiting_for, int suspect);
  std::string parent_address() const;

  BootstrapOptions options_;
  Logger& log_;
  net::Fd listener_;
  std::optional<wire::TreeParent> parent_;
  net::Fd parent_fd_;
  wire::FrameReader parent_reader_{wire::kMaxNoticeBytes, "the expected result size"};
  std::vector<Child> children_;  // connected, in rank order
  bool children_complete_ = false;
  std::atomic<uint64_t> sent_{0};  // read by traffic() from any thread
  std::atomic<uint64_t> received_{0};
};

}  // namespace courier
