#include "core/proxy/nic_endpoint.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>

#include "core/backend_instance.hpp"
#include "core/check.hpp"

namespace courier {

NicEndpoint::NicEndpoint(const NicBackend& backend, const courier_nic_ep_attr_v1& attr,
                         uint32_t world_size)
    : backend_(backend), ops_(backend.ops()), world_size_(world_size) {
  const bool atomics = (attr.flags & COURIER_NIC_EP_ATOMICS) != 0;
  if (atomics && backend.post_atomic() == nullptr) {
    fail("NIC backend '{}' carries out no atomics; use COURIER_ATOMICS=imm", backend.plugin().name);
  }
  caps_ = atomics ? backend.props().caps_with_atomics : backend.props().caps;
  atomic_ops_ = atomics ? backend.props().atomic_ops : 0;
  atomic_native_ = atomics ? backend.props().atomic_native : 0;
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

void NicEndpoint::deregister_window(uint32_t window) {
  LocalWindow& local = local_.at(window);
  if (local.mr != nullptr && ops_->mr_deregister(local.mr) != COURIER_OK) {
    fail("NIC backend '{}': deregistering window {} failed: {}", backend_.plugin().name, window,
         backend_.last_error());
  }
  local = LocalWindow{};
  remote_.at(window).clear();
}

bool NicEndpoint::check_range(const char* what, uint32_t peer, uint32_t local_window,
                              uint64_t local_offset, uint32_t remote_window, uint64_t remote_offset,
                              uint64_t length, std::string* error) const {
#ifndef NDEBUG
  // The layer above checked the peer (the semantics layer, once per
  // command); a debug build makes sure.
  if (peer >= world_size_) {
    *error = fmt::format("{} to rank {} but the job has {} ranks", what, peer, world_size_);
    return false;
  }
#endif
  if (local_window >= kMaxWindows || remote_window >= kMaxWindows) {
    *error = fmt::format("{} names window {}, beyond the {} windows", what,
                         std::max(local_window, remote_window), kMaxWindows);
    return false;
  }
  const LocalWindow& local = local_[local_window];
  const std::vector<RemoteWindow>& remote = remote_[remote_window];
  if (local.mr == nullptr && local_window >= kFirstSourceWindow) {
    *error = fmt::format("{} reads source {} of this rank, which is not set (Context::set_source)",
                         what, local_window - kFirstSourceWindow);
    return false;
  }
  if (local.mr == nullptr) {
    *error = fmt::format("{} uses window {}, which is not registered", what, local_window);
    return false;
  }
  if (remote.empty()) {
    *error = fmt::format("{} uses window {}, which is not registered", what, remote_window);
    return false;
  }
  // Written so that huge offsets cannot overflow the sums.
  if (local_offset > local.bytes || length > local.bytes - local_offset) {
    *error = local_window >= kFirstSourceWindow
                 ? fmt::format("{} reads [{}, +{}) of source {}, which has {} bytes", what,
                               local_offset, length, local_window - kFirstSourceWindow, local.bytes)
                 : fmt::format("{} uses [{}, +{}) of window {}, which has {} bytes here", what,
                               local_offset, length, local_window, local.bytes);
    return false;
  }
  const uint64_t remote_bytes = remote[peer].bytes;
  if (remote_offset > remote_bytes || length > remote_bytes - remote_offset) {
    *error = fmt::format("{} to [{}, +{}) of window {} on rank {}, which has {} bytes there", what,
                         remote_offset, length, remote_window, peer, remote_bytes);
    return false;
  }
  return true;
}

int NicEndpoint::post_write(const WriteRequest& w, uint64_t cookie, std::string* error) {
  if (!check_range("WRITE", w.peer, w.src_window, w.src_offset, w.dst_window, w.dst_offset,
                   w.length, error)) {
    return -EINVAL;
  }
  courier_nic_write_v1 write{};
  write.peer = w.peer;
  write.flags = w.with_imm ? COURIER_NIC_WRITE_IMM : 0u;
  write.local_mr = local_[w.src_window].mr;
  write.local_offset = w.src_offset;
  write.length = w.length;
  write.remote = remote_[w.dst_window][w.peer].key;
  write.remote_offset = w.dst_offset;
  write.imm = w.imm;
  write.cookie = cookie;
  int rc = ops_->post_write(ep_, &write);
  if (rc != COURIER_OK && rc != -EAGAIN && rc != -EBUSY) *error = backend_.last_error();
  return rc;
}

int NicEndpoint::post_atomic(const AtomicRequest& a, uint64_t cookie, std::string* error) {
  const uint32_t width = courier_nic_atomic_width(a.op);
  if (width == 0 || (a.op & atomic_ops_) != a.op) {
    *error = fmt::format("atomic op {:#x} is not carried out by NIC backend '{}'", a.op,
                         backend_.plugin().name);
    return -EOPNOTSUPP;
  }
  if (!check_range("ATOMIC", a.peer, a.result_window, a.result_offset, a.window, a.offset, width,
                   error)) {
    return -EINVAL;
  }
  if (a.offset % width != 0 || a.result_offset % width != 0) {
    *error = fmt::format("ATOMIC {} at offset {} (result at {}) is not {}-byte aligned",
                         courier_nic_atomic_name(a.op), a.offset, a.result_offset, width);
    return -EINVAL;
  }
  courier_nic_atomic_v1 atomic{};
  atomic.peer = a.peer;
  atomic.op = a.op;
  atomic.remote = remote_[a.window][a.peer].key;
  atomic.remote_offset = a.offset;
  atomic.operand = a.operand;
  atomic.compare = a.compare;
  atomic.result_mr = local_[a.result_window].mr;
  atomic.result_offset = a.result_offset;
  atomic.cookie = cookie;
  int rc = backend_.post_atomic()(ep_, &atomic);
  if (rc != COURIER_OK && rc != -EAGAIN && rc != -EBUSY) *error = backend_.last_error();
  return rc;
}

int NicEndpoint::poll(courier_nic_completion_v1* out, uint32_t max) {
  return ops_->poll(ep_, out, max);
}

std::string NicEndpoint::last_error() const { return backend_.last_error(); }

}  // namespace courier
