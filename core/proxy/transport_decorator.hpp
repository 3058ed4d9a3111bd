// TransportDecorator: a layer of the transport stack that hands everything
// on to the layer below unless it overrides it (proxy_transport.hpp). The
// fault, retry, doorbell, failure-watch and semantics layers derive from it
// and override only what they change.
#pragma once

#include <memory>
#include <string>
#include <utility>

#include "core/proxy/proxy_transport.hpp"

namespace courier {

class TransportDecorator : public ProxyTransport {
 public:
  explicit TransportDecorator(ProxyTransport& inner) : inner_(inner) {}
  // Owns `inner` (a layer built for it).
  explicit TransportDecorator(std::unique_ptr<ProxyTransport> inner)
      : owned_(std::move(inner)), inner_(*owned_) {}
  TransportDecorator(const TransportDecorator&) = delete;
  TransportDecorator& operator=(const TransportDecorator&) = delete;

  uint32_t caps() const override { return inner_.caps(); }
  uint32_t atomic_ops() const override { return inner_.atomic_ops(); }
  uint32_t atomic_native() const override { return inner_.atomic_native(); }
  int post_write(const WriteRequest& write, uint64_t cookie, std::string* error) override {
    return inner_.post_write(write, cookie, error);
  }
  int post_atomic(const AtomicRequest& atomic, uint64_t cookie, std::string* error) override {
    return inner_.post_atomic(atomic, cookie, error);
  }
  int post_barrier(const BarrierRequest& barrier, uint64_t cookie, std::string* error) override {
    return inner_.post_barrier(barrier, cookie, error);
  }
  int poll(courier_nic_completion_v1* out, uint32_t max) override { return inner_.poll(out, max); }
  std::string last_error() const override { return inner_.last_error(); }
  bool busy() const override { return inner_.busy(); }
  bool peer_activity(uint32_t peer, PeerActivity* out) const override {
    return inner_.peer_activity(peer, out);
  }

 private:
  std::unique_ptr<ProxyTransport> owned_;  // declared first: inner_ may refer to it

 protected:
  ProxyTransport& inner_;
};

}  // namespace courier
