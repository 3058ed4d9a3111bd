// High-throughput dispatch and combine over the proxy path (docs/ep.md,
// "Proxy path"). Dispatch goes counts first, as DeepEP's notify step: a
// kernel counts each rank's rows and sends every rank the counts, the rows
// are packed into the registered send area while they travel, and once
// every rank's counts arrived WRITEs put each run of rows at its final row
// at the destination, announced with write-then-atomic; the receive kernel
// waits for the signals on the device and unpacks only the small per-row
// meta (ids, weights, scales): recv_x is the rows where they landed. Per
// dispatch the host launches the kernels and reads the received counts (to
// shape the outputs); per combine it launches two.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/ep/direct_high_throughput.hpp"
#include "core/ep/proxy_window.hpp"
#include "courier/ep.hpp"

namespace courier::ep {

// Where everything lives in every rank's two windows (offsets from the
// start of each).
struct HtProxyLayout {
  HtProxyLayout(uint32_t ranks, uint32_t max_tokens, uint32_t hidden, uint32_t element_bytes,
                uint32_t max_topk, uint32_t max_experts);

  uint32_t ranks, max_tokens, max_experts, record_words;
  uint64_t record_bytes;
  // The control window (zeroed): [phase: dispatch, combine][parity]
  // records and signal words of every source rank (a dispatch's are its
  // counts); a dispatch's rows' records (a state word) and signal words
  // per parity; this rank's outgoing records, and its rows' records.
  uint64_t records[2][2], signals[2][2], rows_records[2], rows_signals[2], staging, rows_staging;
  uint64_t control_bytes;
  // The data window: the send area (a dispatch's rows then their meta by
  // token, or combine rows per destination), per parity a dispatch's
  // received rows (rank 0's first, then rank 1's, ...: recv_x) then their
  // meta, and combine rows per source rank; the dispatch kernel's counters
  // (max_experts + ranks int32, zero between calls).
  uint64_t send, recv[2], combine[2], counters;
  uint64_t total;  // data window bytes
};

class ProxyHighThroughput {
 public:
  ProxyHighThroughput(Context& ctx, const BufferOptions& options, DLDevice device);

  DispatchResult dispatch(const HtInputs& in, const DispatchArgs& args, uint64_t call);
  CombineResult combine(const std::byte* x, const DLDataType& dtype, const DispatchHandle& handle,
                        uint64_t call);
  // Fails call `call` of `phase` (0 dispatch, 1 combine) on every rank:
  // sends records that say refused, then throws `why` (breaking the Buffer
  // where the call would not have waited: `deferred`).
  [[noreturn]] void refuse(uint32_t phase, uint64_t call, const std::string& why,
                           bool deferred = false);
  // false: a dispatch with num_worst_tokens (no cached handle) returns once
  // queued, and combines do (Buffer::set_stream); others still wait.
  void set_host_waits(bool waits) { window_.set_host_waits(waits); }
  void synchronize() { window_.synchronize(); }
  // Whether such a dispatch would not wait (nor read anything on the host).
  bool defers(const DispatchArgs& args) const {
    return !window_.host_waits() && args.num_worst_tokens > 0 && args.cached_handle == nullptr &&
           window_.readback() != nullptr;
  }
  // Whether a combine with `handle` would not wait.
  bool defers(const DispatchHandle& handle) const {
    return !window_.host_waits() && handle.counts_on_device;
  }

 private:
  // The rest of a dispatch that did not wait: outputs and a handle shaped
  // by num_worst_tokens, nothing read on the host.
  DispatchResult deferred_dispatch(const HtInputs& in, const DispatchArgs& args, uint64_t call);
  // The caller's tensor [base, +bytes) as Context source `slot`, for WRITEs
  // that read it in place: the TransferCmd source (slot + 1), or 0 where
  // it cannot be (send_in_place_ off, or the backend refused it: then the
  // kernels pack, as before).
  uint32_t in_place_source(uint32_t slot, const void* base, uint64_t bytes);

  Context& ctx_;
  BufferOptions options_;
  DLDevice device_;
  uint32_t rank_, ranks_;
  HtProxyLayout layout_;
  ProxyWindow window_;
  // COURIER_EP_SEND_IN_PLACE, a NIC backend with cheap_registration and a
  // GPU plugin of ABI 1.8 (docs/ep.md, "Sending in place").
  bool send_in_place_;
  bool warned_ = false;  // about a refused registration, once
  // Every command this rank pushed has completed (the last call waited for
  // them: wait_sends): the next send half need not wait for the send area.
  bool sends_settled_ = true;
  // A call that read source slot s may have left WRITEs reading it in
  // flight (it failed before its wait for them): settled before the slot
  // is registered again.
  bool source_busy_[2] = {false, false};
  // Outputs (the views returned point into them; recv_x into the data
  // window) and scratch: the slots of the last dispatch, a cached
  // dispatch's is_token_in_rank, and combine plans (counts, then
  // send_index): [parity] where each dispatch's receive kernel leaves its
  // own, so the handles of the last two dispatches combine without the
  // host, and [2] for a handle whose plan the host uploads.
  // [parity]: a dispatch's (a combine's) outputs stay until the call after
  // next of its kind, as its handle does.
  DeviceBuffer recv_x_scales_[2], recv_topk_idx_[2], recv_topk_weights_[2], combined_x_[2];
  DeviceBuffer slots_, in_rank_;
  static constexpr uint32_t kUploadedPlan = 2;
  DeviceBuffer plans_[3];
  // What each plan holds (empty: unknown to the host), and the dispatch
  // whose receive kernel left it (kNoPlan: none, or overwritten).
  static constexpr uint64_t kNoPlan = ~uint64_t{0};
  std::vector<int32_t> plan_held_[3];
  uint64_t plan_call_[2] = {kNoPlan, kNoPlan};
  // [phase: dispatch, combine][parity] u64 on the device: this rank's calls
  // of each so far, from which the kernels take their targets (GPU ABI
  // 1.10, "Epochs"), so a captured call replays with the same jobs.
  DeviceBuffer epochs_;
  uint64_t* epoch(uint32_t phase, uint64_t call) const {
    return static_cast<uint64_t*>(epochs_.data()) + phase * 2 + (call & 1);
  }
};

}  // namespace courier::ep
