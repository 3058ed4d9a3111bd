// Low-latency dispatch and combine over the direct path (docs/ep.md,
// "Direct path"): every (token, expert) pair is stored by a GPU kernel
// straight into the destination's staging block of (expert, source rank)
// (quantized to FP8 on the way with use_fp8), and the per-expert counts
// follow with the data flag. The receive half (wait for the flags, pack
// each expert's blocks from row 0) is separable: recv_hook. Where the GPU
// backend fuses launches (GPU ABI 1.13), a dispatch is one launch (two
// with a hook) and a combine two, with no host step between them.
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
  bool round_scale = false;      // with fp8: power-of-two scales
  int64_t* wait_cost = nullptr;  // [ranks] int64: the receive's waits per rank (proxy path)
  ScalesLayout scales_layout = ScalesLayout::row_major;  // proxy path
  // The caller's outputs (LowLatencyOutputs, checked), or all null: the
  // Buffer's. The proxy path only.
  void *out_x = nullptr, *out_scales = nullptr;
  int32_t *out_count = nullptr, *out_src = nullptr;
  int64_t* out_range = nullptr;
  CallConfig config;
};

// Where everything lives in every rank's window; [parity] = call parity.
struct LlDirectLayout {
  LlDirectLayout(uint32_t ranks, uint32_t experts, uint32_t max_tokens, uint32_t hidden,
                 uint32_t element_bytes, uint32_t max_topk);

  uint32_t ranks, experts, local_experts, max_tokens, rows_per_expert;
  uint64_t record_bytes;  // count per expert
  uint64_t records[2];
  // Staging, [local expert][source rank][max_tokens] rows: where senders store.
  uint64_t staging_x[2], staging_scales[2], staging_src[2], staging_k[2];
  // The outputs, packed per expert from row 0 by the receive half.
  uint64_t x[2], scales[2], src[2], k[2], count[2], range[2];
  uint64_t slots[2], combine[2];
  // Per (token, k): the row in x of a pair this rank sent itself, else -1
  // (with local rows, GPU ABI 1.14: the combine leaves those rows in x).
  uint64_t self_rows[2];
  uint64_t flags;      // [phase: data, combine, release][parity][rank] u64
  uint64_t staging;    // this rank's record
  uint64_t done;       // the receive and reduce kernels' count of finished blocks
  uint64_t done_send;  // the send kernels' (fused launches)
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
  // logfmt: the rows travel LogFMT-encoded (the caller checked the
  // capability, bfloat16 and hidden % 128); `out`: the caller's [tokens,
  // hidden] (checked), or null: the Buffer's.
  CombineResult combine(const std::byte* x, const float* topk_weights,
                        const LowLatencyHandle& handle, uint64_t call, bool logfmt, void* out);
  // Fails call `call` of `phase` on every rank (flags marked refused).
  [[noreturn]] void refuse(uint32_t phase, uint64_t call, const std::string& why);
  // Whether calls wait on the host for their kernels (PeerWindows::sync).
  void set_host_waits(bool waits) { windows_.set_host_waits(waits); }
  void synchronize() { windows_.synchronize(); }
  // The host's waits on marks (PeerWindows::marked_waits: a call's done mark).
  uint64_t marked_waits() const { return windows_.marked_waits(); }

 private:
  // The receive half of dispatch `call`; `waited`: its data flags were
  // already waited for.
  void receive(uint64_t call, bool waited);
  // Its job; with `wait` (fused launches) it waits for the data flags itself.
  courier_gpu_ep_ll_receive_v1 receive_job(uint64_t call, bool wait) const;

  Context& ctx_;
  BufferOptions options_;
  DLDevice device_;
  uint32_t rank_, ranks_;
  LlDirectLayout layout_;
  PeerWindows windows_;
  DeviceBuffer combined_x_[2];  // per combine parity: a result stays until the combine after next
  bool call_fp8_[2] = {false, false};  // per parity: how the rows travel
  uint32_t call_row_bytes_[2] = {0, 0};
  uint32_t call_topk_[2] = {0, 0};
  // Per parity: where the dispatch's outputs go (the window or the
  // caller's tensors) and how its scales are laid out.
  struct Outputs {
    void *x = nullptr, *scales = nullptr;
    int32_t *count = nullptr, *src = nullptr;
    int64_t* range = nullptr;
    uint32_t scales_layout = 0;  // COURIER_GPU_EP_SCALES_*
  };
  Outputs out_[2];
  // [phase: dispatch, combine][parity] u64 on the device: this rank's
  // finished calls of each, from which the kernels take their epochs (GPU
  // ABI 1.10, "Epoch words"), so a captured call replays with the same jobs.
  DeviceBuffer epochs_;
  uint64_t* epoch_word(uint32_t phase, uint64_t call) const {
    return static_cast<uint64_t*>(epochs_.data()) + phase * 2 + (call & 1);
  }
  // After a refusal, which runs no receive or reduce: the refused call of
  // `phase` counts as finished here too.
  void finish_refused(uint32_t phase, uint64_t call);
};

}  // namespace courier::ep
