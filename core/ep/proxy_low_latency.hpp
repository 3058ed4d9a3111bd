// Low-latency dispatch and combine over the proxy path (docs/ep.md, "Proxy
// path"): the send kernel routes each (token, expert) pair, packs its row
// (quantized to FP8 on the way with use_fp8) into the send area laid out
// like the destinations' staging blocks, and pushes a WRITE per run of
// rows of one expert; the receive kernel (recv_hook) waits for every rank's
// signal on the device and packs each local expert's rows. No host copy per
// call: the host only launches kernels and waits for them.
#pragma once

#include <cstdint>
#include <string>

#include "core/ep/direct_low_latency.hpp"
#include "core/ep/proxy_window.hpp"
#include "courier/ep.hpp"

namespace courier::ep {

// Where everything lives in every rank's two windows (offsets from the
// start of each).
struct LlProxyLayout {
  LlProxyLayout(uint32_t ranks, uint32_t experts, uint32_t max_tokens, uint32_t hidden,
                uint32_t element_bytes);

  uint32_t ranks, experts, local_experts, max_tokens, record_words;
  uint64_t record_bytes;
  // The control window (zeroed): [phase: dispatch, combine][parity] records
  // and signal words of every source rank; [parity] release words of every
  // destination; this rank's outgoing records.
  uint64_t records[2][2], signals[2][2], release[2], staging;
  uint64_t control_bytes;
  // The data window: the send area ([destination][expert][max_tokens] slots, or the
  // rows sent back), the staging blocks ([expert][source][max_tokens]) and
  // the rows sent back ([source][expert][max_tokens]), per parity.
  uint64_t send, recv[2], combine[2];
  uint64_t total;  // data window bytes
};

class ProxyLowLatency {
 public:
  ProxyLowLatency(Context& ctx, const BufferOptions& options, DLDevice device);

  LowLatencyDispatchResult dispatch(const LlInputs& in, bool return_recv_hook, uint64_t call);
  // The handle must come from one of the last two dispatches (the caller
  // checks); wait_cost as LlInputs::wait_cost, for the combine's wait;
  // `out`: the caller's [tokens, hidden] (checked), or null: the Buffer's.
  CombineResult combine(const std::byte* x, const int64_t* topk_idx, const float* topk_weights,
                        const LowLatencyHandle& handle, uint64_t call, bool logfmt,
                        int64_t* wait_cost, void* out);
  // Fails call `call` of `phase` on every rank (records that say refused).
  [[noreturn]] void refuse(uint32_t phase, uint64_t call, const std::string& why);
  // Whether calls wait on the host for their kernels (ProxyWindow::sync).
  void set_host_waits(bool waits) { window_.set_host_waits(waits); }
  void synchronize() { window_.synchronize(); }

 private:
  void receive(uint64_t call, int64_t* wait_cost);

  Context& ctx_;
  BufferOptions options_;
  DLDevice device_;
  uint32_t rank_, ranks_;
  LlProxyLayout layout_;
  ProxyWindow window_;
  // Per parity: the outputs (views point into them) and the dispatch's slots.
  struct Outputs {
    DeviceBuffer x, scales, src, count, range, slots;
    bool fp8 = false;
    uint32_t slot_bytes = 0, row_bytes = 0;
    EpIndices indices;  // for a bad-index error
    // Where the call's outputs go: the buffers above or the caller's.
    void *x_at = nullptr, *scales_at = nullptr;
    int32_t *count_at = nullptr, *src_at = nullptr;
    int64_t* range_at = nullptr;
    uint32_t scales_layout = 0;  // COURIER_GPU_EP_SCALES_*
  };
  Outputs out_[2];
  DeviceBuffer combined_x_[2];  // per combine parity: a result stays until the combine after next
  // [phase][parity] u64 on the device: this rank's calls of each so far,
  // from which the kernels take their signal and release targets (GPU ABI
  // 1.10, "Epochs"), so a captured call replays with the same jobs.
  DeviceBuffer epochs_;
  uint64_t* epoch(uint32_t phase, uint64_t call) const {
    return static_cast<uint64_t*>(epochs_.data()) + phase * 2 + (call & 1);
  }
};

}  // namespace courier::ep
