// The HCA's processing thread. It sleeps in poll(2) until a doorbell (an
// eventfd the application threads write after posting), socket data or the
// next retry timer, then moves data: it transmits posted send WRs, applies
// incoming requests to this process's memory with no call from the
// application (a passive target, as real RDMA), and turns responses into
// completions.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>
#include <unordered_map>
#include <vector>

#include "fake_fd.hpp"
#include "fake_wire.hpp"

namespace courier::fake_verbs {

class Hca;

// Connections by peer HCA number, as the requester needs them.
class Links {
 public:
  virtual ~Links() = default;
  // The stream to HCA `number`, dialled on first use. nullptr when it cannot
  // be reached now; `refused` then says whether nobody owns that number (as
  // opposed to a busy peer).
  virtual Connection* connection_to(uint32_t number, bool& refused) = 0;
};

class Engine final : public Links {
 public:
  explicit Engine(Hca& hca) : hca_(hca) {}
  ~Engine() override { stop(); }
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Starts the thread, accepting on `listening` (already bound).
  void start(OwnedFd listening);
  // Stops and joins the thread; connections close (peers see EOF).
  void stop();
  // Wakes the thread: work was posted.
  void ring();

  Connection* connection_to(uint32_t number, bool& refused) override;

 private:
  void run();
  void accept_connections();
  void drop_closed_connections();

  Hca& hca_;
  OwnedFd listening_;
  OwnedFd doorbell_;
  std::thread thread_;
  std::atomic<bool> stopping_{false};
  std::vector<std::unique_ptr<Connection>> connections_;
  std::unordered_map<uint32_t, Connection*> dialled_;
  uint64_t next_connection_id_ = 1;
};

}  // namespace courier::fake_verbs
