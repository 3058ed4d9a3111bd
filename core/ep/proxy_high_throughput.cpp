#include "core/ep/proxy_high_throughput.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/check.hpp"
#include "core/context_internals.hpp"
#include "core/ep/element_types.hpp"

namespace courier::ep {

namespace {

constexpr uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

// Experts a Buffer counts when BufferOptions does not say (num_experts 0).
constexpr uint32_t kDefaultMaxExperts = 1024;

enum Phase : uint32_t { kDispatch = 0, kCombine = 1 };

uint64_t target_of(uint64_t call) { return (call / 2 + 1) * uint64_t{COURIER_GPU_EP_SIGNAL_STEP}; }

// Context source slots of the tensors sent in place.
constexpr uint32_t kDispatchX = 0, kCombineX = 1;

// Sources, readback and plan in the high-throughput jobs (GPU ABI 1.8).
bool has_sources(const Context& ctx) {
  return ContextInternals::gpu(ctx).supports(GpuFeature::ep_proxy_sources);
}

bool can_send_in_place(const Context& ctx) {
  return ContextInternals::config(ctx).ep_send_in_place &&
         (ContextInternals::nic(ctx).props().caps & COURIER_NIC_CAP_CHEAP_REGISTRATION) != 0 &&
         has_sources(ctx);
}

}  // namespace

HtProxyLayout::HtProxyLayout(uint32_t ranks, uint32_t max_tokens, uint32_t hidden,
                             uint32_t element_bytes, uint32_t max_topk, uint32_t max_experts)
    : ranks(ranks), max_tokens(max_tokens), max_experts(max_experts) {
  // The rows kernel keeps two words per rank in a block's shared memory
  // (ProxyShared::b: where its rows go at each rank, and an open run).
  constexpr uint32_t kMaxRanks = (COURIER_GPU_EP_MAX_EXPERTS + 1) / 2;
  if (ranks > kMaxRanks) {
    fail("ep::Buffer: {} ranks; the proxy path's high-throughput mode serves at most {}", ranks,
         kMaxRanks);
  }
  // State, rows, rows per local expert, then rows for every rank (the
  // counts every sender needs to place its rows).
  record_words = static_cast<uint32_t>(align_up(2 + max_experts / ranks + ranks, 4));
  record_bytes = 4ull * record_words;
  const uint64_t row_bytes = uint64_t{hidden} * element_bytes;
  // A slot: the row (FP8: values and scales fit in a bfloat16 row), then
  // topk expert ids and weights.
  const uint64_t slot_bytes = align_up(row_bytes + 8ull * max_topk, 16);
  const uint64_t rows = uint64_t{ranks} * max_tokens;
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
  for (uint32_t parity = 0; parity < 2; ++parity) {
    rows_records[parity] = take(ranks * record_bytes);
    rows_signals[parity] = take(8ull * ranks);
  }
  staging = take(ranks * record_bytes);
  rows_staging = take(ranks * record_bytes);
  control_bytes = at;
  at = 0;  // the data window
  // A dispatch's rows by token, then its metas per destination in slot
  // order; a combine's rows per destination.
  const uint64_t meta_bytes = align_up(8ull * max_topk + hidden / 32 + 4, 16);
  send = take(std::max(rows * slot_bytes, max_tokens * row_bytes + 256 + rows * meta_bytes));
  for (uint32_t parity = 0; parity < 2; ++parity) {
    // Rows then meta (each meta rounded to 16 bytes, the rows' start to 256).
    recv[parity] = take(rows * (slot_bytes + 16) + 256);
    combine[parity] = take(rows * row_bytes);
  }
  counters = take(4ull * (max_experts + ranks));
  total = at;
}

ProxyHighThroughput::ProxyHighThroughput(Context& ctx, const BufferOptions& options,
                                         DLDevice device)
    : ctx_(ctx),
      options_(options),
      device_(device),
      rank_(static_cast<uint32_t>(ctx.rank())),
      ranks_(static_cast<uint32_t>(ctx.world_size())),
      layout_(ranks_, options.max_tokens_per_rank, options.hidden, options.element_bytes,
              options.max_topk,
              std::min<uint32_t>(options.num_experts > 0 ? options.num_experts : kDefaultMaxExperts,
                                 COURIER_GPU_EP_MAX_EXPERTS)),
      // The readback area (a plugin of minor 8 fills it): the counts'
      // records, then the slots.
      window_(ctx, layout_.total, layout_.control_bytes, layout_.record_words,
              has_sources(ctx)
                  ? 4ull * ranks_ * (layout_.record_words + uint64_t{options.max_tokens_per_rank})
                  : 0),
      send_in_place_(can_send_in_place(ctx)) {
  const uint64_t rows = uint64_t{ranks_} * options.max_tokens_per_rank;
  const uint64_t row_bytes = uint64_t{options.hidden} * options.element_bytes;
  for (uint32_t p = 0; p < 2; ++p) {
    recv_x_scales_[p] = ctx.alloc(std::max<uint64_t>(rows * (options.hidden / kFp8Block) * 4, 1));
    recv_topk_idx_[p] = ctx.alloc(std::max<uint64_t>(rows * options.max_topk * 8, 1));
    recv_topk_weights_[p] = ctx.alloc(std::max<uint64_t>(rows * options.max_topk * 4, 1));
    combined_x_[p] =
        ctx.alloc(std::max<uint64_t>(uint64_t{options.max_tokens_per_rank} * row_bytes, 1));
  }
  slots_ = ctx.alloc(std::max<uint64_t>(rows * 4, 1));
  for (DeviceBuffer& plan : plans_) plan = ctx.alloc(std::max<uint64_t>(4ull * (ranks_ + rows), 1));
  in_rank_ = ctx.alloc(std::max<uint64_t>(rows, 1));
  epochs_ = ctx.alloc(4 * sizeof(uint64_t));
  const uint64_t zeros[4] = {0, 0, 0, 0};
  ctx.copy(epochs_.data(), zeros, sizeof zeros);
  ContextInternals::log(ctx).info(
      "ep", "high-throughput rows {} (NIC backend '{}', COURIER_EP_SEND_IN_PLACE)",
      send_in_place_ ? "are sent from the caller's tensors in place"
                     : "are packed into the send area first",
      ctx.nic_backend());
}

uint32_t ProxyHighThroughput::in_place_source(uint32_t slot, const void* base, uint64_t bytes) {
  if (!send_in_place_ || base == nullptr || bytes == 0) return 0;
  // Context::set_source: nothing may still read the registration it replaces.
  if (source_busy_[slot]) {
    window_.settle_sends();
    source_busy_[slot] = false;
  }
  try {
    ctx_.set_source(slot, base, bytes);
    source_busy_[slot] = true;  // until the call's wait for its WRITEs returned
    return slot + 1;
  } catch (const Error& e) {
    // Memory a backend cannot register (say, not from the GPU runtime's
    // own allocator) is packed instead: slower, still right.
    if (!warned_) {
      ContextInternals::log(ctx_).warn("ep", "sending from a copy, not in place: {}", e.what());
      warned_ = true;
    }
    return 0;
  }
}

void ProxyHighThroughput::refuse(uint32_t phase, uint64_t call, const std::string& why,
                                 bool deferred) {
  sends_settled_ = false;  // the refusal pushes records
  try {
    window_.clear_status();
    window_.set_refused();
    // The call's last signal advances its epoch word, as the call would.
    auto refuse_step = [&](uint64_t staging, uint64_t record, uint64_t signal, uint64_t* word) {
      courier_gpu_ep_proxy_refuse_v1 job{};
      job.struct_size = sizeof job;
      job.device = window_.device();
      job.fifo = window_.fifo();
      job.staging_off = staging;
      job.record_off = record;
      job.signal_off = signal;
      job.epoch = word;
      window_.check(window_.ep().ep_proxy_refuse(window_.backend(), &job), "refusing");
    };
    window_.wake_proxies();  // the kernels push commands
    refuse_step(layout_.staging, layout_.records[phase][call & 1], layout_.signals[phase][call & 1],
                phase == kDispatch ? nullptr : epoch(phase, call));
    // A dispatch signals twice (counts, rows): both, so the next call's
    // targets stay the same on every rank.
    if (phase == kDispatch) {
      refuse_step(layout_.rows_staging, layout_.rows_records[call & 1],
                  layout_.rows_signals[call & 1], epoch(phase, call));
    }
    window_.check(window_.ep().ep_sync(window_.backend(), window_.device()), "refusing");
  } catch (const Error&) {
    // The refusal itself is the error worth reporting.
  }
  if (deferred) window_.break_with(why);
  window_.throw_if_broken();  // an earlier call that did not wait failed
  throw CallRefused(why);
}

DispatchResult ProxyHighThroughput::dispatch(const HtInputs& in, const DispatchArgs& args,
                                             uint64_t call) {
  const uint32_t parity = call & 1;
  const uint32_t experts = in.config.num_experts, per_rank = experts / ranks_;
  if (experts > layout_.max_experts) {
    refuse(0, call,
           fmt::format("ep::Buffer::dispatch: {} experts, more than the {} this Buffer counts "
                       "(BufferOptions::num_experts; the proxy path counts at most {})",
                       experts, layout_.max_experts, COURIER_GPU_EP_MAX_EXPERTS));
  }
  window_.clear_status();
  const bool fp8 = in.dtype == DType::fp8_e4m3;
  const bool with_topk = in.with_topk;
  const uint32_t row_bytes = fp8 ? in.hidden : in.hidden * (in.dtype == DType::float32 ? 4 : 2);
  const uint32_t scale_cols = fp8 ? in.hidden / kFp8Block : 0;
  // Every rank packs its slots alike: the agreed top-k, ids -1 without topk_idx.
  const uint32_t slot_topk = in.config.topk;
  // A row's meta: its scales, ids and weights.
  const auto meta_bytes = static_cast<uint32_t>(align_up(4ull * scale_cols + 8ull * slot_topk, 16));
  const uint64_t capacity = uint64_t{ranks_} * options_.max_tokens_per_rank;
  const uint64_t recv_meta = layout_.recv[parity] + align_up(capacity * row_bytes, 256);
  // On the caller's stream, a dispatch whose output shapes the host knows
  // (num_worst_tokens) does not wait: its counts stay on the device. It
  // reads x where it is copied (a registration would outlive the call).
  const bool defer = defers(args);
  const uint8_t* in_rank = in.in_rank;
  if (args.cached_handle != nullptr) {
    if (args.cached_handle->counts_on_device) {
      fail(
          "ep::Buffer::dispatch: the cached handle comes from a dispatch that did not wait (its "
          "counts stay on the device); a cached dispatch needs a handle whose counts the host "
          "read");
    }
    std::vector<uint8_t> mask(args.cached_handle->send_index.size());
    for (size_t i = 0; i < mask.size(); ++i) mask[i] = args.cached_handle->send_index[i] >= 0;
    ctx_.copy(in_rank_.data(), mask.data(), mask.size());
    in_rank = static_cast<const uint8_t*>(in_rank_.data());
  }

  courier_gpu_ep_proxy_ht_dispatch_v1 send{};
  send.struct_size = sizeof send;
  send.device = window_.device();
  send.fifo = window_.fifo();
  send.tokens = in.tokens;
  send.topk = slot_topk;
  send.num_experts = experts;
  send.row_bytes = row_bytes;
  send.scale_cols = scale_cols;
  send.max_tokens = options_.max_tokens_per_rank;
  send.x = in.x;
  send.x_scales = fp8 ? in.scales : nullptr;
  send.topk_idx = in.idx;
  send.topk_weights = in.weights;
  send.in_rank = in_rank;
  send.slots = static_cast<int32_t*>(slots_.data());
  send.send_off = layout_.send;
  send.recv_off = layout_.recv[parity];
  send.staging_off = layout_.staging;
  send.record_off = layout_.rows_records[parity];
  send.signal_off = layout_.rows_signals[parity];
  send.counts_off = static_cast<uint32_t>(layout_.counters);  // the window is < 4 GiB
  send.notify_record_off = layout_.records[kDispatch][parity];
  send.notify_signal_off = layout_.signals[kDispatch][parity];
  send.notify_target = target_of(call);
  send.rows_staging_off = layout_.rows_staging;
  send.send_meta_off =
      layout_.send + align_up(uint64_t{options_.max_tokens_per_rank} * row_bytes, 256);
  send.recv_meta_off = recv_meta;
  send.meta_bytes = meta_bytes;
  send.recv_rows = static_cast<uint32_t>(capacity);
  send.row_source = defer ? 0 : in_place_source(kDispatchX, in.x, uint64_t{in.tokens} * row_bytes);
  send.sends_settled = sends_settled_ ? 1 : 0;
  send.epoch = epoch(kDispatch, call);
  sends_settled_ = false;  // until this call's wait for them returned
  window_.wake_proxies();  // the kernels push commands
  window_.check(window_.ep().ep_proxy_ht_dispatch(window_.backend(), &send), "sending the rows");

  courier_gpu_ep_proxy_ht_receive_v1 receive{};
  receive.struct_size = sizeof receive;
  receive.device = window_.device();
  receive.fifo = window_.fifo();
  receive.topk = slot_topk;
  receive.local_experts = per_rank;
  receive.row_bytes = row_bytes;
  receive.scale_cols = scale_cols;
  receive.max_tokens = options_.max_tokens_per_rank;
  receive.pad_rows = static_cast<uint32_t>(args.num_worst_tokens);
  receive.capacity =
      static_cast<uint32_t>(args.num_worst_tokens > 0 ? args.num_worst_tokens : capacity);
  receive.recv_off = layout_.recv[parity];
  receive.record_off = layout_.rows_records[parity];
  receive.signal_off = layout_.rows_signals[parity];
  receive.target = target_of(call);
  receive.notify_record_off = layout_.records[kDispatch][parity];
  receive.recv_meta_off = recv_meta;
  receive.meta_bytes = meta_bytes;
  receive.wait_sends = send.row_source != 0 ? 1 : 0;  // the WRITEs read x
  // A plugin of minor 8 leaves the records and slots where the host reads
  // them without a copy (an older one ignores the fields).
  const bool readback = window_.readback() != nullptr;
  receive.readback = window_.readback_device();
  receive.slots = send.slots;
  receive.slot_tokens = in.tokens;
  receive.plan = static_cast<int32_t*>(plans_[parity].data());
  plan_held_[parity].clear();  // until this dispatch succeeded
  plan_call_[parity] = kNoPlan;
  receive.scales = fp8 ? static_cast<float*>(recv_x_scales_[parity].data()) : nullptr;
  receive.topk_idx = static_cast<int64_t*>(recv_topk_idx_[parity].data());
  receive.topk_weights = static_cast<float*>(recv_topk_weights_[parity].data());
  receive.epoch = epoch(kDispatch, call);
  window_.check(window_.ep().ep_proxy_ht_receive(window_.backend(), &receive),
                "receiving the rows");
  window_.sync("dispatch", {in.idx, in.topk, experts}, defer);
  if (defer) return deferred_dispatch(in, args, call);
  sends_settled_ = receive.wait_sends != 0;
  source_busy_[kDispatchX] = false;

  // The host reads the counts (to shape the outputs) and the slots (the handle's).
  std::vector<uint32_t> records(uint64_t{ranks_} * layout_.record_words);
  const uint64_t record_bytes = records.size() * 4;
  if (readback) {
    std::memcpy(records.data(), window_.readback(), record_bytes);
  } else {
    ctx_.copy(records.data(), window_.control(layout_.records[kDispatch][parity]), record_bytes);
  }
  DispatchHandle handle;
  handle.num_tokens = in.tokens;
  handle.hidden = in.hidden;
  handle.dtype_code = fp8 ? static_cast<uint32_t>(kDLBfloat) : in.x_dtype.code;
  handle.dtype_bits = fp8 ? 16 : in.x_dtype.bits;
  handle.num_worst_tokens = static_cast<uint32_t>(args.num_worst_tokens);
  handle.send_index.resize(uint64_t{in.tokens} * ranks_);
  if (readback) {
    std::memcpy(handle.send_index.data(), window_.readback() + record_bytes,
                handle.send_index.size() * 4);
  } else if (!handle.send_index.empty()) {
    ctx_.copy(handle.send_index.data(), slots_.data(), handle.send_index.size() * 4);
  }
  DispatchResult result;
  result.num_recv_tokens_per_expert.assign(per_rank, 0);
  uint64_t received = 0;
  for (uint32_t s = 0; s < ranks_; ++s) {
    const uint32_t* record = records.data() + uint64_t{s} * layout_.record_words;
    handle.recv_counts.push_back(record[1]);
    received += record[1];
    for (uint32_t l = 0; l < per_rank; ++l) {
      result.num_recv_tokens_per_expert[l] += static_cast<int32_t>(record[2 + l]);
    }
  }
  if (args.cached_handle != nullptr) {
    for (uint32_t s = 0; s < ranks_; ++s) {
      if (handle.recv_counts[s] != args.cached_handle->recv_counts[s]) {
        fail(
            "ep::Buffer::dispatch: rank {} sent {} rows where the cached handle expects {}: the "
            "ranks did not all reuse the same layout",
            s, handle.recv_counts[s], args.cached_handle->recv_counts[s]);
      }
    }
  }
  const auto n = static_cast<int64_t>(args.num_worst_tokens > 0 ? args.num_worst_tokens : received);
  result.recv_x = TensorView(window_.at(layout_.recv[parity]), device_, in.x_dtype, {n, in.hidden});
  if (fp8) {
    result.recv_x_scales =
        TensorView(recv_x_scales_[parity].data(), device_, DLDataType{kDLFloat, 32, 1},
                   {n, static_cast<int64_t>(scale_cols)});
  }
  // Without topk_idx no columns are shown; the slots carried the agreed top-k.
  result.recv_topk_idx =
      TensorView(recv_topk_idx_[parity].data(), device_, DLDataType{kDLInt, 64, 1},
                 {n, with_topk ? static_cast<int64_t>(slot_topk) : 0});
  result.recv_topk_weights =
      TensorView(recv_topk_weights_[parity].data(), device_, DLDataType{kDLFloat, 32, 1},
                 {n, with_topk ? static_cast<int64_t>(slot_topk) : 0});
  // What plans_[parity] now holds: a combine with this handle copies nothing.
  if (readback) {
    std::vector<int32_t>& held = plan_held_[parity];
    held.assign(handle.recv_counts.begin(), handle.recv_counts.end());
    held.insert(held.end(), handle.send_index.begin(), handle.send_index.end());
    plan_call_[parity] = call;
  }
  handle.call = call;
  result.handle = std::move(handle);
  return result;
}

DispatchResult ProxyHighThroughput::deferred_dispatch(const HtInputs& in, const DispatchArgs& args,
                                                      uint64_t call) {
  const uint32_t parity = call & 1;
  const bool fp8 = in.dtype == DType::fp8_e4m3;
  const bool with_topk = in.with_topk;
  const auto n = static_cast<int64_t>(args.num_worst_tokens);
  plan_call_[parity] = call;  // the receive kernel leaves the plan on the device
  DispatchResult result;
  result.recv_x = TensorView(window_.at(layout_.recv[parity]), device_, in.x_dtype, {n, in.hidden});
  if (fp8) {
    result.recv_x_scales =
        TensorView(recv_x_scales_[parity].data(), device_, DLDataType{kDLFloat, 32, 1},
                   {n, static_cast<int64_t>(in.hidden / kFp8Block)});
  }
  const int64_t columns = with_topk ? static_cast<int64_t>(in.config.topk) : 0;
  result.recv_topk_idx =
      TensorView(recv_topk_idx_[parity].data(), device_, DLDataType{kDLInt, 64, 1}, {n, columns});
  result.recv_topk_weights = TensorView(recv_topk_weights_[parity].data(), device_,
                                        DLDataType{kDLFloat, 32, 1}, {n, columns});
  DispatchHandle& handle = result.handle;
  handle.num_tokens = in.tokens;
  handle.hidden = in.hidden;
  handle.dtype_code = fp8 ? static_cast<uint32_t>(kDLBfloat) : in.x_dtype.code;
  handle.dtype_bits = fp8 ? 16 : in.x_dtype.bits;
  handle.num_worst_tokens = static_cast<uint32_t>(args.num_worst_tokens);
  handle.counts_on_device = true;
  handle.call = call;
  return result;
}

CombineResult ProxyHighThroughput::combine(const std::byte* x, const DLDataType& dtype,
                                           const DispatchHandle& handle, uint64_t call) {
  const uint32_t parity = call & 1;
  window_.clear_status();
  const bool defer = defers(handle);  // no registration of x: it would outlive the call
  uint32_t plan_at = handle.call & 1;
  if (handle.counts_on_device) {
    // Its plan is on the device only until the dispatch after next
    // replaced it.
    if (handle.call != plan_call_[plan_at]) {
      fail(
          "ep::Buffer::combine: the handle comes from a dispatch that did not wait (dispatch call "
          "{}), whose counts stay on the device only until the dispatch after next: combine it "
          "before the Buffer's second dispatch after it",
          handle.call);
    }
  } else {
    // The plan: rows per source rank (x holds them in rank order), then
    // which row of each rank holds each token.
    std::vector<int32_t> plan(ranks_ + handle.send_index.size());
    for (uint32_t s = 0; s < ranks_; ++s) plan[s] = static_cast<int32_t>(handle.recv_counts[s]);
    std::copy(handle.send_index.begin(), handle.send_index.end(), plan.begin() + ranks_);
    // Usually a receive kernel left it on the device (a combine soon after
    // its dispatch); else it is uploaded, never over a dispatch's own.
    if (plan != plan_held_[plan_at]) {
      plan_at = kUploadedPlan;
      if (plan != plan_held_[plan_at]) {
        plan_held_[plan_at].clear();  // until the copy is done
        ctx_.copy(plans_[plan_at].data(), plan.data(), plan.size() * 4);
        plan_held_[plan_at] = std::move(plan);
      }
    }
  }
  const auto* counts = static_cast<const int32_t*>(plans_[plan_at].data());
  const auto row_bytes = static_cast<uint32_t>(uint64_t{handle.hidden} * (dtype.bits / 8));

  courier_gpu_ep_proxy_combine_v1 send{};
  send.struct_size = sizeof send;
  send.device = window_.device();
  send.fifo = window_.fifo();
  send.mode = COURIER_GPU_EP_ROUTE_RANKS;
  // x inside a dispatch's received rows (its recv_x, as DeepEP's tests and
  // courier-bench combine): the WRITEs read it in place, nothing is packed.
  uint64_t rows_in = handle.num_worst_tokens;  // padded rows past the received ones are not sent
  if (!handle.counts_on_device) {
    rows_in = 0;
    for (uint32_t s = 0; s < ranks_; ++s) rows_in += handle.recv_counts[s];
  }
  const uint64_t capacity = uint64_t{ranks_} * options_.max_tokens_per_rank;
  for (uint32_t q = 0; q < 2; ++q) {
    const std::byte* rows = window_.at(layout_.recv[q]);
    if (x >= rows && x + rows_in * row_bytes <= rows + capacity * row_bytes) {
      send.mode |= COURIER_GPU_EP_COMBINE_FROM_WINDOW;
      send.x_off = static_cast<uint64_t>(x - window_.at(0));
    }
  }
  // Else x registered as it is, where the backend allows it.
  if ((send.mode & COURIER_GPU_EP_COMBINE_FROM_WINDOW) == 0 && !defer) {
    send.x_source = in_place_source(kCombineX, x, rows_in * row_bytes);
    if (send.x_source != 0) send.mode |= COURIER_GPU_EP_COMBINE_FROM_WINDOW;
  }
  send.row_bytes = row_bytes;
  send.max_tokens = options_.max_tokens_per_rank;
  send.x = x;
  send.counts = counts;
  send.send_off = layout_.send;
  send.recv_off = layout_.combine[parity];
  send.sends_settled = sends_settled_ ? 1 : 0;
  sends_settled_ = false;
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
  reduce.mode = COURIER_GPU_EP_ROUTE_RANKS;
  reduce.tokens = handle.num_tokens;
  reduce.hidden = handle.hidden;
  reduce.dtype_bits = dtype.bits;
  reduce.terms = ranks_;
  reduce.max_tokens = options_.max_tokens_per_rank;
  reduce.slots = counts + ranks_;
  reduce.recv_off = layout_.combine[parity];
  reduce.record_off = layout_.records[kCombine][parity];
  reduce.signal_off = layout_.signals[kCombine][parity];
  reduce.target = target_of(call);
  reduce.out = combined_x_[parity].data();
  reduce.wait_sends = send.x_source != 0 ? 1 : 0;  // the WRITEs read x
  reduce.epoch = epoch(kCombine, call);
  window_.check(window_.ep().ep_proxy_reduce(window_.backend(), &reduce), "summing the rows");
  window_.sync("combine", {}, defer);
  sends_settled_ = !defer && reduce.wait_sends != 0;
  source_busy_[kCombineX] = false;
  CombineResult result;
  result.combined_x = TensorView(combined_x_[parity].data(), device_, dtype,
                                 {static_cast<int64_t>(handle.num_tokens), handle.hidden});
  return result;
}

}  // namespace courier::ep
