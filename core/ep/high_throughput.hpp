// High-throughput dispatch and combine (docs/ep.md). Two transports: the
// direct path (DirectHighThroughput: GPU kernels store into the peers'
// windows) where the GPUs share a host and the backend can, otherwise the
// proxy path (ProxyHighThroughput: GPU kernels push WRITE commands that the
// NIC backend's proxies carry out). This class checks the arguments and
// admits the call for both.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/ep/call_admission.hpp"
#include "core/ep/direct_high_throughput.hpp"
#include "core/ep/proxy_high_throughput.hpp"
#include "core/ep/tensor_checks.hpp"
#include "courier/context.hpp"
#include "courier/ep.hpp"

namespace courier::ep {

class HighThroughput {
 public:
  HighThroughput(Context& ctx, const BufferOptions& options, DLDevice device);
  HighThroughput(const HighThroughput&) = delete;
  HighThroughput& operator=(const HighThroughput&) = delete;

  DispatchResult dispatch(const DispatchArgs& args);
  bool direct() const { return direct_ != nullptr; }
  CombineResult combine(const DLTensor& x, const DispatchHandle& handle);
  // false (Buffer::set_stream): on the proxy path, dispatches with
  // num_worst_tokens and combines of their handles return once queued; on
  // the direct path, every combine, and every dispatch once the host has
  // read the counts.
  void set_host_waits(bool waits) {
    if (proxy_) proxy_->set_host_waits(waits);
    if (direct_) direct_->set_host_waits(waits);
  }
  void synchronize() {
    if (proxy_) proxy_->synchronize();
    if (direct_) direct_->synchronize();
  }
  // The host's waits on marks of the EP stream so far (PeerWindows::mark),
  // which the GPU backend's counters do not see.
  uint64_t marked_waits() const { return direct_ ? direct_->marked_waits() : 0; }
  // Whether the call would not wait on the host (so it can be captured).
  bool defers(const DispatchArgs& args) const { return proxy_ && proxy_->defers(args); }
  bool defers(const DispatchHandle& handle) const { return proxy_ && proxy_->defers(handle); }

 private:
  using DispatchInputs = HtInputs;
  DispatchInputs validate(const DispatchArgs& args) const;
  // Tells every peer this call of `phase` is refused, then throws `why`.
  // `deferred`: the peers' call does not wait (their failure surfaces
  // later), so this rank's Buffer breaks too (EpStatus::break_with).
  [[noreturn]] void refuse(uint32_t phase, const std::string& why, bool deferred = false);
  static void check_options(const BufferOptions& options);

  BufferOptions options_;
  DLDevice device_;
  uint32_t ranks_;
  CallAdmission admission_;
  std::unique_ptr<DirectHighThroughput> direct_;  // the direct path, or
  std::unique_ptr<ProxyHighThroughput> proxy_;    // the proxy path
  uint64_t calls_[2] = {0, 0};                    // dispatch and combine calls so far
};

}  // namespace courier::ep
