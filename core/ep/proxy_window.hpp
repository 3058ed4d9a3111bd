// The EP proxy path's memory and kernels' common arguments (docs/ep.md,
// "Proxy path"): two registered windows per Buffer, the same layouts on
// every rank: data (device memory: the send and receive areas) and control
// (records, signal and release words, zeroed at creation; mapped host
// memory where the receiving proxy applies atomics with the CPU, so the
// waiting kernel sees them); the FIFO channels as the device reads them;
// the counters the kernels share (blocks done, the send area's fences); the
// status. Also the calls into the backend's ep_proxy_* entry points, each
// checked and named.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/backend_instance.hpp"
#include "core/ep/ep_status.hpp"
#include "core/ep/mapped_host_memory.hpp"
#include "courier/abi/gpu_v1.h"
#include "courier/context.hpp"

namespace courier::ep {

class ProxyWindow {
 public:
  // Collective: allocates and registers the data window (`bytes`) and the
  // control window (`control_bytes`, zeroed); and `readback_bytes` of
  // mapped host memory that kernels fill for the host to read after sync
  // (no copy of its own). Fails saying why when the GPU
  // backend has no proxy kernels, a window exceeds what a TransferCmd
  // addresses, or COURIER_EP_LOOPBACK=1 meets a NIC backend that cannot
  // write to its own rank.
  ProxyWindow(Context& ctx, uint64_t bytes, uint64_t control_bytes, uint32_t record_words,
              uint64_t readback_bytes = 0);
  // Collective: drains the channels, gives the windows back.
  ~ProxyWindow();
  ProxyWindow(const ProxyWindow&) = delete;
  ProxyWindow& operator=(const ProxyWindow&) = delete;

  std::byte* at(uint64_t offset) const { return static_cast<std::byte*>(memory_.data()) + offset; }
  // An offset in the control window, as Context::copy reads it.
  const std::byte* control(uint64_t offset) const {
    return static_cast<const std::byte*>(control_host_) + offset;
  }
  // The readback area, as the host and as the device address it.
  const std::byte* readback() const { return static_cast<const std::byte*>(readback_.host()); }
  void* readback_device() const { return readback_.device(); }
  // Whether the control window is mapped host memory (docs/ep.md).
  bool control_in_host_memory() const { return control_mapped_.host() != nullptr; }
  uint64_t record_bytes() const { return uint64_t{record_words_} * 4; }
  int device() const { return device_; }
  // The GPU backend's EP entries (what the proxy path launches).
  const courier_gpu_ep_part_v1& ep() const { return gpu_.ep(); }
  // Before a kernel that pushes: the proxies may sleep (Context::wake_proxies).
  void wake_proxies() const { ctx_.wake_proxies(); }
  void* backend() const { return gpu_.handle(); }
  // What every ep_proxy_* job carries.
  courier_gpu_ep_proxy_v1 fifo() const;

  // Waits until the kernels finished and every command they pushed has
  // completed (a drain on every channel); throws when a channel failed.
  void settle_sends();
  // Before a call: clears a failure the last call left behind.
  void clear_status();
  // This rank refuses the call it is in (the records it sends say so).
  void set_refused();
  // Throws "ep::Buffer: <what>: <backend's reason>" when rc is not 0.
  void check(int rc, const char* what) const;
  // The end of a call: waits for the EP stream and throws, naming the rank
  // or channel, when a kernel of the call failed; or, where calls do not
  // wait (set_host_waits(false)), leaves that to the next call or
  // synchronize().
  // `may_defer` false: waits whatever set_host_waits said (a call whose
  // results the host must read).
  void sync(const char* what, const EpIndices& indices = {}, bool may_defer = true);
  // Waits for the calls queued so far; throws what those that did not wait
  // found.
  void synchronize();
  void set_host_waits(bool waits) { status_.set_host_waits(waits); }
  bool host_waits() const { return status_.host_waits(); }
  // This rank refused a call while its peers do not wait (EpStatus::break_with).
  [[noreturn]] void break_with(const std::string& why) { status_.break_with(why); }
  void throw_if_broken() const { status_.throw_if_broken(); }

 private:
  Context& ctx_;
  const GpuBackend& gpu_;
  int device_;
  uint32_t rank_, ranks_, record_words_;
  bool loopback_;
  uint64_t timeout_ns_;
  DeviceBuffer memory_;
  uint32_t window_ = 0;
  // The control window: device memory (control_memory_), or mapped host
  // memory (control_mapped_); as the host and as the device address it.
  DeviceBuffer control_memory_;
  MappedHostMemory control_mapped_;
  void* control_host_ = nullptr;
  void* control_device_ = nullptr;
  uint32_t control_window_ = 0;
  MappedHostMemory readback_;
  // channels [num_channels], then done (u32, padded), then the fences [num_channels].
  DeviceBuffer shared_;
  uint32_t num_channels_;
  EpStatus status_;
};

}  // namespace courier::ep
