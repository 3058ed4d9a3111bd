// RingingTransport: after every write or atomic it posts to a peer on this
// host, rings that peer's doorbell (core/proxy/doorbell.hpp), so a peer whose
// proxy threads sleep while idle wakes to progress what arrived (providers
// without COURIER_NIC_CAP_PASSIVE_TARGET move data only while the target
// polls). Costs a fence and a load per post while the peer is awake.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/proxy/doorbell.hpp"
#include "core/proxy/transport_decorator.hpp"

namespace courier {

class RingingTransport final : public TransportDecorator {
 public:
  // `peers[r]`: rank r's doorbell, invalid for ranks on other hosts.
  RingingTransport(std::unique_ptr<ProxyTransport> inner, std::vector<Doorbell> peers)
      : TransportDecorator(std::move(inner)), peers_(std::move(peers)) {}

  int post_write(const WriteRequest& write, uint64_t cookie, std::string* error) override {
    const int rc = inner_.post_write(write, cookie, error);
    if (rc == 0) wake(write.peer);
    return rc;
  }
  int post_atomic(const AtomicRequest& atomic, uint64_t cookie, std::string* error) override {
    const int rc = inner_.post_atomic(atomic, cookie, error);
    if (rc == 0) wake(atomic.peer);
    return rc;
  }

 private:
  void wake(uint32_t peer) const {
    if (peer < peers_.size()) peers_[peer].ring();
  }

  std::vector<Doorbell> peers_;
};

}  // namespace courier
