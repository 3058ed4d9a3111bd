// NicEndpoint: one NIC backend endpoint plus the tables that turn a
// TransferCmd's (rank, window, offset) into a concrete write: the local
// registration of each window and every peer's key and size for it.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/proxy/proxy_transport.hpp"
#include "courier/transfer_cmd.hpp"

namespace courier {

class NicBackend;

// A peer's registration of one window.
struct RemoteWindow {
  courier_nic_rkey_v1 key{};
  uint64_t bytes = 0;
};

// Immediate data of a WRITE with kCmdFlagImm (32 bits, fits every NIC):
//   [13:0] sequence number   [23:14] sender's channel id   [31:24] kind (1)
inline constexpr uint64_t kImmKindWriteNotify = 1;
inline uint64_t encode_write_imm(uint32_t channel, uint32_t seq) {
  return (kImmKindWriteNotify << 24) | (uint64_t{channel & 0x3ffu} << 14) | (seq & 0x3fffu);
}

class NicEndpoint final : public ProxyTransport {
 public:
  static constexpr uint32_t kMaxWindows = TransferCmd::kMaxWindow + 1;

  NicEndpoint(const NicBackend& backend, const courier_nic_ep_attr_v1& attr, uint32_t world_size);
  ~NicEndpoint() override;
  NicEndpoint(const NicEndpoint&) = delete;
  NicEndpoint& operator=(const NicEndpoint&) = delete;

  std::vector<std::byte> name() const;
  // names holds world_size entries of `stride` bytes, rank order.
  void connect(const std::vector<std::byte>& names, size_t stride);

  courier_nic_rkey_v1 register_window(uint32_t window, void* base, size_t bytes, uint32_t mem_kind);
  void set_remote_window(uint32_t window, std::vector<RemoteWindow> peers);

  int post_write(uint32_t channel, const TransferCmd& cmd, uint64_t cookie,
                 std::string* error) override;
  int poll(courier_nic_completion_v1* out, uint32_t max) override;
  std::string last_error() const override;

 private:
  struct LocalWindow {
    void* mr = nullptr;
    uint64_t bytes = 0;
  };

  const NicBackend& backend_;
  const courier_nic_plugin_v1* ops_;
  void* ep_ = nullptr;
  uint32_t world_size_;
  std::array<LocalWindow, kMaxWindows> local_{};
  std::array<std::vector<RemoteWindow>, kMaxWindows> remote_{};
};

}  // namespace courier
