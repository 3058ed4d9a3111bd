#include "core/fifo_channels.hpp"

#include <fmt/format.h>

#include <cstring>

#include "core/check.hpp"

namespace courier {

namespace {

// Device memory per FIFO channel: the ticket counter, then (one cache line
// on) the producers' cached copy of `completed`.
constexpr size_t kHeadStride = 128;
constexpr size_t kCompletedCacheOffset = 64;

}  // namespace

FifoChannels::FifoChannels(const GpuBackend& gpu, int device, uint32_t count, uint32_t depth)
    : depth_(depth), ring_stride_(depth * sizeof(TransferCmd) + sizeof(FifoControl)) {
  const courier_gpu_runtime_part_v1& runtime = gpu.runtime();
  void* host_ptr = nullptr;
  if (runtime.host_alloc_mapped(gpu.handle(), ring_stride_ * count, &host_ptr, &ring_device_) !=
      0) {
    fail("GPU backend '{}': allocating {} bytes of mapped FIFO memory failed: {}",
         gpu.plugin().name, ring_stride_ * count, gpu.last_error());
  }
  ring_host_ = {host_ptr, MappedHostFree{&gpu}};
  std::memset(host_ptr, 0, ring_stride_ * count);
  // Per channel: the ticket counter, then the producers' cached copy of
  // `completed`, each on its own cache line.
  void* heads_ptr = nullptr;
  if (runtime.mem_alloc(gpu.handle(), device, kHeadStride * count, &heads_ptr) != 0) {
    fail("GPU backend '{}': allocating FIFO heads failed: {}", gpu.plugin().name, gpu.last_error());
  }
  heads_ = {heads_ptr, DeviceFree{&gpu, device}};
  std::vector<std::byte> zeros(kHeadStride * count);
  runtime.memcpy_sync(gpu.handle(), heads_ptr, zeros.data(), zeros.size());
  for (uint32_t c = 0; c < count; ++c) {
    auto* base = static_cast<std::byte*>(host_ptr) + c * ring_stride_;
    auto* slots = reinterpret_cast<TransferCmd*>(base);
    auto* control = reinterpret_cast<FifoControl*>(base + depth * sizeof(TransferCmd));
    channels_.push_back(std::make_unique<ProxyChannel>(c, slots, control, depth));
    // Heads in host memory (gpu-host) can be shown in hang diagnostics.
    if (gpu.props().mem_kind == COURIER_MEM_HOST) {
      channels_.back()->head =
          reinterpret_cast<const uint64_t*>(static_cast<std::byte*>(heads_ptr) + c * kHeadStride);
    }
  }
}

DeviceChannel FifoChannels::device_channel(uint32_t c, uint32_t max_inflight,
                                           uint64_t timeout_ns) const {
  auto* device_base = static_cast<std::byte*>(ring_device_) + c * ring_stride_;
  DeviceChannel ch;
  ch.slots = reinterpret_cast<TransferCmd*>(device_base);
  ch.control = reinterpret_cast<FifoControl*>(device_base + depth_ * sizeof(TransferCmd));
  auto* heads = static_cast<std::byte*>(heads_.get()) + c * kHeadStride;
  ch.head = reinterpret_cast<uint64_t*>(heads);
  ch.completed_cache = reinterpret_cast<uint64_t*>(heads + kCompletedCacheOffset);
  ch.depth_mask = depth_ - 1;
  ch.max_inflight = max_inflight;
  ch.channel_id = c;
  ch.timeout_ns = timeout_ns;
  return ch;
}

std::string describe_channel_error(uint64_t word) {
  if (word == 0) return "";
  const uint64_t ticket = (word >> 8) - 1;
  const auto code = static_cast<ChannelErrorCode>(word & 0xff);
  switch (code) {
    case ChannelErrorCode::proxy_failed:
    case ChannelErrorCode::producer_timed_out:
      return fmt::format(
          "{} at command {}; the channel cannot progress any more (details in the "
          "log)",
          to_string(code), ticket);
    case ChannelErrorCode::peer_failed:  // the upper bits hold the rank
      return fmt::format("rank {} is gone: {} (details in the log)", ticket, to_string(code));
    default:
      return fmt::format("command {} failed: {} (details in the log)", ticket, to_string(code));
  }
}

}  // namespace courier
