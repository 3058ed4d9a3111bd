// Peer liveness for the TCP bootstrap: the pieces both roles share.
//
// Every rank keeps its connection to rank 0's rendezvous open for the job's
// lifetime. Between collectives a ConnectionMonitor thread watches it: rank 0
// learns that a rank died when its connection closes without a goodbye and
// tells the others with a "gone" frame; a rank that loses rank 0 concludes
// that rank 0 died. A PeerFailureNotifier hands the first such death to
// whoever subscribed (the Context, which then fails its channels).
#pragma once

#include <poll.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "core/bootstrap/bootstrap.hpp"
#include "core/bootstrap/socket.hpp"

namespace courier {

// Remembers the first peer death and delivers it once to the subscriber,
// whichever comes first. Thread-safe.
class PeerFailureNotifier {
 public:
  // Records the failure (only the first one counts) and calls the handler.
  void report(int rank, const std::string& reason);
  // Subscribes `handler`; calls it at once when a failure was already
  // recorded. The handler runs under this object's lock, so cancelling the
  // returned PeerWatch waits for a call in progress and none follows.
  PeerWatch subscribe(const std::shared_ptr<PeerFailureNotifier>& self, PeerFailureHandler handler);

 private:
  std::mutex mutex_;
  PeerFailureHandler handler_;
  std::optional<std::pair<int, std::string>> failure_;
  bool delivered_ = false;
};

// Runs a watch over a role's connections on its own thread, but only while
// no collective uses them: a collective holds an Exclusive for its duration,
// and the monitor keeps off the sockets meanwhile (the collective reads
// whatever arrives itself). The thread blocks in poll(2); a wake-up pipe and
// a timeout let the destructor stop it promptly.
class ConnectionMonitor {
 public:
  struct Hooks {
    // The descriptors to watch now (called under the monitor's lock); empty
    // means nothing left to watch until the next collective ends.
    std::function<std::vector<pollfd>()> watch;
    // Handles poll's answer for exactly those descriptors (under the lock,
    // never while a collective runs). Returns false to stop watching until
    // the next collective ends.
    std::function<bool(std::span<const pollfd>)> handle;
  };

  explicit ConnectionMonitor(Hooks hooks,
                             std::chrono::milliseconds tick = std::chrono::milliseconds(1000));
  ~ConnectionMonitor();
  ConnectionMonitor(const ConnectionMonitor&) = delete;
  ConnectionMonitor& operator=(const ConnectionMonitor&) = delete;

  // Calls the watch hook again soon (from any thread): something it looks
  // at changed.
  void wake();

  // Held by a collective: the monitor neither reads nor writes meanwhile.
  class Exclusive {
   public:
    explicit Exclusive(ConnectionMonitor* monitor);
    ~Exclusive();
    Exclusive(const Exclusive&) = delete;
    Exclusive& operator=(const Exclusive&) = delete;

   private:
    ConnectionMonitor* monitor_;
  };

 private:
  void run();

  Hooks hooks_;
  std::chrono::milliseconds tick_;
  net::Fd wake_read_;
  net::Fd wake_write_;
  std::mutex mutex_;
  std::condition_variable changed_;
  bool stopping_ = false;
  bool busy_ = false;
  // Bumped by every collective: poll answers from before it are stale.
  uint64_t generation_ = 0;
  // The generation at which the watch went dormant (nothing to watch).
  std::optional<uint64_t> dormant_since_;
  std::thread thread_;
};

}  // namespace courier
