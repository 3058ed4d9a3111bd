#include "core/proxy/nic_endpoint.hpp"

#include <cerrno>

#include "core/backend_instance.hpp"
#include "core/check.hpp"

namespace courier {

NicEndpoint::NicEndpoint(const NicBackend& backend, const courier_nic_ep_attr_v1& attr,
                         uint32_t world_size)
    : backend_(backend), ops_(backend.ops()), world_size_(world_size) {
  int rc = ops_->ep_open(backend.handle(), &attr, &ep_);
  if (rc != COURIER_OK) {
    fail(
        "NIC backend '{}': opening an endpoint with {} writes in flight (COURIER_NIC_WINDOW, "
        "or COURIER_MAX_INFLIGHT x channels per proxy thread when it is 0) and {} incoming "
        "notifications failed ({}): {}",
        backend.plugin().name, attr.tx_depth, attr.rx_depth, rc, backend.last_error());
  }
}

NicEndpoint::~NicEndpoint() {
  for (LocalWindow& window : local_) {
    if (window.mr != nullptr) ops_->mr_deregister(window.mr);
  }
  if (ep_ != nullptr) ops_->ep_close(ep_);
}

std::vector<std::byte> NicEndpoint::name() const {
  std::vector<std::byte> buffer(backend_.props().max_ep_name);
  size_t length = buffer.size();
  int rc = ops_->ep_name(ep_, buffer.data(), &length);
  if (rc != COURIER_OK || length > buffer.size()) {
    fail("NIC backend '{}': reading the endpoint name failed ({}): {}", backend_.plugin().name, rc,
         backend_.last_error());
  }
  buffer.resize(backend_.props().max_ep_name);  // fixed stride for the all-gather
  return buffer;
}

void NicEndpoint::connect(const std::vector<std::byte>& names, size_t stride) {
  int rc = ops_->ep_connect(ep_, world_size_, names.data(), stride);
  if (rc != COURIER_OK) {
    fail("NIC backend '{}': connecting to {} peers failed ({}): {}", backend_.plugin().name,
         world_size_, rc, backend_.last_error());
  }
}

courier_nic_rkey_v1 NicEndpoint::register_window(uint32_t window, void* base, size_t bytes,
                                                 uint32_t mem_kind) {
  LocalWindow& local = local_.at(window);
  if (local.mr != nullptr) fail("window {} is already registered", window);
  courier_nic_rkey_v1 key{};
  int rc = ops_->mr_register(ep_, base, bytes, mem_kind, &local.mr, &key);
  if (rc != COURIER_OK) {
    local.mr = nullptr;
    fail("NIC backend '{}': registering window {} ({} bytes at {}) failed ({}): {}",
         backend_.plugin().name, window, bytes, base, rc, backend_.last_error());
  }
  local.bytes = bytes;
  return key;
}

void NicEndpoint::set_remote_window(uint32_t window, std::vector<RemoteWindow> peers) {
  remote_.at(window) = std::move(peers);
}

int NicEndpoint::post_write(uint32_t channel, const TransferCmd& cmd, uint64_t cookie,
                            std::string* error) {
  uint32_t window = cmd.window();
  uint32_t peer = cmd.dst_rank();
  const LocalWindow& local = local_[window];
  const std::vector<RemoteWindow>& remote = remote_[window];
  uint64_t length = cmd.length();
  if (peer >= world_size_) {
    *error = fmt::format("WRITE to rank {} but the job has {} ranks", peer, world_size_);
    return -EINVAL;
  }
  if (local.mr == nullptr || remote.empty()) {
    *error = fmt::format("WRITE uses window {}, which is not registered", window);
    return -EINVAL;
  }
  if (cmd.src_offset() + length > local.bytes) {
    *error = fmt::format("WRITE reads [{}, {}) of window {}, which has {} bytes here",
                         cmd.src_offset(), cmd.src_offset() + length, window, local.bytes);
    return -EINVAL;
  }
  if (cmd.dst_offset() + length > remote[peer].bytes) {
    *error =
        fmt::format("WRITE to [{}, {}) of window {} on rank {}, which has {} bytes there",
                    cmd.dst_offset(), cmd.dst_offset() + length, window, peer, remote[peer].bytes);
    return -EINVAL;
  }
  courier_nic_write_v1 write{};
  write.peer = peer;
  write.flags = (cmd.flags() & kCmdFlagImm) ? COURIER_NIC_WRITE_IMM : 0u;
  write.local_mr = local.mr;
  write.local_offset = cmd.src_offset();
  write.length = length;
  write.remote = remote[peer].key;
  write.remote_offset = cmd.dst_offset();
  write.imm = encode_write_imm(channel, cmd.seq());
  write.cookie = cookie;
  int rc = ops_->post_write(ep_, &write);
  if (rc != COURIER_OK && rc != -EAGAIN) *error = backend_.last_error();
  return rc;
}

int NicEndpoint::poll(courier_nic_completion_v1* out, uint32_t max) {
  return ops_->poll(ep_, out, max);
}

std::string NicEndpoint::last_error() const { return backend_.last_error(); }

}  // namespace courier
