// NicEndpoint: one NIC backend endpoint plus the tables that turn a
// (peer, window, offset) request into a concrete write or atomic: the local
// registration of each window and every peer's key and size for it.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/proxy/proxy_transport.hpp"

namespace courier {

class NicBackend;

// A peer's registration of one window.
struct RemoteWindow {
  courier_nic_rkey_v1 key{};
  uint64_t bytes = 0;
};

class NicEndpoint final : public ProxyTransport {
 public:
  static constexpr uint32_t kMaxWindows = kMaxWindowIds;

  // attr.flags may ask for COURIER_NIC_EP_ATOMICS; caps() then reports the
  // backend's caps_with_atomics.
  NicEndpoint(const NicBackend& backend, const courier_nic_ep_attr_v1& attr, uint32_t world_size);
  ~NicEndpoint() override;
  NicEndpoint(const NicEndpoint&) = delete;
  NicEndpoint& operator=(const NicEndpoint&) = delete;

  std::vector<std::byte> name() const;
  // names holds world_size entries of `stride` bytes, rank order.
  void connect(const std::vector<std::byte>& names, size_t stride);

  courier_nic_rkey_v1 register_window(uint32_t window, void* base, size_t bytes, uint32_t mem_kind);
  void set_remote_window(uint32_t window, std::vector<RemoteWindow> peers);
  // Forgets the window here and every peer's key for it.
  void deregister_window(uint32_t window);

  uint32_t caps() const override { return caps_; }
  uint32_t atomic_ops() const override { return atomic_ops_; }
  uint32_t atomic_native() const override { return atomic_native_; }
  int post_write(const WriteRequest& write, uint64_t cookie, std::string* error) override;
  int post_atomic(const AtomicRequest& atomic, uint64_t cookie, std::string* error) override;
  int poll(courier_nic_completion_v1* out, uint32_t max) override;
  std::string last_error() const override;

 private:
  struct LocalWindow {
    void* mr = nullptr;
    uint64_t bytes = 0;
  };
  // Checks [offset, +length) against the local and the remote window; false
  // with *error set when it does not fit. The peer is the caller's to check
  // (the semantics layer above does, once per command; debug builds check
  // it here too).
  bool check_range(const char* what, uint32_t peer, uint32_t local_window, uint64_t local_offset,
                   uint32_t remote_window, uint64_t remote_offset, uint64_t length,
                   std::string* error) const;

  const NicBackend& backend_;
  const courier_nic_plugin_v1* ops_;
  void* ep_ = nullptr;
  uint32_t world_size_;
  uint32_t caps_ = 0;
  uint32_t atomic_ops_ = 0;
  uint32_t atomic_native_ = 0;
  std::array<LocalWindow, kMaxWindows> local_{};
  std::array<std::vector<RemoteWindow>, kMaxWindows> remote_{};
};

}  // namespace courier
