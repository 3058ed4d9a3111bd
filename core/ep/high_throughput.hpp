// High-throughput dispatch and combine (docs/ep.md). Two transports: the
// direct path (DirectHighThroughput: GPU kernels store into the peers'
// windows) where the GPUs share a host and the backend can, otherwise the
// proxy path orchestrated from the host: rows packed with Context::copy,
// moved by WRITE commands that device threads push
// (Context::run_device_commands), announced with write-then-atomic signals.
// This class checks the arguments and admits the call for both.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/ep/call_admission.hpp"
#include "core/ep/direct_high_throughput.hpp"
#include "core/ep/exchange.hpp"
#include "core/ep/tensor_checks.hpp"
#include "courier/context.hpp"
#include "courier/ep.hpp"

namespace courier::ep {

// Where everything lives in a Buffer's one registered window, per rank.
struct HtWindowLayout {
  HtWindowLayout(uint32_t ranks, uint32_t max_tokens, uint32_t row_bytes, uint32_t topk);

  uint32_t ranks, max_tokens, row_bytes, topk;
  uint64_t meta_bytes;  // per row: source index, topk local expert ids, topk weights

  uint64_t send_rows(uint32_t dst) const;
  uint64_t send_meta(uint32_t dst) const;
  uint64_t staging(uint32_t dst) const;  // count words to WRITE
  // Receiving sides, double-buffered by call parity (a peer may be one call ahead).
  uint64_t recv_rows(uint32_t parity, uint32_t src) const;
  uint64_t recv_meta(uint32_t parity, uint32_t src) const;
  uint64_t combine_rows(uint32_t parity, uint32_t src) const;
  // Signals: [phase (0 dispatch, 1 combine)][parity][src] of {count, epoch}.
  uint64_t signal(uint32_t phase, uint32_t parity, uint32_t src) const;
  uint64_t total_bytes() const;

 private:
  uint64_t send_rows_, send_meta_, staging_, recv_rows_, recv_meta_, combine_rows_, signals_, end_;
};

class HighThroughput {
 public:
  HighThroughput(Context& ctx, const BufferOptions& options, DLDevice device);
  HighThroughput(const HighThroughput&) = delete;
  HighThroughput& operator=(const HighThroughput&) = delete;

  DispatchResult dispatch(const DispatchArgs& args);
  bool direct() const { return direct_ != nullptr; }
  CombineResult combine(const DLTensor& x, const DispatchHandle& handle);

 private:
  using DispatchInputs = HtInputs;
  DispatchInputs validate(const DispatchArgs& args) const;
  // Tells every peer this call of `phase` is refused, then throws `why`.
  [[noreturn]] void refuse(uint32_t phase, const std::string& why);
  static uint64_t checked_size(const HtWindowLayout& layout, const BufferOptions& options);
  // WRITE this rank's count word for `dst`, then ATOMIC-add 1 to its epoch.
  void add_signal(std::vector<TransferCmd>& list, uint32_t dst, uint32_t phase, uint32_t parity,
                  uint64_t count);
  // Waits until every rank's epoch word of (phase, parity) reached `epoch`;
  // returns their counts.
  std::vector<uint64_t> wait_signals(uint32_t phase, uint32_t parity, uint64_t epoch,
                                     const char* what);
  std::byte* at(uint64_t offset) const { return exchange_->at(offset); }

  Context& ctx_;
  BufferOptions options_;
  DLDevice device_;
  uint32_t rank_, ranks_;
  HtWindowLayout layout_;
  CallAdmission admission_;
  std::unique_ptr<DirectHighThroughput> direct_;  // the direct path, or
  std::unique_ptr<Exchange> exchange_;            // the proxy path
  // Outputs, owned here: the views returned point into them.
  DeviceBuffer recv_x_, recv_x_scales_, recv_topk_idx_, recv_topk_weights_, combined_x_;
  uint64_t calls_[2] = {0, 0};  // dispatch and combine calls so far
};

}  // namespace courier::ep
