// This rank's FIFO channels (docs/fifo-and-proxy.md): the ring slots and
// control blocks in host memory mapped into the GPU, the producers' heads
// in device memory, and the proxy's view of each channel. Owns the memory
// (freed through the GPU backend when it goes).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/backend_instance.hpp"
#include "core/proxy/proxy_thread.hpp"
#include "courier/device_channel.hpp"

namespace courier {

class FifoChannels {
 public:
  FifoChannels() = default;
  // `count` channels of `depth` slots on `device` of `gpu` (which must
  // outlive this); throws naming the backend when memory runs out.
  FifoChannels(const GpuBackend& gpu, int device, uint32_t count, uint32_t depth);

  size_t size() const { return channels_.size(); }
  ProxyChannel& operator[](size_t c) const { return *channels_[c]; }

  // What a kernel holds to push into channel `c` (c < size()): producers
  // may run `max_inflight` commands ahead and give up after `timeout_ns`.
  DeviceChannel device_channel(uint32_t c, uint32_t max_inflight, uint64_t timeout_ns) const;

 private:
  struct MappedHostFree {
    const GpuBackend* gpu;
    void operator()(void* ptr) const { gpu->runtime().host_free_mapped(gpu->handle(), ptr); }
  };
  struct DeviceFree {
    const GpuBackend* gpu;
    int device;
    void operator()(void* ptr) const { gpu->runtime().mem_free(gpu->handle(), device, ptr); }
  };

  uint32_t depth_ = 0;
  size_t ring_stride_ = 0;  // bytes of one channel's slots and control block
  std::unique_ptr<void, MappedHostFree> ring_host_{nullptr, {nullptr}};
  void* ring_device_ = nullptr;  // ring_host_ as the GPU sees it
  std::unique_ptr<void, DeviceFree> heads_{nullptr, {nullptr, 0}};
  std::vector<std::unique_ptr<ProxyChannel>> channels_;
};

// What a channel's error word (FifoControl::error) says, for
// ChannelStats::first_error; empty for 0. The codes' own text is
// to_string(ChannelErrorCode) in courier/device_channel.hpp.
std::string describe_channel_error(uint64_t word);

}  // namespace courier
