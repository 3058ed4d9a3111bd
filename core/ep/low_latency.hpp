// Low-latency dispatch and combine (docs/ep.md): every (token, expert) pair
// travels into per-expert receive buffers; the receive half can be deferred
// (recv_hook) so communication overlaps compute. Over the direct path
// (DirectLowLatency) where the GPUs share a host and the backend can,
// otherwise over the proxy path (ProxyLowLatency). This class checks the
// arguments and admits the call.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/ep/call_admission.hpp"
#include "core/ep/direct_low_latency.hpp"
#include "core/ep/proxy_low_latency.hpp"
#include "courier/ep.hpp"

namespace courier::ep {

class LowLatency {
 public:
  LowLatency(Context& ctx, const BufferOptions& options, DLDevice device);

  LowLatencyDispatchResult dispatch(const LowLatencyDispatchArgs& args);
  bool direct() const { return direct_ != nullptr; }
  CombineResult combine(const DLTensor& x, const DLTensor& topk_idx, const DLTensor& topk_weights,
                        const LowLatencyHandle& handle, const LowLatencyCombineOptions& options);
  // false: calls return once their kernels are queued (Buffer::set_stream).
  void set_host_waits(bool waits) {
    if (direct_) direct_->set_host_waits(waits);
    if (proxy_) proxy_->set_host_waits(waits);
  }
  // Waits for the calls queued so far; throws what they found.
  void synchronize() {
    if (direct_) direct_->synchronize();
    if (proxy_) proxy_->synchronize();
  }
  // The host's waits on marks of the EP stream so far (PeerWindows::mark),
  // which the GPU backend's counters do not see.
  uint64_t marked_waits() const { return direct_ ? direct_->marked_waits() : 0; }

 private:
  using Inputs = LlInputs;
  Inputs validate(const LowLatencyDispatchArgs& args) const;
  // The [ranks] int64 tensor of wait costs, checked, or null; the direct path
  // refuses one, naming `call`.
  int64_t* wait_cost_of(const DLTensor* stats, const char* call) const;
  static void check_options(const BufferOptions& options, uint32_t ranks);
  // Sends this rank's refusal of a call of `phase` to every peer, then throws.
  [[noreturn]] void refuse(uint32_t phase, const std::string& why);

  BufferOptions options_;
  DLDevice device_;
  uint32_t ranks_, local_experts_;
  const GpuBackend& gpu_;  // what it supports decides what the calls may ask
  // The LowLatencyOutputs of `args`, checked, into `in` (after x and fp8).
  void take_outputs(const LowLatencyDispatchArgs& args, Inputs& in) const;
  CallAdmission admission_;
  std::unique_ptr<DirectLowLatency> direct_;  // the direct path, or
  std::unique_ptr<ProxyLowLatency> proxy_;    // the proxy path
  uint64_t calls_[2] = {0, 0};
  // Per dispatch parity: whether the last dispatch's recv_hook ran (null:
  // it had none).
  std::shared_ptr<bool> received_[2];
};

}  // namespace courier::ep
