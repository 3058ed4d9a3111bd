#include "core/ep/low_latency.hpp"

#include <fmt/format.h>

#include <memory>

#include "core/check.hpp"
#include "core/context_internals.hpp"
#include "core/ep/element_types.hpp"

namespace courier::ep {

LowLatency::LowLatency(Context& ctx, const BufferOptions& options, DLDevice device)
    : options_(options),
      device_(device),
      ranks_(static_cast<uint32_t>(ctx.world_size())),
      local_experts_(options.num_experts / ranks_),
      gpu_(ContextInternals::gpu(ctx)),
      admission_(ctx) {
  check_options(options, ranks_);
  if (PeerWindows::usable(ctx, direct_misfit(options))) {
    direct_ = std::make_unique<DirectLowLatency>(ctx, options, device);
  } else {
    proxy_ = std::make_unique<ProxyLowLatency>(ctx, options, device);
  }
}

void LowLatency::check_options(const BufferOptions& options, uint32_t ranks) {
  if (options.hidden == 0 || (options.element_bytes != 2 && options.element_bytes != 4) ||
      options.max_tokens_per_rank == 0 || options.num_experts < ranks ||
      options.num_experts % ranks != 0) {
    fail(
        "ep::Buffer (low-latency): hidden {}, element_bytes {}, max_tokens_per_rank {}, "
        "num_experts {}: hidden and max_tokens_per_rank must be positive, element_bytes 2 or 4, "
        "num_experts a positive multiple of the {} ranks",
        options.hidden, options.element_bytes, options.max_tokens_per_rank, options.num_experts,
        ranks);
  }
}

LowLatency::Inputs LowLatency::validate(const LowLatencyDispatchArgs& args) const {
  Inputs in;
  if (args.x == nullptr) fail("ep::Buffer::low_latency_dispatch: x is missing");
  const DType dtype =
      args.x->dtype.code == kDLFloat && args.x->dtype.bits == 32 ? DType::float32 : DType::bfloat16;
  in.dtype = dtype;
  in.fp8 = args.use_fp8;
  in.round_scale = args.round_scale;
  if (args.round_scale && !args.use_fp8) {
    fail("ep::Buffer::low_latency_dispatch: round_scale rounds FP8 scales; it needs use_fp8");
  }
  if (args.round_scale && !gpu_.supports(GpuFeature::ep_fp8_pow2)) {
    fail(
        "ep::Buffer::low_latency_dispatch: round_scale needs a GPU backend with the ep_fp8_pow2 "
        "capability (GPU ABI 1.4); this one has not");
  }
  in.x = static_cast<const std::byte*>(check_tensor(args.x, "ep::Buffer::low_latency_dispatch: x",
                                                    dtype, {-1, -1}, device_.device_type));
  in.tokens = static_cast<uint32_t>(args.x->shape[0]);
  in.hidden = static_cast<uint32_t>(args.x->shape[1]);
  in.x_dtype = args.x->dtype;
  if (in.tokens > options_.max_tokens_per_rank) {
    fail(
        "ep::Buffer::low_latency_dispatch: x has {} tokens, more than the {} the buffer was "
        "sized for (max_tokens_per_rank)",
        in.tokens, options_.max_tokens_per_rank);
  }
  const uint32_t element = dtype == DType::float32 ? 4 : 2;
  if (in.hidden * element != options_.hidden * options_.element_bytes) {
    fail(
        "ep::Buffer::low_latency_dispatch: a row of x is {} bytes (hidden {} x {}), the buffer "
        "was sized for {}",
        in.hidden * element, in.hidden, to_string(dtype), options_.hidden * options_.element_bytes);
  }
  in.idx = static_cast<const int64_t*>(
      check_tensor(args.topk_idx, "ep::Buffer::low_latency_dispatch: topk_idx", DType::int64,
                   {in.tokens, -1}, device_.device_type));
  in.topk = static_cast<uint32_t>(args.topk_idx->shape[1]);
  if (in.topk == 0 || in.topk > options_.max_topk) {
    fail("ep::Buffer::low_latency_dispatch: top-{} where the buffer was sized for 1..{}", in.topk,
         options_.max_topk);
  }
  if (in.fp8 && in.hidden != options_.hidden) {
    fail(
        "ep::Buffer::low_latency_dispatch: use_fp8 needs x's hidden {} to be the Buffer's hidden "
        "{} (the scales are sized for it)",
        in.hidden, options_.hidden);
  }
  if (in.fp8 && in.hidden % kFp8Block != 0) {
    fail(
        "ep::Buffer::low_latency_dispatch: use_fp8 needs hidden a multiple of {} (one scale per "
        "{} channels); hidden is {}",
        kFp8Block, kFp8Block, in.hidden);
  }
  in.wait_cost = wait_cost_of(args.wait_cost_stats, "ep::Buffer::low_latency_dispatch");
  take_outputs(args, in);
  in.config = {in.hidden, in.fp8 ? DType::fp8_e4m3 : dtype, in.topk, options_.num_experts};
  return in;
}

void LowLatency::take_outputs(const LowLatencyDispatchArgs& args, Inputs& in) const {
  constexpr const char* kCall = "ep::Buffer::low_latency_dispatch";
  in.scales_layout = args.scales_layout;
  if (args.scales_layout != ScalesLayout::row_major) {
    const char* name = args.scales_layout == ScalesLayout::ue8m0 ? "ue8m0" : "column_major";
    if (!in.fp8) fail("{}: scales_layout {} lays out FP8 scales; it needs use_fp8", kCall, name);
    if (args.scales_layout == ScalesLayout::ue8m0 && !in.round_scale) {
      fail("{}: scales_layout ue8m0 holds powers of two only; it needs round_scale", kCall);
    }
    if (!gpu_.supports(GpuFeature::ep_scales_layout)) {
      fail("{}: scales_layout {} needs a GPU plugin of ABI 1.{} or later; this one speaks 1.{}",
           kCall, name, gpu_feature_minor(GpuFeature::ep_scales_layout), gpu_.plugin().abi_minor);
    }
  }
  const LowLatencyOutputs& out = args.out;
  if (out.x == nullptr && out.x_scales == nullptr && out.count == nullptr &&
      out.src_info == nullptr && out.layout_range == nullptr) {
    return;
  }
  const int64_t L = local_experts_;
  const int64_t N = int64_t{ranks_} * options_.max_tokens_per_rank;
  const DLDeviceType dev = device_.device_type;
  in.out_x = check_tensor(out.x, fmt::format("{}: out.x", kCall),
                          in.fp8 ? DType::fp8_e4m3 : in.dtype, {L, N, in.hidden}, dev);
  if (in.fp8) {
    const int64_t cols = in.hidden / kFp8Block;
    switch (in.scales_layout) {
      case ScalesLayout::row_major:
        in.out_scales = check_tensor(out.x_scales, fmt::format("{}: out.x_scales", kCall),
                                     DType::float32, {L, N, cols}, dev);
        break;
      case ScalesLayout::column_major:
        in.out_scales = check_tensor(out.x_scales, fmt::format("{}: out.x_scales", kCall),
                                     DType::float32, {L, cols, N}, dev);
        break;
      case ScalesLayout::ue8m0:
        in.out_scales = check_tensor(out.x_scales, fmt::format("{}: out.x_scales", kCall),
                                     DType::int32, {L, (cols + 3) / 4, N}, dev);
        break;
    }
  } else if (out.x_scales != nullptr) {
    fail("{}: out.x_scales is given without use_fp8 (there are no scales)", kCall);
  }
  in.out_count = static_cast<int32_t*>(
      check_tensor(out.count, fmt::format("{}: out.count", kCall), DType::int32, {L}, dev));
  in.out_src = static_cast<int32_t*>(check_tensor(
      out.src_info, fmt::format("{}: out.src_info", kCall), DType::int32, {L, N}, dev));
  in.out_range = static_cast<int64_t*>(
      check_tensor(out.layout_range, fmt::format("{}: out.layout_range", kCall), DType::int64,
                   {L, static_cast<int64_t>(ranks_)}, dev));
}

int64_t* LowLatency::wait_cost_of(const DLTensor* stats, const char* call) const {
  if (stats == nullptr) return nullptr;
  if (direct_) {
    fail(
        "{}: wait_cost_stats is measured on the proxy path only; this Buffer stores directly "
        "into its peers (COURIER_EP_TRANSPORT=proxy chooses the proxy path)",
        call);
  }
  return static_cast<int64_t*>(check_tensor(stats, std::string(call) + ": wait_cost_stats",
                                            DType::int64, {ranks_}, device_.device_type));
}

void LowLatency::refuse(uint32_t phase, const std::string& why) {
  const uint64_t call = calls_[phase]++;
  if (direct_) direct_->refuse(phase, call, why);
  proxy_->refuse(phase, call, why);
}

LowLatencyDispatchResult LowLatency::dispatch(const LowLatencyDispatchArgs& args) {
  // This call reuses the receive buffers and epoch words of the dispatch
  // before the last: its recv_hook must have run. Every rank makes the same
  // calls, so every rank refuses alike, before anything is sent.
  const uint64_t call = calls_[0];
  if (const std::shared_ptr<bool>& received = received_[call & 1]; received && !*received) {
    fail(
        "ep::Buffer::low_latency_dispatch: the recv_hook of low_latency_dispatch call {} has not "
        "run, and this call would reuse its receive buffers: run each hook before the dispatch "
        "after next",
        call - 2);
  }
  Inputs in;
  std::string refused;
  try {
    in = validate(args);
  } catch (const Error& e) {
    refused = e.what();
  }
  admission_.admit(in.config, refused, "low_latency_dispatch",
                   [&](const std::string& why) { refuse(0, why); });
  LowLatencyDispatchResult result = direct_
                                        ? direct_->dispatch(in, args.return_recv_hook, calls_[0]++)
                                        : proxy_->dispatch(in, args.return_recv_hook, calls_[0]++);
  if (!result.recv_hook) {
    received_[call & 1].reset();
    return result;
  }
  // Once: a second run would release the senders, and advance the epochs,
  // a second time.
  auto received = std::make_shared<bool>(false);
  received_[call & 1] = received;
  result.recv_hook = [hook = std::move(result.recv_hook), received, call] {
    if (*received)
      fail("ep::Buffer: the recv_hook of low_latency_dispatch call {} ran already", call);
    *received = true;
    hook();
  };
  return result;
}

CombineResult LowLatency::combine(const DLTensor& x_tensor, const DLTensor& topk_idx_tensor,
                                  const DLTensor& topk_weights_tensor,
                                  const LowLatencyHandle& handle,
                                  const LowLatencyCombineOptions& options) {
  const DType dtype = handle.dtype_bits == 32 ? DType::float32 : DType::bfloat16;
  const std::byte* x = nullptr;
  const int64_t* idx = nullptr;
  const float* weights = nullptr;
  int64_t* wait_cost = nullptr;
  void* out = nullptr;
  const uint64_t slots = uint64_t{ranks_} * options_.max_tokens_per_rank;
  try {
    // Both paths read the dispatch's receive buffers and slots, which the
    // dispatch after next reuses.
    if (!admission_.configured() || handle.topk == 0 || handle.call + 2 < calls_[0] ||
        handle.call >= calls_[0]) {
      fail(
          "ep::Buffer::low_latency_combine: the handle does not come from one of the last two "
          "low_latency_dispatch calls of this Buffer (their receive buffers are reused after)");
    }
    x = static_cast<const std::byte*>(check_tensor(
        &x_tensor, "ep::Buffer::low_latency_combine: x", dtype,
        {local_experts_, static_cast<int64_t>(slots), handle.hidden}, device_.device_type));
    const int64_t t = handle.num_tokens, k = handle.topk;
    idx = static_cast<const int64_t*>(check_tensor(&topk_idx_tensor,
                                                   "ep::Buffer::low_latency_combine: topk_idx",
                                                   DType::int64, {t, k}, device_.device_type));
    weights = static_cast<const float*>(
        check_tensor(&topk_weights_tensor, "ep::Buffer::low_latency_combine: topk_weights",
                     DType::float32, {t, k}, device_.device_type));
    wait_cost = wait_cost_of(options.wait_cost_stats, "ep::Buffer::low_latency_combine");
    if (options.out != nullptr) {
      out = check_tensor(options.out, "ep::Buffer::low_latency_combine: out", dtype,
                         {t, handle.hidden}, device_.device_type);
    }
    if (options.use_logfmt) {
      if (!gpu_.supports(GpuFeature::ep_logfmt)) {
        fail(
            "ep::Buffer::low_latency_combine: use_logfmt needs a GPU backend with the ep_logfmt "
            "capability (GPU ABI 1.5); this one has not");
      }
      if (handle.dtype_bits != 16 || handle.hidden % kFp8Block != 0) {
        fail(
            "ep::Buffer::low_latency_combine: use_logfmt needs bfloat16 x and hidden a multiple "
            "of {} (one LogFMT block per {} channels); x is {} with hidden {}",
            kFp8Block, kFp8Block, to_string(dtype), handle.hidden);
      }
    }
  } catch (const Error& e) {
    refuse(1, e.what());
  }
  if (direct_) return direct_->combine(x, weights, handle, calls_[1]++, options.use_logfmt, out);
  return proxy_->combine(x, idx, weights, handle, calls_[1]++, options.use_logfmt, wait_cost, out);
}

}  // namespace courier::ep
