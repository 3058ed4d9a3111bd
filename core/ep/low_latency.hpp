// Low-latency dispatch and combine (docs/ep.md): every (token, expert) pair
// travels into per-expert receive buffers; the receive half can be deferred
// (recv_hook) so communication overlaps compute. Over the direct path
// (DirectLowLatency) where the GPUs share a host and the backend can;
// otherwise orchestrated from the host like high-throughput mode, counts per
// (expert, source) announced with one write-then-atomic signal per
// destination. This class checks the arguments and admits the call.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/ep/call_admission.hpp"
#include "core/ep/direct_low_latency.hpp"
#include "core/ep/exchange.hpp"
#include "courier/ep.hpp"

namespace courier::ep {

// Where everything lives in the window, per rank.
struct LlWindowLayout {
  LlWindowLayout(uint32_t ranks, uint32_t local_experts, uint32_t max_tokens, uint32_t row_bytes);

  uint32_t ranks, local_experts, max_tokens, row_bytes;
  uint64_t record_bytes;  // a signal: counts[local_experts], then the epoch

  uint64_t send_rows(uint32_t dst, uint32_t expert) const;
  uint64_t send_src(uint32_t dst, uint32_t expert) const;
  uint64_t staging(uint32_t dst) const;
  uint64_t recv_rows(uint32_t parity, uint32_t src, uint32_t expert) const;
  uint64_t recv_src(uint32_t parity, uint32_t src, uint32_t expert) const;
  uint64_t combine_rows(uint32_t parity, uint32_t src, uint32_t expert) const;
  uint64_t signal(uint32_t phase, uint32_t parity, uint32_t src) const;
  uint64_t total_bytes() const { return end_; }

 private:
  uint64_t block(uint32_t rows_of) const;
  uint64_t send_rows_, send_src_, staging_, recv_rows_, recv_src_, combine_rows_, signals_, end_;
};

class LowLatency {
 public:
  LowLatency(Context& ctx, const BufferOptions& options, DLDevice device);

  LowLatencyDispatchResult dispatch(const LowLatencyDispatchArgs& args);
  bool direct() const { return direct_ != nullptr; }
  CombineResult combine(const DLTensor& x, const DLTensor& topk_idx, const DLTensor& topk_weights,
                        const LowLatencyHandle& handle);

 private:
  using Inputs = LlInputs;
  Inputs validate(const LowLatencyDispatchArgs& args) const;
  static uint64_t checked_size(const LlWindowLayout& layout, const BufferOptions& options);
  // Sends this rank's refusal of a call of `phase` to every peer, then throws.
  [[noreturn]] void refuse(uint32_t phase, const std::string& why);
  void signal(std::vector<TransferCmd>& list, uint32_t dst, uint32_t phase, uint32_t parity,
              const std::vector<uint64_t>& counts);
  // counts[src][expert] of a phase's call, once every rank's signal is here.
  std::vector<uint64_t> wait(uint32_t phase, uint32_t parity, uint64_t epoch, const char* what);
  // The receive half of dispatch call `call`: compacts the rows per expert.
  void receive(uint64_t call, bool fp8, LowLatencyHandle* handle);
  std::byte* at(uint64_t offset) const { return exchange_->at(offset); }

  Context& ctx_;
  BufferOptions options_;
  DLDevice device_;
  uint32_t rank_, ranks_, local_experts_;
  LlWindowLayout layout_;
  CallAdmission admission_;
  std::unique_ptr<DirectLowLatency> direct_;  // the direct path, or
  std::unique_ptr<Exchange> exchange_;        // the proxy path
  DeviceBuffer packed_x_, packed_scales_, packed_count_, packed_src_, packed_range_, combined_x_;
  uint64_t calls_[2] = {0, 0};
};

}  // namespace courier::ep
