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
#include "core/proxy/proxy_transport.hpp"

namespace courier {

class RingingTransport final : public ProxyTransport {
 public:
  // `peers[r]`: rank r's doorbell, invalid for ranks on other hosts.
  RingingTransport(std::unique_ptr<ProxyTransport> inner, std::vector<Doorbell> peers)
      : inner_(std::move(inner)), peers_(std::move(peers)) {}

  uint32_t caps() const override { return inner_->caps(); }
  uint32_t atomic_ops() const override { return inner_->atomic_ops(); }
  uint32_t atomic_native() const override { return inner_->atomic_native(); }
  int post_write(const WriteRequest& write, uint64_t cookie, std::string* error) override {
    const int rc = inner_->post_write(write, cookie, error);
    if (rc == 0) wake(write.peer);
    return rc;
  }
  int post_atomic(const AtomicRequest& atomic, uint64_t cookie, std::string* error) override {
    const int rc = inner_->post_atomic(atomic, cookie, error);
    if (rc == 0) wake(atomic.peer);
    return rc;
  }
  int poll(courier_nic_completion_v1* out, uint32_t max) override { return inner_->poll(out, max); }
  std::string last_error() const override { return inner_->last_error(); }

 private:
  void wake(uint32_t peer) const {
    if (peer < peers_.size()) peers_[peer].ring();
  }

  std::unique_ptr<ProxyTransport> inner_;
  std::vector<Doorbell> peers_;
};

}  // namespace courier
