#include "core/ep/direct_high_throughput.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "core/check.hpp"
#include "core/context_internals.hpp"
#include "core/ep/element_types.hpp"

namespace courier::ep {

namespace {

constexpr uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

// Experts a direct-path Buffer counts per rank when BufferOptions does not
// say (num_experts 0).
constexpr uint32_t kDefaultMaxExperts = 1024;

enum Phase : uint32_t { kNotify = 0, kData = 1, kCombine = 2 };

}  // namespace

HtDirectLayout::HtDirectLayout(uint32_t ranks, uint32_t max_tokens, uint32_t row_bytes,
                               uint32_t hidden, uint32_t max_topk, uint32_t max_experts)
    : ranks(ranks), max_tokens(max_tokens), row_bytes(row_bytes), max_experts(max_experts) {
  record_words = static_cast<uint32_t>(align_up(ranks + max_experts, 4));
  record_bytes = 4ull * record_words;
  const uint64_t rows = uint64_t{ranks} * max_tokens;
  const uint64_t scale_bytes = hidden % kFp8Block == 0 ? hidden / kFp8Block * 4ull : 0;
  uint64_t at = 0;
  auto take = [&at](uint64_t bytes) {
    const uint64_t here = at;
    at = align_up(at + bytes, 256);
    return here;
  };
  for (uint32_t p = 0; p < 2; ++p) {
    records[p] = take(ranks * record_bytes);
    recv_x[p] = take(rows * row_bytes);
    recv_scales[p] = take(rows * scale_bytes);
    recv_idx[p] = take(rows * max_topk * 8);
    recv_weights[p] = take(rows * max_topk * 4);
    combine[p] = take(rows * row_bytes);
  }
  flags = take(3ull * 2 * ranks * 8);
  slots[0] = take(rows * 4);
  slots[1] = take(rows * 4);
  staging = take(record_bytes);
  plan = take(4ull * (ranks + 1) + rows * 4);
  in_rank = take(rows);
  done = take(16);
  total = at;
}

DirectHighThroughput::DirectHighThroughput(Context& ctx, const BufferOptions& options,
                                           DLDevice device)
    : ctx_(ctx),
      options_(options),
      device_(device),
      rank_(static_cast<uint32_t>(ctx.rank())),
      ranks_(static_cast<uint32_t>(ctx.world_size())),
      layout_(ranks_, options.max_tokens_per_rank, options.hidden * options.element_bytes,
              options.hidden, options.max_topk,
              options.num_experts > 0 ? options.num_experts : kDefaultMaxExperts),
      windows_(ctx, layout_.total),
      combined_x_{ctx.alloc(uint64_t{options.max_tokens_per_rank} * layout_.row_bytes),
                  ctx.alloc(uint64_t{options.max_tokens_per_rank} * layout_.row_bytes)},
      readback_mark_(align_up(
          uint64_t{ranks_} * layout_.record_bytes + 4ull * options.max_tokens_per_rank * ranks_,
          64)),
      readback_(ContextInternals::gpu(ctx), readback_mark_ + 64,
                "mapping the dispatch readback area"),
      marks_(ContextInternals::gpu(ctx).supports(GpuFeature::ep_copy)),
      plan_host_{MappedHostMemory(ContextInternals::gpu(ctx),
                                  4ull * (ranks_ + 1) + 4ull * options.max_tokens_per_rank * ranks_,
                                  "mapping the combine plan"),
                 MappedHostMemory(ContextInternals::gpu(ctx),
                                  4ull * (ranks_ + 1) + 4ull * options.max_tokens_per_rank * ranks_,
                                  "mapping the combine plan")} {}

void DirectHighThroughput::refuse(uint32_t phase, uint64_t call, const std::string& why) {
  const uint32_t parity = call & 1;
  const uint64_t epoch = call / 2 + 1;
  try {
    windows_.set_refused();
    for (uint32_t p :
         phase == 0 ? std::vector<uint32_t>{kNotify, kData} : std::vector<uint32_t>{kCombine}) {
      windows_.signal(nullptr, 0, 0, layout_.flag(p, parity, rank_), epoch);
    }
    windows_.check(windows_.ep().ep_sync(windows_.backend(), windows_.device()), "refusing");
  } catch (const Error&) {
    // The refusal itself is the error worth reporting.
  }
  // A dispatch's peers learn of the refusal where they wait for the counts;
  // a combine's, where calls do not wait, only at a later call: then their
  // Buffers break, and this rank's must too.
  if (phase == 1 && !windows_.host_waits() && windows_.ht_fused()) windows_.break_with(why);
  windows_.throw_if_broken();  // an earlier call that did not wait failed
  throw CallRefused(why);
}

DispatchResult DirectHighThroughput::dispatch(const HtInputs& in, const DispatchArgs& args,
                                              uint64_t call) {
  const uint32_t parity = call & 1;
  const uint64_t epoch = call / 2 + 1;
  const uint32_t experts = in.config.num_experts, per_rank = experts / ranks_;
  if (experts > layout_.max_experts) {
    refuse(0, call,
           fmt::format("ep::Buffer::dispatch: {} experts, more than the {} this Buffer counts "
                       "(BufferOptions::num_experts)",
                       experts, layout_.max_experts));
  }
  const bool fp8 = in.dtype == DType::fp8_e4m3;
  const bool with_topk = in.with_topk;
  windows_.clear_status();
  dispatched_[parity] = {};  // this parity's slots and records are rewritten

  // Round 1: slots and counts, to every rank.
  const uint8_t* in_rank = in.in_rank;
  if (args.cached_handle != nullptr) {
    std::vector<uint8_t> mask(args.cached_handle->send_index.size());
    for (size_t i = 0; i < mask.size(); ++i) mask[i] = args.cached_handle->send_index[i] >= 0;
    ctx_.copy(windows_.at(layout_.in_rank), mask.data(), mask.size());
    in_rank = reinterpret_cast<const uint8_t*>(windows_.at(layout_.in_rank));
  }
  courier_gpu_ep_route_v1 route{};
  route.struct_size = sizeof route;
  route.device = windows_.device();
  route.mode = COURIER_GPU_EP_ROUTE_RANKS;
  route.tokens = in.tokens;
  route.topk = with_topk ? in.topk : 0;
  route.num_experts = experts;
  route.num_ranks = ranks_;
  route.topk_idx = in.idx;
  route.in_rank = in_rank;
  route.slots = reinterpret_cast<int32_t*>(windows_.at(layout_.slots[parity]));
  route.record = reinterpret_cast<uint32_t*>(windows_.at(layout_.staging));
  route.bad_index = windows_.bad_index_device();
  route.status = windows_.status_device();
  // What the host reads: this rank's counts (fused) or every rank's record,
  // then this rank's slots, then the mark.
  const uint64_t record_bytes = uint64_t{ranks_} * layout_.record_bytes;
  auto* readback = static_cast<std::byte*>(readback_.host());
  auto* mark = reinterpret_cast<uint32_t*>(readback + readback_mark_);
  auto* done = reinterpret_cast<uint32_t*>(windows_.at(layout_.done));
  const uint64_t record_off = layout_.records[parity] + rank_ * layout_.record_bytes;
  const bool fused = windows_.ht_fused();
  if (fused) {
    // One launch counts, signals, waits for every rank's counts and stores
    // the counts, the slots and the mark into the readback area. Only the
    // counts of this call's experts travel.
    const courier_gpu_ep_signal_v1 signal = windows_.signal_and_wait_job(
        windows_.at(layout_.staging), align_up(4ull * (ranks_ + experts), 16), record_off,
        layout_.flag(kNotify, parity, rank_), layout_.flag(kNotify, parity, 0), epoch);
    route.signal = &signal;
    route.done = done + HtDirectLayout::kDoneRoute;
    route.records = reinterpret_cast<const uint32_t*>(windows_.at(layout_.records[parity]));
    route.rank = rank_;
    route.experts_per_rank = per_rank;
    route.record_words = layout_.record_words;
    // The device's addresses of the readback area (the host reads it at
    // readback, the kernel stores through these).
    auto* seen_by_device = static_cast<std::byte*>(readback_.device());
    route.host_counts = reinterpret_cast<uint32_t*>(seen_by_device);
    route.host_mark = reinterpret_cast<uint32_t*>(seen_by_device + readback_mark_);
    route.host_slots = reinterpret_cast<int32_t*>(seen_by_device + record_bytes);
    PeerWindows::arm_mark(mark);
    windows_.check(windows_.ep().ep_route(windows_.backend(), &route), "routing the tokens");
  } else {
    windows_.check(windows_.ep().ep_route(windows_.backend(), &route), "routing the tokens");
    windows_.signal_and_wait(windows_.at(layout_.staging), layout_.record_bytes, record_off,
                             layout_.flag(kNotify, parity, rank_), layout_.flag(kNotify, parity, 0),
                             epoch);
    windows_.copy(readback, windows_.at(layout_.records[parity]), record_bytes,
                  "reading the counts back");
    windows_.copy(readback + record_bytes, route.slots, uint64_t{in.tokens} * ranks_ * 4,
                  "reading the slots back");
  }
  // Then the one wait for them: the host shapes the outputs by the counts.
  // Without a cached handle or num_worst_tokens nothing in them can refuse
  // the call, so the rows go out first and the host reads the counts while
  // they travel (a mark on the stream after them); otherwise the host
  // checks the counts before any row goes.
  const bool rows_first = (fused || (windows_.fuses() && marks_)) &&
                          args.cached_handle == nullptr && args.num_worst_tokens == 0;
  // Whether the call waits at its end (below), and for the rows' launch's
  // mark where it can.
  const bool waits_at_end = !(rows_first && fused) || windows_.host_waits();
  DoneMark done_rows;

  // Round 2: the rows, straight into every destination's outputs.
  auto send_rows = [&](uint64_t pad_rows) {
    courier_gpu_ep_ht_dispatch_v1 job{};
    job.struct_size = sizeof job;
    job.device = windows_.device();
    job.rank = rank_;
    job.num_ranks = ranks_;
    job.tokens = in.tokens;
    job.topk = with_topk ? in.topk : 0;
    job.experts_per_rank = per_rank;
    job.row_bytes = fp8 ? in.hidden : in.hidden * (in.dtype == DType::float32 ? 4 : 2);
    job.scale_cols = fp8 ? in.hidden / kFp8Block : 0;
    job.record_words = layout_.record_words;
    job.pad_rows = static_cast<uint32_t>(pad_rows);
    job.x = in.x;
    job.x_scales = fp8 ? in.scales : nullptr;
    job.topk_idx = in.idx;
    job.topk_weights = in.weights;
    job.slots = route.slots;
    job.records = reinterpret_cast<const uint32_t*>(windows_.at(layout_.records[parity]));
    job.x_off = layout_.recv_x[parity];
    job.scales_off = layout_.recv_scales[parity];
    job.idx_off = layout_.recv_idx[parity];
    job.weights_off = layout_.recv_weights[parity];
    job.status = windows_.status_device();
    job.peers = windows_.peers();
    if (fused) {  // the launch's last block signals and waits
      job.done = done + HtDirectLayout::kDoneRows;
      job.flag_off = layout_.flag(kData, parity, rank_);
      job.epoch = epoch;
      job.wait = windows_.wait_job(layout_.flag(kData, parity, 0), epoch, nullptr);
      done_rows = windows_.arm_done(waits_at_end);
      job.done_mark = done_rows.device;
    }
    windows_.check(windows_.ep().ep_ht_dispatch(windows_.backend(), &job), "sending the rows");
    if (!fused) {
      windows_.signal_and_wait(nullptr, 0, 0, layout_.flag(kData, parity, rank_),
                               layout_.flag(kData, parity, 0), epoch);
    }
  };
  // Fused: the route kernel stored, after the counts, the status the calls
  // before this one left: a call that did not wait is settled by it.
  const uint32_t* earlier =
      fused ? reinterpret_cast<const uint32_t*>(readback) + ranks_ + per_rank : nullptr;
  if (rows_first) {
    if (!fused) windows_.mark(mark, "marking the counts");
    send_rows(0);
    windows_.wait_marked(mark, "dispatch", earlier);
  } else if (fused) {
    windows_.wait_marked(mark, "dispatch", earlier);
  } else {
    windows_.sync_now("dispatch");
  }

  DispatchHandle handle;
  handle.num_tokens = in.tokens;
  handle.hidden = in.hidden;
  handle.dtype_code = fp8 ? static_cast<uint32_t>(kDLBfloat) : in.x_dtype.code;
  handle.dtype_bits = fp8 ? 16 : in.x_dtype.bits;
  handle.num_worst_tokens = static_cast<uint32_t>(args.num_worst_tokens);
  DispatchResult result;
  result.num_recv_tokens_per_expert.assign(per_rank, 0);
  uint64_t received = 0;
  // Fused: the rows from each source, then the tokens per local expert
  // (summed over the sources); otherwise every source's record.
  const auto* words = reinterpret_cast<const uint32_t*>(readback);
  for (uint32_t s = 0; s < ranks_; ++s) {
    const uint32_t* record = words + uint64_t{s} * layout_.record_words;
    handle.recv_counts.push_back(fused ? words[s] : record[rank_]);
    received += handle.recv_counts.back();
    for (uint32_t l = 0; l < per_rank && !fused; ++l) {
      result.num_recv_tokens_per_expert[l] +=
          static_cast<int32_t>(record[ranks_ + rank_ * per_rank + l]);
    }
  }
  for (uint32_t l = 0; l < per_rank && fused; ++l) {
    result.num_recv_tokens_per_expert[l] = static_cast<int32_t>(words[ranks_ + l]);
  }
  if (args.cached_handle != nullptr) {
    for (uint32_t s = 0; s < ranks_; ++s) {
      if (handle.recv_counts[s] != args.cached_handle->recv_counts[s]) {
        refuse(0, call,
               fmt::format("ep::Buffer::dispatch: rank {} sends {} rows where the cached handle "
                           "expects {}: the ranks did not all reuse the same layout",
                           s, handle.recv_counts[s], args.cached_handle->recv_counts[s]));
      }
    }
  }
  const uint64_t rows_out =
      args.num_worst_tokens > 0 ? static_cast<uint64_t>(args.num_worst_tokens) : received;
  if (received > rows_out) {
    refuse(0, call,
           fmt::format("ep::Buffer::dispatch: {} rows arrive, more than num_worst_tokens {}",
                       received, rows_out));
  }
  if (!rows_first) send_rows(args.num_worst_tokens > 0 ? rows_out : 0);
  // While the rows travel: the handle's copy of the slots.
  handle.send_index.resize(uint64_t{in.tokens} * ranks_);
  std::memcpy(handle.send_index.data(), readback + record_bytes, handle.send_index.size() * 4);
  // Where a rank may refuse after the counts (a cached handle's, or
  // num_worst_tokens), its peers learn it at this wait, as it throws; so it
  // waits on either stream. Otherwise, on the caller's stream, the call
  // returns with its rows queued.
  // Without fused launches (GPU ABI 1.16) nothing tells an earlier call's
  // failure from the next call's at its mark: every call waits.
  if (rows_first && fused) {
    windows_.sync("dispatch", done_rows);
  } else {
    windows_.sync_now("dispatch", done_rows);
  }

  const auto n = static_cast<int64_t>(rows_out);
  const uint32_t columns = with_topk ? in.topk : 0;
  result.recv_x =
      TensorView(windows_.at(layout_.recv_x[parity]), device_, in.x_dtype, {n, in.hidden});
  if (fp8) {
    result.recv_x_scales = TensorView(windows_.at(layout_.recv_scales[parity]), device_,
                                      DLDataType{kDLFloat, 32, 1}, {n, in.hidden / kFp8Block});
  }
  result.recv_topk_idx = TensorView(windows_.at(layout_.recv_idx[parity]), device_,
                                    DLDataType{kDLInt, 64, 1}, {n, columns});
  result.recv_topk_weights = TensorView(windows_.at(layout_.recv_weights[parity]), device_,
                                        DLDataType{kDLFloat, 32, 1}, {n, columns});
  handle.call = call;
  dispatched_[parity] = {call, in.tokens, handle.recv_counts};
  result.handle = std::move(handle);
  return result;
}

bool DirectHighThroughput::plan_on_device(const DispatchHandle& handle) const {
  const Dispatched& d = dispatched_[handle.call & 1];
  return windows_.ht_fused() && d.call == handle.call && d.tokens == handle.num_tokens &&
         d.recv_counts == handle.recv_counts;
}

CombineResult DirectHighThroughput::combine(const std::byte* x, const DLDataType& dtype,
                                            const DispatchHandle& handle, uint64_t call) {
  const uint32_t parity = call & 1;
  const uint64_t epoch = call / 2 + 1;
  windows_.clear_status();
  // The plan: where each source's rows begin in x, and which row of each
  // rank holds each token. A handle of one of the last two dispatches finds
  // it where the dispatch left it in the window (its records and slots).
  // Otherwise the plan from the handle, written into this parity's mapped
  // area and copied on the EP stream (no host wait), once the copy queued
  // from it two combines ago is done.
  const bool on_device = plan_on_device(handle);
  uint32_t rows = 0;
  for (uint32_t c : handle.recv_counts) rows += c;
  const int32_t* begins = nullptr;
  const int32_t* slots = nullptr;
  if (on_device) {
    slots = reinterpret_cast<const int32_t*>(windows_.at(layout_.slots[handle.call & 1]));
  } else {
    if (plan_waits_[parity] == windows_.host_waits_made()) windows_.synchronize();
    auto* plan = static_cast<int32_t*>(plan_host_[parity].host());
    plan[0] = 0;
    for (uint32_t s = 0; s < ranks_; ++s)
      plan[s + 1] = plan[s] + static_cast<int32_t>(handle.recv_counts[s]);
    std::copy(handle.send_index.begin(), handle.send_index.end(), plan + ranks_ + 1);
    windows_.copy(windows_.at(layout_.plan), plan, (ranks_ + 1 + handle.send_index.size()) * 4,
                  "copying the combine plan");
    plan_waits_[parity] = windows_.host_waits_made();
    begins = reinterpret_cast<const int32_t*>(windows_.at(layout_.plan));
    slots = begins + ranks_ + 1;
  }
  uint32_t own_begin = 0;
  for (uint32_t s = 0; s < rank_; ++s) own_begin += handle.recv_counts[s];

  courier_gpu_ep_combine_send_v1 send{};
  send.struct_size = sizeof send;
  send.device = windows_.device();
  send.mode = COURIER_GPU_EP_ROUTE_RANKS;
  send.rank = rank_;
  send.num_ranks = ranks_;
  send.row_bytes = layout_.row_bytes;
  send.rows = rows;
  send.rows_per_rank = options_.max_tokens_per_rank;
  send.x = x;
  send.begins = begins;
  send.out_off = layout_.combine[parity];
  send.status = windows_.status_device();
  send.peers = windows_.peers();
  auto* done = reinterpret_cast<uint32_t*>(windows_.at(layout_.done));
  // This rank's own rows stay where they are: the reduce reads them in x
  // (16-byte loads: where x allows them).
  const std::byte* own_rows = x + uint64_t{own_begin} * layout_.row_bytes;
  const bool keep_own = windows_.fuses() && (reinterpret_cast<uintptr_t>(own_rows) & 15u) == 0;
  if (on_device) {
    send.records = reinterpret_cast<const uint32_t*>(windows_.at(layout_.records[handle.call & 1]));
    send.record_words = layout_.record_words;
    send.moved_rows = keep_own ? rows - handle.recv_counts[rank_] : rows;
  }
  if (windows_.fuses()) {  // the send kernel signals, the reduce kernel waits
    send.flag_off = layout_.flag(kCombine, parity, rank_);
    send.epoch = epoch;
    send.done = done;
    send.skip_self = keep_own ? 1 : 0;
  }

  courier_gpu_ep_reduce_v1 reduce{};
  reduce.struct_size = sizeof reduce;
  reduce.device = windows_.device();
  reduce.mode = COURIER_GPU_EP_ROUTE_RANKS;
  reduce.tokens = handle.num_tokens;
  reduce.hidden = handle.hidden;
  reduce.dtype_bits = dtype.bits;
  reduce.terms = ranks_;
  reduce.rows_per_term = options_.max_tokens_per_rank;
  reduce.slots = slots;
  reduce.rows = windows_.at(layout_.combine[parity]);
  reduce.out = combined_x_[call & 1].data();
  reduce.status = windows_.status_device();
  DoneMark done_reduce;
  if (windows_.fuses()) {
    reduce.wait = windows_.wait_job(layout_.flag(kCombine, parity, 0), epoch, nullptr);
    reduce.done = done + 1;
    done_reduce = windows_.arm_done(!windows_.ht_fused() || windows_.host_waits());
    reduce.done_mark = done_reduce.device;
    if (keep_own) {
      reduce.local_rows = own_rows;
      reduce.local_term = rank_;
    }
  }
  windows_.combine(send, reduce, layout_.flag(kCombine, parity, rank_),
                   layout_.flag(kCombine, parity, 0), epoch);
  if (windows_.ht_fused()) {
    windows_.sync("combine", done_reduce);
  } else {
    windows_.sync_now("combine", done_reduce);
  }
  CombineResult result;
  result.combined_x = TensorView(combined_x_[call & 1].data(), device_, dtype,
                                 {static_cast<int64_t>(handle.num_tokens), handle.hidden});
  return result;
}

}  // namespace courier::ep
