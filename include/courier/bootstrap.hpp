// The bootstrap as Courier's callers see it: how the ranks of a job
// exchange small messages before (and beside) the data path. A Context gets
// one from its launcher (the TCP rendezvous or MPI, core/bootstrap/), or from
// the caller, who implements this interface over what the job already has
// (the Python binding: a torch.distributed process group). Every operation is
// collective: every rank calls the same operations in the same order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace courier {

// Called when the bootstrap learns that another rank of the job died (its
// connection to the rendezvous closed without a goodbye): `rank` is the dead
// rank, `reason` a message naming it. Runs on the bootstrap's monitor thread
// or inside a collective, at most once per bootstrap.
using PeerFailureHandler = std::function<void(int rank, const std::string& reason)>;

// A subscription to peer failures; cancelled on destruction (a handler call
// in progress finishes first, none follows).
class PeerWatch {
 public:
  PeerWatch() = default;
  explicit PeerWatch(std::function<void()> cancel) : cancel_(std::move(cancel)) {}
  PeerWatch(PeerWatch&& other) noexcept : cancel_(std::exchange(other.cancel_, nullptr)) {}
  PeerWatch& operator=(PeerWatch&& other) noexcept {
    if (this != &other) {
      reset();
      cancel_ = std::exchange(other.cancel_, nullptr);
    }
    return *this;
  }
  PeerWatch(const PeerWatch&) = delete;
  PeerWatch& operator=(const PeerWatch&) = delete;
  ~PeerWatch() { reset(); }
  void reset() {
    if (cancel_) std::exchange(cancel_, nullptr)();
  }

 private:
  std::function<void()> cancel_;
};

class Bootstrap {
 public:
  virtual ~Bootstrap() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // "tcp" or "mpi".
  virtual std::string_view kind() const = 0;
  // Every rank contributes `mine` (all ranks the same number of bytes); the
  // result holds size() blocks ordered by rank. A rank contributing a
  // different size is an Error naming that rank.
  virtual std::vector<std::byte> allgather(std::span<const std::byte> mine) = 0;
  virtual void barrier() = 0;
  // What this rank's collectives have moved over its own connections so
  // far, frame headers included: the part of the bootstrap's work that grows
  // with the job (courier-bench scale reports it). Zero where the bootstrap
  // cannot tell (MPI, a caller's own).
  struct Traffic {
    uint64_t bytes_sent = 0;
    uint64_t bytes_received = 0;
  };
  virtual Traffic traffic() const { return {}; }
  // Subscribes to peer deaths (docs/bootstrap.md, "Liveness"). The TCP
  // bootstrap reports them; MPI and single-process bootstraps never do
  // (MPI jobs are torn down by their launcher).
  virtual PeerWatch watch_peers(PeerFailureHandler handler) {
    (void)handler;
    return {};
  }
  // This rank failed in a way its peers cannot see (a transport failure
  // toward `suspect`, -1 when unknown): every rank's watch_peers handler
  // gets (suspect, message), as for a death. Best effort, at most once;
  // callable from any thread. The TCP bootstrap relays it through rank 0;
  // MPI and single-process bootstraps do nothing.
  virtual void report_failure(int suspect, const std::string& message) {
    (void)suspect;
    (void)message;
  }
};

}  // namespace courier
