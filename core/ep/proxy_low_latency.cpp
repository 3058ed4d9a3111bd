#include "core/ep/proxy_low_latency.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "core/check.hpp"
#include "core/ep/element_types.hpp"
#include "core/ep/ll_outputs.hpp"

namespace courier::ep {

namespace {

constexpr uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

enum Phase : uint32_t { kDispatch = 0, kCombine = 1 };

uint64_t target_of(uint64_t call) { return (call / 2 + 1) * uint64_t{COURIER_GPU_EP_SIGNAL_STEP}; }

// A staging slot: the row as it travels (FP8: codes, then scales), padded
// to 16 bytes, then 16 bytes whose first 4 hold the source token.
uint64_t slot_bytes_of(uint64_t value_bytes) { return align_up(value_bytes, 16) + 16; }

}  // namespace

LlProxyLayout::LlProxyLayout(uint32_t ranks, uint32_t experts, uint32_t max_tokens, uint32_t hidden,
                             uint32_t element_bytes)
    : ranks(ranks), experts(experts), local_experts(experts / ranks), max_tokens(max_tokens) {
  record_words = static_cast<uint32_t>(align_up(2 + local_experts, 4));
  record_bytes = 4ull * record_words;
  const uint64_t row_bytes = uint64_t{hidden} * element_bytes;
  const uint64_t rows = uint64_t{ranks} * local_experts * max_tokens;
  uint64_t at = 0;
  auto take = [&at](uint64_t bytes) {
    const uint64_t here = at;
    at = align_up(at + bytes, 256);
    return here;
  };
  for (uint32_t phase = 0; phase < 2; ++phase) {
    for (uint32_t parity = 0; parity < 2; ++parity) {
      records[phase][parity] = take(ranks * record_bytes);
      signals[phase][parity] = take(8ull * ranks);
    }
  }
  for (uint32_t parity = 0; parity < 2; ++parity) release[parity] = take(8ull * ranks);
  staging = take(ranks * record_bytes);
  control_bytes = at;
  at = 0;  // the data window
  // Combine's rows may travel as LogFMT slots, row_bytes + row_bytes / 64
  // (docs/ep.md), through the send area too.
  const uint64_t combine_bytes = row_bytes + row_bytes / 64;
  send = take(rows * std::max(slot_bytes_of(row_bytes), combine_bytes));
  for (uint32_t parity = 0; parity < 2; ++parity) {
    recv[parity] = take(rows * slot_bytes_of(row_bytes));
    combine[parity] = take(rows * combine_bytes);
  }
  total = at;
}

ProxyLowLatency::ProxyLowLatency(Context& ctx, const BufferOptions& options, DLDevice device)
    : ctx_(ctx),
      options_(options),
      device_(device),
      rank_(static_cast<uint32_t>(ctx.rank())),
      ranks_(static_cast<uint32_t>(ctx.world_size())),
      layout_(ranks_, options.num_experts, options.max_tokens_per_rank, options.hidden,
              options.element_bytes),
      window_(ctx, layout_.total, layout_.control_bytes, layout_.record_words) {
  if (options.num_experts > COURIER_GPU_EP_MAX_EXPERTS) {
    fail("ep::Buffer (low-latency): num_experts {} is more than the proxy path's {}",
         options.num_experts, COURIER_GPU_EP_MAX_EXPERTS);
  }
  const uint64_t rows = uint64_t{layout_.local_experts} * ranks_ * options.max_tokens_per_rank;
  const uint64_t row_bytes = uint64_t{options.hidden} * options.element_bytes;
  for (Outputs& out : out_) {
    out.x = ctx.alloc(std::max<uint64_t>(rows * row_bytes, 1));
    out.scales = ctx.alloc(std::max<uint64_t>(rows * (options.hidden / kFp8Block) * 4, 1));
    out.src = ctx.alloc(std::max<uint64_t>(rows * 4, 1));
    out.count = ctx.alloc(std::max<uint64_t>(4ull * layout_.local_experts, 1));
    out.range = ctx.alloc(std::max<uint64_t>(8ull * layout_.local_experts * ranks_, 1));
    out.slots =
        ctx.alloc(std::max<uint64_t>(4ull * options.max_tokens_per_rank * options.max_topk, 1));
  }
  for (DeviceBuffer& combined : combined_x_) {
    combined = ctx.alloc(std::max<uint64_t>(uint64_t{options.max_tokens_per_rank} * row_bytes, 1));
  }
  epochs_ = ctx.alloc(4 * sizeof(uint64_t));
  const uint64_t zeros[4] = {0, 0, 0, 0};
  ctx.copy(epochs_.data(), zeros, sizeof zeros);
}

void ProxyLowLatency::refuse(uint32_t phase, uint64_t call, const std::string& why) {
  try {
    window_.clear_status();
    window_.set_refused();
    courier_gpu_ep_proxy_refuse_v1 job{};
    job.struct_size = sizeof job;
    job.device = window_.device();
    job.fifo = window_.fifo();
    job.staging_off = layout_.staging;
    job.record_off = layout_.records[phase][call & 1];
    job.signal_off = layout_.signals[phase][call & 1];
    // A refused dispatch is never received here: free the senders' staging now.
    job.release_off = phase == kDispatch ? layout_.release[call & 1] : 0;
    job.release_target = (call / 2) * uint64_t{COURIER_GPU_EP_SIGNAL_STEP};
    job.epoch = epoch(phase, call);
    window_.wake_proxies();  // the kernel pushes commands
    window_.check(window_.ep().ep_proxy_refuse(window_.backend(), &job), "refusing");
    window_.check(window_.ep().ep_sync(window_.backend(), window_.device()), "refusing");
  } catch (const Error&) {
    // The refusal itself is the error worth reporting.
  }
  if (!window_.host_waits()) window_.break_with(why);
  window_.throw_if_broken();  // an earlier call that did not wait failed
  throw CallRefused(why);
}

LowLatencyDispatchResult ProxyLowLatency::dispatch(const LlInputs& in, bool return_recv_hook,
                                                   uint64_t call) {
  const uint32_t parity = call & 1;
  const uint32_t L = layout_.local_experts;
  window_.clear_status();
  Outputs& out = out_[parity];
  const uint32_t elem = in.x_dtype.bits / 8;
  const uint64_t value_bytes =
      in.fp8 ? uint64_t{in.hidden} + in.hidden / kFp8Block * 4 : uint64_t{in.hidden} * elem;
  out.fp8 = in.fp8;
  out.slot_bytes = static_cast<uint32_t>(slot_bytes_of(value_bytes));
  out.row_bytes = in.fp8 ? in.hidden : in.hidden * elem;
  out.indices = {in.idx, in.topk, layout_.experts};
  const bool caller = in.out_x != nullptr;
  out.x_at = caller ? in.out_x : out.x.data();
  out.scales_at = caller ? in.out_scales : out.scales.data();
  out.count_at = caller ? in.out_count : static_cast<int32_t*>(out.count.data());
  out.src_at = caller ? in.out_src : static_cast<int32_t*>(out.src.data());
  out.range_at = caller ? in.out_range : static_cast<int64_t*>(out.range.data());
  out.scales_layout = scales_layout_bits(in.fp8, in.scales_layout);

  courier_gpu_ep_proxy_ll_dispatch_v1 job{};
  job.struct_size = sizeof job;
  job.device = window_.device();
  job.fifo = window_.fifo();
  job.tokens = in.tokens;
  job.topk = in.topk;
  job.num_experts = layout_.experts;
  job.hidden = in.hidden;
  job.x_dtype_bits = in.x_dtype.bits;
  job.fp8 = (in.fp8 ? COURIER_GPU_EP_FP8_QUANTIZE : 0) |
            (in.fp8 && in.round_scale ? COURIER_GPU_EP_FP8_POW2_SCALES : 0);
  job.max_tokens = layout_.max_tokens;
  job.slot_bytes = out.slot_bytes;
  job.x = in.x;
  job.topk_idx = in.idx;
  job.slots = static_cast<int32_t*>(out.slots.data());
  job.send_off = layout_.send;
  job.recv_off = layout_.recv[parity];
  job.staging_off = layout_.staging;
  job.record_off = layout_.records[kDispatch][parity];
  job.signal_off = layout_.signals[kDispatch][parity];
  job.release_off = layout_.release[parity];
  // What each destination received two calls ago (this parity) is read.
  job.release_target = (call / 2) * uint64_t{COURIER_GPU_EP_SIGNAL_STEP};
  job.epoch = epoch(kDispatch, call);
  window_.wake_proxies();  // the kernel pushes commands
  window_.check(window_.ep().ep_proxy_ll_dispatch(window_.backend(), &job), "sending the rows");

  LowLatencyDispatchResult result;
  describe_ll_outputs(result, {out.x_at, out.scales_at, out.count_at, out.src_at, out.range_at},
                      device_, L, ranks_, layout_.max_tokens, in.hidden, in.x_dtype, in.fp8,
                      in.scales_layout);
  LowLatencyHandle& handle = result.handle;
  handle.num_tokens = in.tokens;
  handle.topk = in.topk;
  handle.hidden = in.hidden;
  handle.dtype_code = in.x_dtype.code;
  handle.dtype_bits = in.x_dtype.bits;
  handle.call = call;
  handle.layout_range = in.out_range;
  if (return_recv_hook) {  // run once (LowLatency::dispatch sees to it)
    result.recv_hook = [this, call, wait_cost = in.wait_cost] { receive(call, wait_cost); };
  } else {
    receive(call, in.wait_cost);
  }
  return result;
}

void ProxyLowLatency::receive(uint64_t call, int64_t* wait_cost) {
  const uint32_t parity = call & 1;
  Outputs& out = out_[parity];
  courier_gpu_ep_proxy_ll_receive_v1 job{};
  job.struct_size = sizeof job;
  job.device = window_.device();
  job.fifo = window_.fifo();
  job.local_experts = layout_.local_experts;
  job.max_tokens = layout_.max_tokens;
  job.row_bytes = out.row_bytes;
  job.scale_cols = out.fp8 ? options_.hidden / kFp8Block : 0;
  job.slot_bytes = out.slot_bytes;
  job.recv_off = layout_.recv[parity];
  job.record_off = layout_.records[kDispatch][parity];
  job.signal_off = layout_.signals[kDispatch][parity];
  job.target = target_of(call);
  job.release_off = layout_.release[parity];
  job.x = out.x_at;
  job.scales = static_cast<float*>(out.scales_at);
  job.src = out.src_at;
  job.count = out.count_at;
  job.range = out.range_at;
  job.scales_layout = out.scales_layout;
  job.wait_cost = wait_cost;
  job.epoch = epoch(kDispatch, call);
  window_.check(window_.ep().ep_proxy_ll_receive(window_.backend(), &job), "packing the rows");
  window_.sync("low_latency_dispatch", out.indices);
}

CombineResult ProxyLowLatency::combine(const std::byte* x, const int64_t* topk_idx,
                                       const float* topk_weights, const LowLatencyHandle& handle,
                                       uint64_t call, bool logfmt, int64_t* wait_cost, void* out) {
  const uint32_t parity = call & 1;
  const Outputs& from = out_[handle.call & 1];  // the dispatch's outputs and slots
  window_.clear_status();
  const auto row_bytes = static_cast<uint32_t>(uint64_t{handle.hidden} * (handle.dtype_bits / 8));

  courier_gpu_ep_proxy_combine_v1 send{};
  send.struct_size = sizeof send;
  send.device = window_.device();
  send.fifo = window_.fifo();
  send.mode = COURIER_GPU_EP_ROUTE_EXPERTS | (logfmt ? COURIER_GPU_EP_COMBINE_LOGFMT : 0u);
  send.row_bytes = row_bytes;
  send.local_experts = layout_.local_experts;
  send.max_tokens = layout_.max_tokens;
  send.x = x;
  send.range = handle.layout_range != nullptr ? handle.layout_range
                                              : static_cast<const int64_t*>(from.range.data());
  send.send_off = layout_.send;
  send.recv_off = layout_.combine[parity];
  send.staging_off = layout_.staging;
  send.record_off = layout_.records[kCombine][parity];
  send.signal_off = layout_.signals[kCombine][parity];
  send.epoch = epoch(kCombine, call);
  window_.wake_proxies();  // the kernel pushes commands
  window_.check(window_.ep().ep_proxy_combine(window_.backend(), &send), "sending rows back");

  courier_gpu_ep_proxy_reduce_v1 reduce{};
  reduce.struct_size = sizeof reduce;
  reduce.device = window_.device();
  reduce.fifo = window_.fifo();
  reduce.mode = send.mode;
  reduce.tokens = handle.num_tokens;
  reduce.hidden = handle.hidden;
  reduce.dtype_bits = handle.dtype_bits;
  reduce.terms = handle.topk;
  reduce.local_experts = layout_.local_experts;
  reduce.max_tokens = layout_.max_tokens;
  reduce.slots = static_cast<const int32_t*>(from.slots.data());
  reduce.topk_idx = topk_idx;
  reduce.weights = topk_weights;
  reduce.recv_off = layout_.combine[parity];
  reduce.record_off = layout_.records[kCombine][parity];
  reduce.signal_off = layout_.signals[kCombine][parity];
  reduce.target = target_of(call);
  reduce.out = out != nullptr ? out : combined_x_[parity].data();
  reduce.wait_cost = wait_cost;
  reduce.epoch = epoch(kCombine, call);
  window_.check(window_.ep().ep_proxy_reduce(window_.backend(), &reduce), "summing the rows");
  window_.sync("low_latency_combine");
  CombineResult result;
  result.combined_x = TensorView(reduce.out, device_,
                                 DLDataType{static_cast<uint8_t>(handle.dtype_code),
                                            static_cast<uint8_t>(handle.dtype_bits), 1},
                                 {static_cast<int64_t>(handle.num_tokens), handle.hidden});
  return result;
}

}  // namespace courier::ep
