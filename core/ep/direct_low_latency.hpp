// Low-latency dispatch and combine over the direct path (docs/ep.md,
// "Direct path"): every (token, expert) pair is stored by a GPU kernel
// straight into its expert's packed receive buffer at the destination
// (quantized to FP8 on the way with use_fp8), after one round of per-expert
// counts that tells every rank where its rows land. The receive half (wait
// for the flags, count per expert) is separable: recv_hook.
#pragma once

#include <cstdint>
#include <string>

#include "core/ep/call_admission.hpp"
#include "core/ep/peer_windows.hpp"
#include "courier/ep.hpp"

namespace courier::ep {

// A low-latency dispatch's arguments once checked (device pointers).
struct LlInputs {
  const std::byte* x = nullptr;
  const int64_t* idx = nullptr;
  uint32_t tokens = 0, hidden = 0, topk = 0;
  DType dtype = DType::float32;
  DLDataType x_dtype{};
  bool fp8 = false;
  CallConfig config;
};

// Where everything lives in every rank's window; [parity] = call parity.
struct LlDirectLayout {
  LlDirectLayout(uint32_t ranks, uint32_t experts, uint32_t max_tokens, uint32_t hidden,
                 uint32_t element_bytes, uint32_t max_topk);

  uint32_t ranks, experts, local_experts, rows_per_expert;
  uint64_t record_bytes;  // count per expert
  uint64_t records[2], x[2], scales[2], src[2], k[2], count[2], range[2], slots[2], combine[2];
  uint64_t flags;    // [phase: notify, data, combine][parity][rank] u64
  uint64_t staging;  // this rank's record
  uint64_t total;

  uint64_t flag(uint32_t phase, uint32_t parity, uint32_t rank) const {
    return flags + ((uint64_t{phase} * 2 + parity) * ranks + rank) * 8;
  }
};

class DirectLowLatency {
 public:
  DirectLowLatency(Context& ctx, const BufferOptions& options, DLDevice device);

  LowLatencyDispatchResult dispatch(const LlInputs& in, bool return_recv_hook, uint64_t call);
  // The handle must come from one of the last two dispatches (older
  // receive buffers are reused); the caller checks.
  CombineResult combine(const std::byte* x, const float* topk_weights,
                        const LowLatencyHandle& handle, uint64_t call);
  // Fails call `call` of `phase` on every rank (flags marked refused).
  [[noreturn]] void refuse(uint32_t phase, uint64_t call, const std::string& why);

 private:
  void receive(uint64_t call);

  Context& ctx_;
  BufferOptions options_;
  DLDevice device_;
  uint32_t rank_, ranks_;
  LlDirectLayout layout_;
  PeerWindows windows_;
  DeviceBuffer combined_x_;
};

}  // namespace courier::ep
