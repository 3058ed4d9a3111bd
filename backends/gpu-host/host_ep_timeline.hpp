// COURIER_HOST_EP_TIMELINE=1: where a CPU rank's EP call goes. Every proxy
// kernel gpu-host runs records its wall time and how much of it its blocks
// spent waiting for other agents (peers' signals, this rank's own WRITEs:
// wait_all and send_wait), the longest block's wait. The backend prints the
// medians per kernel to stderr when it is unloaded. Off (the default),
// nothing is recorded.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace courier::host_gpu {

class EpTimeline {
 public:
  void enable() { on_ = true; }
  bool on() const { return on_; }
  void record(const std::string& kernel, uint64_t total_ns, uint64_t waited_ns);
  // One line per kernel, as first seen (empty when off or unused).
  std::string summary() const;

 private:
  struct Samples {
    std::vector<double> total_us, waited_us;
  };
  bool on_ = false;
  mutable std::mutex lock_;
  std::vector<std::string> order_;
  std::map<std::string, Samples> samples_;
};

}  // namespace courier::host_gpu
