#include "core/ep/high_throughput.hpp"

#include <fmt/format.h>

#include "core/check.hpp"
#include "core/ep/element_types.hpp"

namespace courier::ep {

namespace {

uint32_t element_bytes_of(DType dtype) {
  return dtype == DType::float32 ? 4 : dtype == DType::fp8_e4m3 ? 1 : 2;
}

DType dtype_of(const DLDataType& t) {
  if (t.code == kDLFloat && t.bits == 32) return DType::float32;
  if (t.code == kDLFloat && t.bits == 8) return DType::fp8_e4m3;
  return DType::bfloat16;  // anything else is refused by check_tensor as not bfloat16
}

}  // namespace

HighThroughput::HighThroughput(Context& ctx, const BufferOptions& options, DLDevice device)
    : options_(options),
      device_(device),
      ranks_(static_cast<uint32_t>(ctx.world_size())),
      admission_(ctx) {
  check_options(options);
  if (PeerWindows::usable(ctx, direct_misfit(options))) {
    direct_ = std::make_unique<DirectHighThroughput>(ctx, options, device);
  } else {
    proxy_ = std::make_unique<ProxyHighThroughput>(ctx, options, device);
  }
}

void HighThroughput::check_options(const BufferOptions& options) {
  if (options.hidden == 0 || (options.element_bytes != 2 && options.element_bytes != 4) ||
      options.max_topk == 0) {
    fail(
        "ep::Buffer: hidden {} / element_bytes {} / max_topk {} cannot be packed: hidden and "
        "max_topk must be positive, element_bytes 2 (bfloat16) or 4 (float32)",
        options.hidden, options.element_bytes, options.max_topk);
  }
}

HighThroughput::DispatchInputs HighThroughput::validate(const DispatchArgs& args) const {
  DispatchInputs in;
  if (args.x == nullptr) fail("ep::Buffer::dispatch: x is missing");
  in.dtype = dtype_of(args.x->dtype);
  in.x = static_cast<const std::byte*>(
      check_tensor(args.x, "ep::Buffer::dispatch: x", in.dtype, {-1, -1}, device_.device_type));
  in.tokens = static_cast<uint32_t>(args.x->shape[0]);
  in.hidden = static_cast<uint32_t>(args.x->shape[1]);
  in.x_dtype = args.x->dtype;
  if (in.tokens > options_.max_tokens_per_rank) {
    fail(
        "ep::Buffer::dispatch: x has {} tokens, more than the {} the buffer was sized for "
        "(max_tokens_per_rank)",
        in.tokens, options_.max_tokens_per_rank);
  }
  if (in.hidden != options_.hidden) {
    fail("ep::Buffer::dispatch: x has hidden {}, the buffer was sized for hidden {}", in.hidden,
         options_.hidden);
  }
  if (in.dtype == DType::fp8_e4m3) {
    if (options_.element_bytes != 2 || in.hidden % kFp8Block != 0) {
      fail(
          "ep::Buffer::dispatch: FP8 x needs a Buffer sized for bfloat16 rows (element_bytes 2) "
          "and hidden a multiple of {} (one scale per {} channels); this one has element_bytes {} "
          "and hidden {}",
          kFp8Block, kFp8Block, options_.element_bytes, in.hidden);
    }
    in.scales = static_cast<const float*>(
        check_tensor(args.x_scales, "ep::Buffer::dispatch: x_scales", DType::float32,
                     {in.tokens, in.hidden / kFp8Block}, device_.device_type));
  } else if (element_bytes_of(in.dtype) != options_.element_bytes) {
    fail("ep::Buffer::dispatch: x is {}, the buffer was sized for {}-byte elements",
         to_string(in.dtype), options_.element_bytes);
  }
  const DispatchHandle* cached = args.cached_handle;
  if (cached != nullptr) {
    if (!admission_.configured() || cached->num_tokens != in.tokens ||
        cached->hidden != in.hidden || cached->recv_counts.size() != ranks_ ||
        cached->send_index.size() != uint64_t{in.tokens} * ranks_) {
      fail(
          "ep::Buffer::dispatch: cached_handle does not describe this x ({} tokens, hidden {}): "
          "it must come from an earlier dispatch of the same tokens on this Buffer",
          in.tokens, in.hidden);
    }
  }
  // Without topk_idx (a cached dispatch, or rows routed by is_token_in_rank
  // alone) no top-k columns travel; the call keeps the Buffer's top-k so
  // that its configuration stays the one agreed.
  in.topk = admission_.configured() ? admission_.config().topk : 0;
  if (args.topk_idx != nullptr) {
    in.with_topk = true;
    in.idx = static_cast<const int64_t*>(
        check_tensor(args.topk_idx, "ep::Buffer::dispatch: topk_idx", DType::int64, {in.tokens, -1},
                     device_.device_type));
    in.topk = static_cast<uint32_t>(args.topk_idx->shape[1]);
    if (in.topk == 0 || in.topk > options_.max_topk) {
      fail("ep::Buffer::dispatch: top-{} where the buffer was sized for 1..{} (max_topk)", in.topk,
           options_.max_topk);
    }
    in.weights = static_cast<const float*>(
        check_tensor(args.topk_weights, "ep::Buffer::dispatch: topk_weights", DType::float32,
                     {in.tokens, in.topk}, device_.device_type));
  }
  if (cached == nullptr) {
    in.in_rank = static_cast<const uint8_t*>(
        check_tensor(args.is_token_in_rank, "ep::Buffer::dispatch: is_token_in_rank",
                     DType::boolean, {in.tokens, ranks_}, device_.device_type));
  }
  const int experts = args.num_experts == 0 && cached != nullptr
                          ? static_cast<int>(admission_.config().num_experts)
                          : args.num_experts;
  if (experts <= 0 || experts % static_cast<int>(ranks_) != 0) {
    fail("ep::Buffer::dispatch: num_experts {} is not a positive multiple of the {} ranks", experts,
         ranks_);
  }
  const uint64_t capacity = uint64_t{ranks_} * options_.max_tokens_per_rank;
  if (args.num_worst_tokens < 0 || static_cast<uint64_t>(args.num_worst_tokens) > capacity) {
    fail(
        "ep::Buffer::dispatch: num_worst_tokens {} is outside [0, {}] (ranks x "
        "max_tokens_per_rank)",
        args.num_worst_tokens, capacity);
  }
  in.config = {in.hidden, in.dtype, in.topk, static_cast<uint32_t>(experts)};
  return in;
}

void HighThroughput::refuse(uint32_t phase, const std::string& why, bool deferred) {
  // The peers are about to wait for this rank's signal of this call: give
  // them one that says "refused", so they fail at once instead of hanging.
  const uint64_t call = calls_[phase]++;
  if (direct_) direct_->refuse(phase, call, why);
  proxy_->refuse(phase, call, why, deferred);
}

DispatchResult HighThroughput::dispatch(const DispatchArgs& args) {
  DispatchInputs in;
  std::string refused;
  try {
    in = validate(args);
  } catch (const Error& e) {
    refused = e.what();
  }
  const bool deferred = defers(args);
  admission_.admit(in.config, refused, "dispatch",
                   [&](const std::string& why) { refuse(0, why, deferred); });
  if (direct_) return direct_->dispatch(in, args, calls_[0]++);
  return proxy_->dispatch(in, args, calls_[0]++);
}

CombineResult HighThroughput::combine(const DLTensor& x_tensor, const DispatchHandle& handle) {
  const DType dtype = handle.dtype_bits == 32 ? DType::float32 : DType::bfloat16;
  const std::byte* x = nullptr;
  try {
    const bool counts_known = !handle.counts_on_device;
    if (!admission_.configured() ||
        (counts_known && (handle.recv_counts.size() != ranks_ ||
                          handle.send_index.size() != uint64_t{handle.num_tokens} * ranks_)) ||
        (!counts_known && handle.num_worst_tokens == 0)) {
      fail("ep::Buffer::combine: the handle does not come from a dispatch of this Buffer");
    }
    uint64_t received = 0;
    for (uint32_t c : handle.recv_counts) {
      if (c > options_.max_tokens_per_rank) {
        fail(
            "ep::Buffer::combine: the handle says {} rows came from one rank, more than "
            "max_tokens_per_rank {}: it does not come from a dispatch of this Buffer",
            c, options_.max_tokens_per_rank);
      }
      received += c;
    }
    const uint64_t rows = handle.num_worst_tokens > 0 ? handle.num_worst_tokens : received;
    x = static_cast<const std::byte*>(check_tensor(&x_tensor, "ep::Buffer::combine: x", dtype,
                                                   {static_cast<int64_t>(rows), handle.hidden},
                                                   device_.device_type));
  } catch (const Error& e) {
    refuse(1, e.what(), defers(handle));
  }
  if (direct_) return direct_->combine(x, x_tensor.dtype, handle, calls_[1]++);
  return proxy_->combine(x, x_tensor.dtype, handle, calls_[1]++);
}

}  // namespace courier::ep
