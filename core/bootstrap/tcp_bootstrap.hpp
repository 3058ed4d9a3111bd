// Internals of the TCP bootstrap shared by its source files and its tests.
// Users call make_tcp_bootstrap(options, log) from bootstrap.hpp.
//
// Rank 0 hosts the rendezvous (tcp_rendezvous_host.cpp): it accepts one
// connection per rank, then serves each collective by gathering every rank's
// block and sending the concatenation back: to ranks 1 and 2, which pass it
// down a binary tree of the ranks (result_tree.hpp), or to every rank in
// jobs of 2 and 3 ranks and for barriers. The other ranks are clients of it
// (tcp_rendezvous_client.cpp). The collectives' work happens inside the
// calls, bounded by deadlines; between them a monitor thread on each rank
// watches the connections (peer_liveness.hpp).
#pragma once

#include <chrono>
#include <memory>

#include "core/bootstrap/bootstrap.hpp"

namespace courier {

// Timing knobs that are not part of BootstrapOptions; tests shorten them.
struct TcpBootstrapTuning {
  // Rank 0 refuses a connection that has not delivered a complete hello this
  // long after it was accepted (capped at options.timeout_s). Real ranks send
  // their hello right after connecting; this bounds silent or stalled peers.
  std::chrono::milliseconds hello_timeout{10'000};
  // Ranks other than 0 wait this much longer than options.timeout_s for rank
  // 0's reply, so that rank 0's own timeout report, which names the missing
  // ranks, normally reaches them before they give up on their own. Also how
  // long a wait on the result tree goes on after rank 0's connection ended
  // without a goodbye (the result it sent needs milliseconds to arrive).
  std::chrono::milliseconds reply_grace{3'000};
};

std::unique_ptr<Bootstrap> make_tcp_bootstrap(const BootstrapOptions& options, Logger& log,
                                              const TcpBootstrapTuning& tuning);

// The two roles; `options` has been validated by make_tcp_bootstrap.
std::unique_ptr<Bootstrap> make_tcp_rendezvous_host(const BootstrapOptions& options, Logger& log,
                                                    const TcpBootstrapTuning& tuning);
std::unique_ptr<Bootstrap> make_tcp_rendezvous_client(const BootstrapOptions& options, Logger& log,
                                                      const TcpBootstrapTuning& tuning);

}  // namespace courier
