// One endpoint: a listening socket (its address), a stream to every peer,
// the streams peers opened to it, its registered memory and its completion
// queue. A NIC's endpoint is a set of queue pairs and a CQ.
#pragma once

#include <courier/abi/nic_v1.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "skeleton_completions.hpp"
#include "skeleton_link.hpp"
#include "skeleton_memory.hpp"
#include "skeleton_socket.hpp"
#include "skeleton_wire.hpp"

namespace courier::skeleton {

class Backend;

class Endpoint {
 public:
  static int open(const Backend& backend, const courier_nic_ep_attr_v1& attr,
                  std::unique_ptr<Endpoint>* out);
  Endpoint(const Endpoint&) = delete;
  Endpoint& operator=(const Endpoint&) = delete;

  int name(void* buffer, size_t* length) const;
  int connect(uint32_t num_peers, const void* names, size_t stride);

  int register_memory(void* address, size_t length, uint32_t mem_kind, MemoryRegion** out,
                      courier_nic_rkey_v1* rkey);
  int deregister_memory(MemoryRegion* region) { return regions_.remove(region); }
  size_t registered_regions() const { return regions_.size(); }

  int post_write(const courier_nic_write_v1& write);
  int poll(courier_nic_completion_v1* out, uint32_t max);

 private:
  Endpoint(const Backend& backend, const courier_nic_ep_attr_v1& attr);
  // Moves data: accepts new streams, sends what waits, reads what came.
  void progress();

  const Backend& backend_;
  const uint32_t tx_depth_;
  Socket listener_;
  EndpointAddress address_;
  RegionTable regions_;
  CompletionQueue completions_;
  uint32_t own_rank_ = 0;
  std::vector<std::unique_ptr<OutgoingLink>> peers_;     // index: rank
  std::vector<std::unique_ptr<IncomingLink>> incoming_;  // in accept order
  uint32_t tx_outstanding_ = 0;  // posted writes whose TX completion poll() has not returned
};

}  // namespace courier::skeleton
