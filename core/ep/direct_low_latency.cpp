#include "core/ep/direct_low_latency.hpp"

#include <fmt/format.h>

#include <vector>

#include "core/check.hpp"
#include "core/ep/element_types.hpp"
#include "core/ep/ll_outputs.hpp"

namespace courier::ep {

namespace {

constexpr uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

// Flags: the rows and counts of a dispatch are in; combine's rows are in; a
// rank finished reading what the others staged for it (they may stage the
// next call of that parity).
enum Phase : uint32_t { kData = 0, kCombine = 1, kRelease = 2 };

}  // namespace

LlDirectLayout::LlDirectLayout(uint32_t ranks, uint32_t experts, uint32_t max_tokens,
                               uint32_t hidden, uint32_t element_bytes, uint32_t max_topk)
    : ranks(ranks),
      experts(experts),
      local_experts(experts / ranks),
      max_tokens(max_tokens),
      rows_per_expert(ranks * max_tokens) {
  // Unpadded: the receive kernel reads rank r's counts at r * num_experts
  // (ll_receive_v1.records, GPU ABI); a padded record put every rank's but
  // the first elsewhere when num_experts is not a multiple of 4.
  record_bytes = 4ull * experts;
  const uint64_t rows = uint64_t{local_experts} * rows_per_expert;
  const uint64_t row_bytes = uint64_t{hidden} * element_bytes;
  const uint64_t scale_bytes = hidden % kFp8Block == 0 ? hidden / kFp8Block * 4ull : 0;
  uint64_t at = 0;
  auto take = [&at](uint64_t bytes) {
    const uint64_t here = at;
    at = align_up(at + bytes, 256);
    return here;
  };
  for (uint32_t p = 0; p < 2; ++p) {
    records[p] = take(ranks * record_bytes);
    staging_x[p] = take(rows * row_bytes);
    staging_scales[p] = take(rows * scale_bytes);
    staging_src[p] = take(rows * 4);
    staging_k[p] = take(rows * 4);
    x[p] = take(rows * row_bytes);
    scales[p] = take(rows * scale_bytes);
    src[p] = take(rows * 4);
    k[p] = take(rows * 4);
    count[p] = take(4ull * local_experts);
    range[p] = take(8ull * local_experts * ranks);
    slots[p] = take(4ull * max_tokens * max_topk);
    self_rows[p] = take(4ull * max_tokens * max_topk);
    // Room for a LogFMT slot per row (row_bytes + row_bytes / 64, docs/ep.md).
    combine[p] = take(uint64_t{max_tokens} * max_topk * (row_bytes + row_bytes / 64));
  }
  flags = take(3ull * 2 * ranks * 8);
  staging = take(record_bytes);
  done = take(4);
  done_send = take(4);
  total = at;
}

DirectLowLatency::DirectLowLatency(Context& ctx, const BufferOptions& options, DLDevice device)
    : ctx_(ctx),
      options_(options),
      device_(device),
      rank_(static_cast<uint32_t>(ctx.rank())),
      ranks_(static_cast<uint32_t>(ctx.world_size())),
      layout_(ranks_, options.num_experts, options.max_tokens_per_rank, options.hidden,
              options.element_bytes, options.max_topk),
      windows_(ctx, layout_.total),
      combined_x_{
          ctx.alloc(uint64_t{options.max_tokens_per_rank} * options.hidden * options.element_bytes),
          ctx.alloc(uint64_t{options.max_tokens_per_rank} * options.hidden *
                    options.element_bytes)},
      epochs_(ctx.alloc(4 * sizeof(uint64_t))) {
  const uint64_t zeros[4] = {0, 0, 0, 0};
  ctx.copy(epochs_.data(), zeros, sizeof zeros);
}

void DirectLowLatency::finish_refused(uint32_t phase, uint64_t call) {
  uint64_t* word = epoch_word(phase, call);
  uint64_t finished = 0;
  ctx_.copy(&finished, word, sizeof finished);
  ++finished;
  ctx_.copy(word, &finished, sizeof finished);
}

void DirectLowLatency::refuse(uint32_t phase, uint64_t call, const std::string& why) {
  const uint32_t parity = call & 1;
  try {
    windows_.clear_status();  // what an earlier call that did not wait found comes first
    windows_.set_refused();
    for (uint32_t p :
         phase == 0 ? std::vector<uint32_t>{kData, kRelease} : std::vector<uint32_t>{kCombine}) {
      windows_.signal(nullptr, 0, 0, layout_.flag(p, parity, rank_), call / 2 + 1,
                      epoch_word(phase, call));
    }
    windows_.check(windows_.ep().ep_sync(windows_.backend(), windows_.device()), "refusing");
    finish_refused(phase, call);
  } catch (const Error&) {
    // The refusal itself is the error worth reporting.
  }
  if (!windows_.host_waits()) windows_.break_with(why);
  windows_.throw_if_broken();  // an earlier call that did not wait failed
  throw CallRefused(why);
}

LowLatencyDispatchResult DirectLowLatency::dispatch(const LlInputs& in, bool return_recv_hook,
                                                    uint64_t call) {
  const uint32_t parity = call & 1;
  const uint64_t epoch = call / 2 + 1;
  const uint32_t L = layout_.local_experts;
  windows_.clear_status();
  auto* slots = reinterpret_cast<int32_t*>(windows_.at(layout_.slots[parity]));

  // Where the outputs go: the caller's tensors, or the window.
  Outputs& out = out_[parity];
  const bool caller = in.out_x != nullptr;
  out.x = caller ? in.out_x : windows_.at(layout_.x[parity]);
  out.scales = caller ? in.out_scales : windows_.at(layout_.scales[parity]);
  out.count =
      caller ? in.out_count : reinterpret_cast<int32_t*>(windows_.at(layout_.count[parity]));
  out.src = caller ? in.out_src : reinterpret_cast<int32_t*>(windows_.at(layout_.src[parity]));
  out.range =
      caller ? in.out_range : reinterpret_cast<int64_t*>(windows_.at(layout_.range[parity]));
  out.scales_layout = scales_layout_bits(in.fp8, in.scales_layout);
  call_fp8_[parity] = in.fp8;
  call_row_bytes_[parity] = in.fp8 ? in.hidden : in.hidden * (in.x_dtype.bits / 8);
  call_topk_[parity] = in.topk;

  if (!windows_.fuses()) {
    courier_gpu_ep_route_v1 route{};
    route.struct_size = sizeof route;
    route.device = windows_.device();
    route.mode = COURIER_GPU_EP_ROUTE_EXPERTS;
    route.tokens = in.tokens;
    route.topk = in.topk;
    route.num_experts = layout_.experts;
    route.num_ranks = ranks_;
    route.topk_idx = in.idx;
    route.slots = slots;
    route.record = reinterpret_cast<uint32_t*>(windows_.at(layout_.staging));
    route.bad_index = windows_.bad_index_device();
    route.status = windows_.status_device();
    windows_.check(windows_.ep().ep_route(windows_.backend(), &route), "routing the tokens");
  }

  // The rows go straight into the destinations' staging blocks (no round
  // of counts first); the counts follow with the data flag.
  courier_gpu_ep_ll_dispatch_v1 job{};
  job.struct_size = sizeof job;
  job.device = windows_.device();
  job.rank = rank_;
  job.num_ranks = ranks_;
  job.tokens = in.tokens;
  job.topk = in.topk;
  job.num_experts = layout_.experts;
  job.hidden = in.hidden;
  job.x_dtype_bits = in.x_dtype.bits;
  job.fp8 = (in.fp8 ? COURIER_GPU_EP_FP8_QUANTIZE : 0) |
            (in.fp8 && in.round_scale ? COURIER_GPU_EP_FP8_POW2_SCALES : 0);
  job.max_tokens = layout_.max_tokens;
  job.x = in.x;
  job.topk_idx = in.idx;
  job.slots = slots;
  job.x_off = layout_.staging_x[parity];
  job.scales_off = layout_.staging_scales[parity];
  job.src_off = layout_.staging_src[parity];
  job.k_off = layout_.staging_k[parity];
  job.released = reinterpret_cast<const uint64_t*>(windows_.at(layout_.flag(kRelease, parity, 0)));
  job.released_epoch = epoch - 1;  // what they staged two calls ago is read
  job.timeout_ns = windows_.timeout_ns();
  job.status = windows_.status_device();
  job.peers = windows_.peers();
  job.epoch_word = epoch_word(kData, call);
  if (windows_.local_rows()) {
    job.self_rows = reinterpret_cast<int32_t*>(windows_.at(layout_.self_rows[parity]));
  }
  const uint64_t record_off = layout_.records[parity] + rank_ * layout_.record_bytes;
  courier_gpu_ep_ll_receive_v1 fused_receive{};
  DoneMark done;  // the fused receive's, when the call waits for it
  if (windows_.fuses()) {
    // One launch routes, stores, counts and signals, and (without a hook)
    // receives.
    job.fuse = COURIER_GPU_EP_FUSE_ROUTE | COURIER_GPU_EP_FUSE_SIGNAL;
    job.route_slots = slots;
    job.bad_index = windows_.bad_index_device();
    job.record_off = record_off;
    job.flag_off = layout_.flag(kData, parity, rank_);
    job.epoch = epoch;
    job.done = reinterpret_cast<uint32_t*>(windows_.at(layout_.done_send));
    if (!return_recv_hook) {
      fused_receive = receive_job(call, true);
      done = windows_.arm_done(windows_.host_waits());
      fused_receive.done_mark = done.device;
      job.fuse |= COURIER_GPU_EP_FUSE_RECEIVE;
      job.receive = &fused_receive;
    }
  }
  windows_.check(windows_.ep().ep_ll_dispatch(windows_.backend(), &job), "sending the rows");
  if (!windows_.fuses() && return_recv_hook) {
    windows_.signal(windows_.at(layout_.staging), layout_.record_bytes, record_off,
                    layout_.flag(kData, parity, rank_), epoch, epoch_word(kData, call));
  } else if (!windows_.fuses()) {
    windows_.signal_and_wait(windows_.at(layout_.staging), layout_.record_bytes, record_off,
                             layout_.flag(kData, parity, rank_), layout_.flag(kData, parity, 0),
                             epoch, epoch_word(kData, call));
  }

  LowLatencyDispatchResult result;
  describe_ll_outputs(result, {out.x, out.scales, out.count, out.src, out.range}, device_, L,
                      ranks_, layout_.max_tokens, in.hidden, in.x_dtype, in.fp8, in.scales_layout);
  LowLatencyHandle& handle = result.handle;
  handle.num_tokens = in.tokens;
  handle.topk = in.topk;
  handle.hidden = in.hidden;
  handle.dtype_code = in.x_dtype.code;
  handle.dtype_bits = in.x_dtype.bits;
  handle.call = call;
  handle.layout_range = in.out_range;
  if (return_recv_hook) {  // run once (LowLatency::dispatch sees to it)
    result.recv_hook = [this, call] { receive(call, false); };
  } else if (windows_.fuses()) {
    windows_.sync("low_latency_dispatch", done);
  } else {
    receive(call, true);
  }
  return result;
}

courier_gpu_ep_ll_receive_v1 DirectLowLatency::receive_job(uint64_t call, bool wait) const {
  const uint32_t parity = call & 1;
  const uint64_t epoch = call / 2 + 1;
  const Outputs& out = out_[parity];
  courier_gpu_ep_ll_receive_v1 job{};
  job.struct_size = sizeof job;
  job.device = windows_.device();
  job.rank = rank_;
  job.num_ranks = ranks_;
  job.local_experts = layout_.local_experts;
  job.num_experts = layout_.experts;
  job.max_tokens = layout_.max_tokens;
  job.row_bytes = call_row_bytes_[parity];
  job.scale_cols = call_fp8_[parity] ? options_.hidden / kFp8Block : 0;
  job.records = reinterpret_cast<const uint32_t*>(windows_.at(layout_.records[parity]));
  job.staging_x = windows_.at(layout_.staging_x[parity]);
  job.staging_scales = reinterpret_cast<const float*>(windows_.at(layout_.staging_scales[parity]));
  job.staging_src = reinterpret_cast<const int32_t*>(windows_.at(layout_.staging_src[parity]));
  job.staging_k = reinterpret_cast<const int32_t*>(windows_.at(layout_.staging_k[parity]));
  job.x = out.x;
  job.scales = static_cast<float*>(out.scales);
  job.src = out.src;
  job.k = reinterpret_cast<int32_t*>(windows_.at(layout_.k[parity]));
  job.count = out.count;
  job.range = out.range;
  job.scales_layout = out.scales_layout;
  job.epoch_word = epoch_word(kData, call);
  job.done = reinterpret_cast<uint32_t*>(windows_.at(layout_.done));
  job.release_off = layout_.flag(kRelease, parity, rank_);
  job.epoch = epoch;
  job.status = windows_.status_device();
  job.peers = windows_.peers();
  if (wait) job.wait = windows_.wait_job(layout_.flag(kData, parity, 0), epoch, job.epoch_word);
  if (windows_.local_rows()) {
    job.self_rows = reinterpret_cast<int32_t*>(windows_.at(layout_.self_rows[parity]));
    job.topk = call_topk_[parity];
  }
  return job;
}

void DirectLowLatency::receive(uint64_t call, bool waited) {
  const uint32_t parity = call & 1;
  const uint64_t epoch = call / 2 + 1;
  // Fused launches: the receive kernel waits for the flags itself.
  if (!waited && !windows_.fuses())
    windows_.wait(layout_.flag(kData, parity, 0), epoch, epoch_word(kData, call));
  courier_gpu_ep_ll_receive_v1 job = receive_job(call, !waited && windows_.fuses());
  // (arm_done gives none without fused launches: the job has no wait then.)
  const DoneMark done = windows_.arm_done(windows_.host_waits() && !waited);
  job.done_mark = done.device;
  windows_.check(windows_.ep().ep_ll_receive(windows_.backend(), &job), "packing the rows");
  windows_.sync("low_latency_dispatch", done);
}

CombineResult DirectLowLatency::combine(const std::byte* x, const float* topk_weights,
                                        const LowLatencyHandle& handle, uint64_t call, bool logfmt,
                                        void* out) {
  const uint32_t parity = call & 1;
  const uint32_t from = handle.call & 1;  // the dispatch's buffers
  const uint64_t epoch = call / 2 + 1;
  windows_.clear_status();
  const uint64_t row_bytes = uint64_t{handle.hidden} * (handle.dtype_bits / 8);

  courier_gpu_ep_combine_send_v1 send{};
  send.struct_size = sizeof send;
  send.device = windows_.device();
  send.mode = COURIER_GPU_EP_ROUTE_EXPERTS | (logfmt ? COURIER_GPU_EP_COMBINE_LOGFMT : 0u);
  send.rank = rank_;
  send.num_ranks = ranks_;
  send.row_bytes = static_cast<uint32_t>(row_bytes);
  send.local_experts = layout_.local_experts;
  send.rows_per_expert = layout_.rows_per_expert;
  send.topk = handle.topk;
  send.x = x;
  send.count = out_[from].count;  // the dispatch's outputs
  send.range = out_[from].range;
  send.src = out_[from].src;
  send.k = reinterpret_cast<const int32_t*>(windows_.at(layout_.k[from]));
  send.out_off = layout_.combine[parity];
  send.status = windows_.status_device();
  send.peers = windows_.peers();
  // This rank's own rows stay in x, where its reduce reads them (LogFMT
  // sends them all: the reduce decodes every term alike).
  const bool keep_own = windows_.local_rows() && !logfmt;
  send.skip_self = keep_own ? 1 : 0;
  if (windows_.fuses()) {  // the send kernel signals, the reduce kernel waits
    send.flag_off = layout_.flag(kCombine, parity, rank_);
    send.epoch = epoch;
    send.epoch_word = epoch_word(kCombine, call);
    send.done = reinterpret_cast<uint32_t*>(windows_.at(layout_.done_send));
  }

  courier_gpu_ep_reduce_v1 reduce{};
  reduce.struct_size = sizeof reduce;
  reduce.device = windows_.device();
  reduce.mode = send.mode;
  reduce.tokens = handle.num_tokens;
  reduce.hidden = handle.hidden;
  reduce.dtype_bits = handle.dtype_bits;
  reduce.terms = handle.topk;
  reduce.slots = reinterpret_cast<const int32_t*>(windows_.at(layout_.slots[from]));
  reduce.weights = topk_weights;
  reduce.rows = windows_.at(layout_.combine[parity]);
  reduce.out = out != nullptr ? out : combined_x_[parity].data();
  reduce.status = windows_.status_device();
  reduce.epoch_word = epoch_word(kCombine, call);
  if (keep_own) {
    reduce.local_rows = x;
    reduce.local_index = reinterpret_cast<const int32_t*>(windows_.at(layout_.self_rows[from]));
  }
  DoneMark done;
  if (windows_.fuses()) {
    reduce.wait = windows_.wait_job(layout_.flag(kCombine, parity, 0), epoch, reduce.epoch_word);
    reduce.done = reinterpret_cast<uint32_t*>(windows_.at(layout_.done));
    done = windows_.arm_done(windows_.host_waits());
    reduce.done_mark = done.device;
  }
  windows_.combine(send, reduce, layout_.flag(kCombine, parity, rank_),
                   layout_.flag(kCombine, parity, 0), epoch, epoch_word(kCombine, call));
  windows_.sync("low_latency_combine", done);
  CombineResult result;
  result.combined_x = TensorView(reduce.out, device_,
                                 DLDataType{static_cast<uint8_t>(handle.dtype_code),
                                            static_cast<uint8_t>(handle.dtype_bits), 1},
                                 {static_cast<int64_t>(handle.num_tokens), handle.hidden});
  return result;
}

}  // namespace courier::ep
