// High-throughput dispatch and combine over the direct path (docs/ep.md,
// "Direct path"): the GPU kernels of the backend's ep_* entry points store
// rows straight into the peers' windows, so a dispatch is two rounds: the
// counts (every rank learns where its rows land at every peer), then the
// rows, each announced by a flag per rank. The host waits once per
// dispatch, for the counts (to shape the outputs), and, on the Buffer's
// own stream, at the end of a call.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/ep/call_admission.hpp"
#include "core/ep/mapped_host_memory.hpp"
#include "core/ep/peer_windows.hpp"
#include "courier/ep.hpp"

namespace courier::ep {

// A high-throughput dispatch's arguments once checked (pointers are device
// memory).
struct HtInputs {
  const std::byte* x = nullptr;
  const float* scales = nullptr;  // FP8 x
  const int64_t* idx = nullptr;
  const float* weights = nullptr;
  const uint8_t* in_rank = nullptr;
  uint32_t tokens = 0, hidden = 0, topk = 0;
  // topk_idx was given: the results show its columns. (Not idx != nullptr:
  // a rank without tokens may pass an empty tensor with no data pointer,
  // and still receives other ranks' rows with their columns.)
  bool with_topk = false;
  DType dtype = DType::float32;
  DLDataType x_dtype{};
  CallConfig config;
};

// Where everything lives in every rank's window; [parity] = call parity (a
// peer may be one call ahead).
struct HtDirectLayout {
  HtDirectLayout(uint32_t ranks, uint32_t max_tokens, uint32_t row_bytes, uint32_t hidden,
                 uint32_t max_topk, uint32_t max_experts);

  uint32_t ranks, max_tokens, row_bytes, max_experts;
  uint32_t record_words;  // counts per rank, then per expert
  uint64_t record_bytes;
  uint64_t records[2], recv_x[2], recv_scales[2], recv_idx[2], recv_weights[2], combine[2];
  uint64_t flags;  // [phase: notify, data, combine][parity][rank] u64
  // Local scratch: slots [max_tokens][ranks] per dispatch parity (a
  // combine of one of the last two dispatches reads its slots there), this
  // rank's record, the combine plan (begins [ranks + 1], then send_index
  // [max_tokens][ranks]) for older handles, is_token_in_rank of a cached
  // dispatch.
  uint64_t slots[2], staging, plan, in_rank;
  // The fused launches' block counters, u32 each: the combine's send and
  // reduce, the dispatch's route and rows (GPU ABI 1.16).
  uint64_t done;
  static constexpr uint32_t kDoneSend = 0, kDoneReduce = 1, kDoneRoute = 2, kDoneRows = 3;
  uint64_t total;

  uint64_t flag(uint32_t phase, uint32_t parity, uint32_t rank) const {
    return flags + ((uint64_t{phase} * 2 + parity) * ranks + rank) * 8;
  }
};

class DirectHighThroughput {
 public:
  DirectHighThroughput(Context& ctx, const BufferOptions& options, DLDevice device);

  DispatchResult dispatch(const HtInputs& in, const DispatchArgs& args, uint64_t call);
  CombineResult combine(const std::byte* x, const DLDataType& dtype, const DispatchHandle& handle,
                        uint64_t call);
  // Fails call `call` of `phase` (0 dispatch, 1 combine) on every rank:
  // raises this rank's flags marked refused, then throws `why`.
  [[noreturn]] void refuse(uint32_t phase, uint64_t call, const std::string& why);
  uint64_t marked_waits() const { return windows_.marked_waits(); }
  // false: calls return once queued (a dispatch after the host read its
  // counts); what their kernels find surfaces at the next call or
  // synchronize() (docs/ep.md, "Calls that do not wait").
  void set_host_waits(bool waits) { windows_.set_host_waits(waits); }
  void synchronize() { windows_.synchronize(); }

 private:
  Context& ctx_;
  BufferOptions options_;
  DLDevice device_;
  uint32_t rank_, ranks_;
  HtDirectLayout layout_;
  PeerWindows windows_;
  DeviceBuffer combined_x_[2];  // per combine parity, as the dispatch outputs
  // What the host reads after a dispatch's first round (every rank's
  // record, then this rank's slots), copied there on the EP stream; at
  // readback_mark_ the word PeerWindows::mark() copies after them. With
  // fused launches (GPU ABI 1.16) the route kernel stores the slots there
  // itself, this rank's counts in place of the records, then the mark.
  uint64_t readback_mark_;
  MappedHostMemory readback_;
  // Whether the GPU backend has ep_copy, which the mark needs.
  bool marks_;
  // The combine plan per combine parity, copied from here to the window's
  // on the EP stream; plan_waits_: host_waits_made() when it was last
  // queued (a host wait since: its copy is done, the area may be rewritten).
  MappedHostMemory plan_host_[2];
  uint64_t plan_waits_[2] = {~0ull, ~0ull};
  // Per dispatch parity, the last dispatch that completed (its call, tokens
  // and counts): a combine of its handle finds its plan in the window
  // (GPU ABI 1.16). Cleared when a dispatch of that parity starts.
  struct Dispatched {
    uint64_t call = ~0ull;
    uint32_t tokens = 0;
    std::vector<uint32_t> recv_counts;
  };
  Dispatched dispatched_[2];
  // Whether `handle` is what dispatched_ holds for its parity.
  bool plan_on_device(const DispatchHandle& handle) const;
};

}  // namespace courier::ep
