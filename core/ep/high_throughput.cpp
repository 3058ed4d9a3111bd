#include "core/ep/high_throughput.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <span>
#include <thread>

#include "core/bootstrap/bootstrap.hpp"
#include "core/check.hpp"
#include "core/ep/element_types.hpp"

namespace courier::ep {

namespace {

constexpr uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

uint32_t element_bytes_of(DType dtype) {
  return dtype == DType::float32 ? 4 : dtype == DType::fp8_e4m3 ? 1 : 2;
}

DType dtype_of(const DLDataType& t) {
  if (t.code == kDLFloat && t.bits == 32) return DType::float32;
  if (t.code == kDLFloat && t.bits == 8) return DType::fp8_e4m3;
  return DType::bfloat16;  // anything else is refused by check_tensor as not bfloat16
}

}  // namespace

HtWindowLayout::HtWindowLayout(uint32_t ranks, uint32_t max_tokens, uint32_t row_bytes,
                               uint32_t topk)
    : ranks(ranks), max_tokens(max_tokens), row_bytes(row_bytes), topk(topk) {
  meta_bytes = align_up(4 + 8ull * topk, 8);
  const uint64_t rows = uint64_t{ranks} * max_tokens * row_bytes;
  const uint64_t metas = uint64_t{ranks} * max_tokens * meta_bytes;
  send_rows_ = 0;
  send_meta_ = align_up(send_rows_ + rows, 64);
  staging_ = align_up(send_meta_ + metas, 64);
  recv_rows_ = align_up(staging_ + 8ull * ranks, 64);
  recv_meta_ = align_up(recv_rows_ + 2 * rows, 64);
  combine_rows_ = align_up(recv_meta_ + 2 * metas, 64);
  signals_ = align_up(combine_rows_ + 2 * rows, 64);
  end_ = signals_ + 2ull * 2 * ranks * 16;
}

uint64_t HtWindowLayout::send_rows(uint32_t dst) const {
  return send_rows_ + uint64_t{dst} * max_tokens * row_bytes;
}
uint64_t HtWindowLayout::send_meta(uint32_t dst) const {
  return send_meta_ + uint64_t{dst} * max_tokens * meta_bytes;
}
uint64_t HtWindowLayout::staging(uint32_t dst) const { return staging_ + 8ull * dst; }
uint64_t HtWindowLayout::recv_rows(uint32_t parity, uint32_t src) const {
  return recv_rows_ + (uint64_t{parity} * ranks + src) * max_tokens * row_bytes;
}
uint64_t HtWindowLayout::recv_meta(uint32_t parity, uint32_t src) const {
  return recv_meta_ + (uint64_t{parity} * ranks + src) * max_tokens * meta_bytes;
}
uint64_t HtWindowLayout::combine_rows(uint32_t parity, uint32_t src) const {
  return combine_rows_ + (uint64_t{parity} * ranks + src) * max_tokens * row_bytes;
}
uint64_t HtWindowLayout::signal(uint32_t phase, uint32_t parity, uint32_t src) const {
  return signals_ + ((uint64_t{phase} * 2 + parity) * ranks + src) * 16;
}
uint64_t HtWindowLayout::total_bytes() const { return end_; }

HighThroughput::HighThroughput(Context& ctx, const BufferOptions& options, DLDevice device)
    : ctx_(ctx),
      options_(options),
      device_(device),
      rank_(static_cast<uint32_t>(ctx.rank())),
      ranks_(static_cast<uint32_t>(ctx.world_size())),
      layout_(ranks_, options.max_tokens_per_rank, options.hidden * options.element_bytes,
              options.max_topk),
      admission_(ctx) {
  checked_size(layout_, options);
  if (PeerWindows::usable(ctx, direct_misfit(options))) {
    direct_ = std::make_unique<DirectHighThroughput>(ctx, options, device);
    return;
  }
  exchange_ = std::make_unique<Exchange>(ctx, layout_.total_bytes());
  const uint64_t rows = uint64_t{ranks_} * options.max_tokens_per_rank;
  recv_x_ = ctx.alloc(std::max<uint64_t>(rows * layout_.row_bytes, 1));
  recv_x_scales_ = ctx.alloc(std::max<uint64_t>(rows * (options.hidden / kFp8Block) * 4, 1));
  recv_topk_idx_ = ctx.alloc(std::max<uint64_t>(rows * options.max_topk * 8, 1));
  recv_topk_weights_ = ctx.alloc(std::max<uint64_t>(rows * options.max_topk * 4, 1));
  combined_x_ =
      ctx.alloc(std::max<uint64_t>(uint64_t{options.max_tokens_per_rank} * layout_.row_bytes, 1));
}

uint64_t HighThroughput::checked_size(const HtWindowLayout& layout, const BufferOptions& options) {
  if (options.hidden == 0 || (options.element_bytes != 2 && options.element_bytes != 4) ||
      options.max_topk == 0) {
    fail(
        "ep::Buffer: hidden {} / element_bytes {} / max_topk {} cannot be packed: hidden and "
        "max_topk must be positive, element_bytes 2 (bfloat16) or 4 (float32)",
        options.hidden, options.element_bytes, options.max_topk);
  }
  return layout.total_bytes();
}

void HighThroughput::add_signal(std::vector<TransferCmd>& list, uint32_t dst, uint32_t phase,
                                uint32_t parity, uint64_t count) {
  ctx_.copy(at(layout_.staging(dst)), &count, sizeof count);
  const uint64_t record = layout_.signal(phase, parity, rank_);
  exchange_->add_signal(list, dst, layout_.staging(dst), record, 8, record + 8);
}

std::vector<uint64_t> HighThroughput::wait_signals(uint32_t phase, uint32_t parity, uint64_t epoch,
                                                   const char* what) {
  const std::vector<std::byte> records =
      exchange_->wait(layout_.signal(phase, parity, 0), 16, 8, epoch, what);
  std::vector<uint64_t> counts(ranks_);
  for (uint32_t r = 0; r < ranks_; ++r) {
    std::memcpy(&counts[r], records.data() + 16ull * r, 8);
    if (counts[r] == kRefused) {
      refuse_call("ep::Buffer::{}: rank {} refused its arguments (its error says why)", what, r);
    }
  }
  return counts;
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

void HighThroughput::refuse(uint32_t phase, const std::string& why) {
  // The peers are about to wait for this rank's signal of this call: give
  // them one that says "refused", so they fail at once instead of hanging.
  if (direct_) direct_->refuse(phase, calls_[phase]++, why);
  const uint32_t parity = calls_[phase] & 1;
  ++calls_[phase];
  std::vector<std::vector<TransferCmd>> commands(ranks_);
  for (uint32_t d = 0; d < ranks_; ++d) {
    if (d != rank_) add_signal(commands[d], d, phase, parity, kRefused);
  }
  exchange_->refuse(commands, phase == 0 ? "dispatch" : "combine", why);
}

DispatchResult HighThroughput::dispatch(const DispatchArgs& args) {
  DispatchInputs in;
  std::string refused;
  try {
    in = validate(args);
  } catch (const Error& e) {
    refused = e.what();
  }
  admission_.admit(in.config, refused, "dispatch", [&](const std::string& why) { refuse(0, why); });
  if (direct_) return direct_->dispatch(in, args, calls_[0]++);
  const auto tokens = in.tokens;
  const auto hidden = in.hidden;
  const auto topk = in.topk;
  const uint32_t row_bytes = layout_.row_bytes;
  const std::byte* x = in.x;
  const uint32_t per_rank = in.config.num_experts / ranks_;
  const bool fp8 = in.dtype == DType::fp8_e4m3;
  const uint32_t scale_columns = hidden / kFp8Block;

  // The routing, on the host: from the layout, or from the cached handle.
  const bool with_topk = in.idx != nullptr;
  std::vector<int64_t> h_idx(uint64_t{tokens} * topk, -1);
  std::vector<float> h_weights(h_idx.size(), 0.0f);
  std::vector<uint8_t> h_in(uint64_t{tokens} * ranks_);
  if (with_topk) {
    ctx_.copy(h_idx.data(), in.idx, h_idx.size() * 8);
    ctx_.copy(h_weights.data(), in.weights, h_weights.size() * 4);
    for (size_t i = 0; i < h_idx.size(); ++i) {
      if (h_idx[i] < -1 || h_idx[i] >= static_cast<int64_t>(in.config.num_experts)) {
        refuse(0, fmt::format("ep::Buffer::dispatch: topk_idx[{}][{}] = {} is outside [-1, {})",
                              i / topk, i % topk, h_idx[i], in.config.num_experts));
      }
    }
  }
  if (args.cached_handle != nullptr) {
    for (size_t i = 0; i < h_in.size(); ++i) h_in[i] = args.cached_handle->send_index[i] >= 0;
  } else {
    ctx_.copy(h_in.data(), in.in_rank, h_in.size());
  }

  const uint32_t parity = calls_[0] & 1;
  const uint64_t epoch = calls_[0] / 2 + 1;  // calls of this parity so far, this one included
  ++calls_[0];
  DispatchHandle handle;
  handle.num_tokens = tokens;
  handle.hidden = hidden;
  // Combine takes the buffer's element type (bfloat16 after FP8 dispatch).
  handle.dtype_code = fp8 ? static_cast<uint32_t>(kDLBfloat) : in.x_dtype.code;
  handle.dtype_bits = fp8 ? 16 : in.x_dtype.bits;
  handle.num_worst_tokens = static_cast<uint32_t>(args.num_worst_tokens);
  handle.send_index.assign(uint64_t{tokens} * ranks_, -1);
  std::vector<std::vector<TransferCmd>> commands(ranks_);
  std::vector<std::byte> meta(layout_.meta_bytes * tokens);
  // The tokens' rows on the host once (FP8: values and scales), so packing
  // costs one copy per destination instead of one per row.
  const uint64_t x_row_bytes = fp8 ? hidden : row_bytes;
  std::vector<std::byte> h_x(uint64_t{tokens} * x_row_bytes);
  std::vector<std::byte> h_scales(fp8 ? uint64_t{tokens} * scale_columns * 4 : 0);
  ctx_.copy(h_x.data(), x, h_x.size());
  if (fp8) ctx_.copy(h_scales.data(), in.scales, h_scales.size());
  std::vector<std::byte> packed(uint64_t{tokens} * row_bytes);
  for (uint32_t d = 0; d < ranks_; ++d) {
    // Pack the tokens for d, each once, in token order, with their meta.
    uint32_t count = 0;
    for (uint32_t t = 0; t < tokens; ++t) {
      if (h_in[uint64_t{t} * ranks_ + d] == 0) continue;
      handle.send_index[uint64_t{t} * ranks_ + d] = static_cast<int32_t>(count);
      std::byte* slot = packed.data() + uint64_t{count} * row_bytes;
      std::memcpy(slot, h_x.data() + uint64_t{t} * x_row_bytes, x_row_bytes);
      if (fp8) {  // the row slot holds the values, then their scales
        std::memcpy(slot + hidden, h_scales.data() + uint64_t{t} * scale_columns * 4,
                    scale_columns * 4);
      }
      std::byte* m = meta.data() + uint64_t{count} * layout_.meta_bytes;
      const int32_t source = static_cast<int32_t>(t);
      std::memcpy(m, &source, 4);
      for (uint32_t k = 0; k < topk; ++k) {
        const int64_t e = h_idx[uint64_t{t} * topk + k];
        const int32_t local = e >= 0 && static_cast<uint32_t>(e) / per_rank == d
                                  ? static_cast<int32_t>(e - int64_t{d} * per_rank)
                                  : -1;
        std::memcpy(m + 4 + 4 * k, &local, 4);
        std::memcpy(m + 4 + 4ull * topk + 4 * k, &h_weights[uint64_t{t} * topk + k], 4);
      }
      ++count;
    }
    ctx_.copy(at(layout_.send_rows(d)), packed.data(), uint64_t{count} * row_bytes);
    ctx_.copy(at(layout_.send_meta(d)), meta.data(), uint64_t{count} * layout_.meta_bytes);
    if (d == rank_) {  // to itself: local copies, then the same signal words
      ctx_.copy(at(layout_.recv_rows(parity, d)), at(layout_.send_rows(d)),
                uint64_t{count} * row_bytes);
      ctx_.copy(at(layout_.recv_meta(parity, d)), at(layout_.send_meta(d)),
                uint64_t{count} * layout_.meta_bytes);
      const uint64_t words[2] = {count, epoch};
      ctx_.copy(at(layout_.signal(0, parity, rank_)), words, sizeof words);
      continue;
    }
    exchange_->add_writes(commands[d], d, layout_.send_rows(d), layout_.recv_rows(parity, rank_),
                          uint64_t{count} * row_bytes);
    exchange_->add_writes(commands[d], d, layout_.send_meta(d), layout_.recv_meta(parity, rank_),
                          uint64_t{count} * layout_.meta_bytes);
    add_signal(commands[d], d, 0, parity, count);
  }
  exchange_->run(commands, "dispatch");
  const std::vector<uint64_t> counts = wait_signals(0, parity, epoch, "dispatch");
  if (args.cached_handle != nullptr) {
    for (uint32_t s = 0; s < ranks_; ++s) {
      if (counts[s] != args.cached_handle->recv_counts[s]) {
        fail(
            "ep::Buffer::dispatch: rank {} sent {} rows where the cached handle expects {}: the "
            "ranks did not all reuse the same layout",
            s, counts[s], args.cached_handle->recv_counts[s]);
      }
    }
  }

  // Rows grouped by source rank, contiguous; meta into the output tensors.
  uint64_t received = 0;
  for (uint64_t c : counts) received += c;
  const uint64_t rows_out =
      args.num_worst_tokens > 0 ? static_cast<uint64_t>(args.num_worst_tokens) : received;
  if (received > rows_out) {
    fail("ep::Buffer::dispatch: {} rows arrived, more than num_worst_tokens {}", received,
         rows_out);
  }
  std::vector<int64_t> r_idx(rows_out * topk, -1);
  std::vector<float> r_weights(rows_out * topk, 0.0f);
  DispatchResult result;
  result.num_recv_tokens_per_expert.assign(per_rank, 0);
  uint64_t row = 0;
  for (uint32_t s = 0; s < ranks_; ++s) {
    handle.recv_counts.push_back(static_cast<uint32_t>(counts[s]));
    if (counts[s] > options_.max_tokens_per_rank) {
      fail("ep::Buffer::dispatch: rank {} announced {} rows, more than the buffer holds", s,
           counts[s]);
    }
    if (fp8) {  // split each slot into values and scales
      std::vector<std::byte> slots(counts[s] * row_bytes);
      ctx_.copy(slots.data(), at(layout_.recv_rows(parity, s)), slots.size());
      std::vector<std::byte> values(counts[s] * hidden), scales(counts[s] * scale_columns * 4);
      for (uint64_t i = 0; i < counts[s]; ++i) {
        std::memcpy(values.data() + i * hidden, slots.data() + i * row_bytes, hidden);
        std::memcpy(scales.data() + i * scale_columns * 4, slots.data() + i * row_bytes + hidden,
                    scale_columns * 4);
      }
      ctx_.copy(static_cast<std::byte*>(recv_x_.data()) + row * hidden, values.data(),
                values.size());
      ctx_.copy(static_cast<std::byte*>(recv_x_scales_.data()) + row * scale_columns * 4,
                scales.data(), scales.size());
    } else {
      ctx_.copy(static_cast<std::byte*>(recv_x_.data()) + row * row_bytes,
                at(layout_.recv_rows(parity, s)), counts[s] * row_bytes);
    }
    std::vector<std::byte> m(counts[s] * layout_.meta_bytes);
    ctx_.copy(m.data(), at(layout_.recv_meta(parity, s)), m.size());
    for (uint64_t i = 0; i < counts[s]; ++i, ++row) {
      const std::byte* p = m.data() + i * layout_.meta_bytes;
      for (uint32_t k = 0; k < topk; ++k) {
        int32_t local = 0;
        std::memcpy(&local, p + 4 + 4 * k, 4);
        std::memcpy(&r_weights[row * topk + k], p + 4 + 4ull * topk + 4 * k, 4);
        r_idx[row * topk + k] = local;
        if (local >= 0 && static_cast<uint32_t>(local) < per_rank) {
          ++result.num_recv_tokens_per_expert[local];
        }
      }
    }
  }
  const uint64_t out_row_bytes = fp8 ? hidden : row_bytes;
  if (rows_out > received) {  // padding rows: zeros
    std::vector<std::byte> zeros((rows_out - received) * out_row_bytes);
    ctx_.copy(static_cast<std::byte*>(recv_x_.data()) + received * out_row_bytes, zeros.data(),
              zeros.size());
    if (fp8) {
      std::vector<std::byte> no_scales((rows_out - received) * scale_columns * 4);
      ctx_.copy(static_cast<std::byte*>(recv_x_scales_.data()) + received * scale_columns * 4,
                no_scales.data(), no_scales.size());
    }
  }
  const uint32_t columns = with_topk ? topk : 0;
  if (with_topk) {
    ctx_.copy(recv_topk_idx_.data(), r_idx.data(), r_idx.size() * 8);
    ctx_.copy(recv_topk_weights_.data(), r_weights.data(), r_weights.size() * 4);
  }
  const auto n = static_cast<int64_t>(rows_out);
  result.recv_x = TensorView(recv_x_.data(), device_, in.x_dtype, {n, hidden});
  if (fp8) {
    result.recv_x_scales =
        TensorView(recv_x_scales_.data(), device_, DLDataType{kDLFloat, 32, 1}, {n, scale_columns});
  }
  result.recv_topk_idx =
      TensorView(recv_topk_idx_.data(), device_, DLDataType{kDLInt, 64, 1}, {n, columns});
  result.recv_topk_weights =
      TensorView(recv_topk_weights_.data(), device_, DLDataType{kDLFloat, 32, 1}, {n, columns});
  result.handle = std::move(handle);
  return result;
}

CombineResult HighThroughput::combine(const DLTensor& x_tensor, const DispatchHandle& handle) {
  const DType dtype = handle.dtype_bits == 32 ? DType::float32 : DType::bfloat16;
  const std::byte* x = nullptr;
  try {
    if (!admission_.configured() || handle.recv_counts.size() != ranks_ ||
        handle.send_index.size() != uint64_t{handle.num_tokens} * ranks_) {
      fail("ep::Buffer::combine: the handle does not come from a dispatch of this Buffer");
    }
    uint64_t received = 0;
    for (uint32_t c : handle.recv_counts) received += c;
    const uint64_t rows = handle.num_worst_tokens > 0 ? handle.num_worst_tokens : received;
    x = static_cast<const std::byte*>(check_tensor(&x_tensor, "ep::Buffer::combine: x", dtype,
                                                   {static_cast<int64_t>(rows), handle.hidden},
                                                   device_.device_type));
  } catch (const Error& e) {
    refuse(1, e.what());
  }
  if (direct_) return direct_->combine(x, x_tensor.dtype, handle, calls_[1]++);
  const uint32_t row_bytes = layout_.row_bytes;
  const uint32_t parity = calls_[1] & 1;
  const uint64_t epoch = calls_[1] / 2 + 1;
  ++calls_[1];

  // Rows go back to the rank they came from, in the order they came.
  std::vector<std::vector<TransferCmd>> commands(ranks_);
  uint64_t row = 0;
  for (uint32_t s = 0; s < ranks_; ++s) {
    const uint64_t count = handle.recv_counts[s];
    const uint64_t bytes = count * row_bytes;
    ctx_.copy(at(layout_.send_rows(s)), x + row * row_bytes, bytes);
    row += count;
    if (s == rank_) {
      ctx_.copy(at(layout_.combine_rows(parity, s)), at(layout_.send_rows(s)), bytes);
      const uint64_t words[2] = {count, epoch};
      ctx_.copy(at(layout_.signal(1, parity, rank_)), words, sizeof words);
      continue;
    }
    exchange_->add_writes(commands[s], s, layout_.send_rows(s), layout_.combine_rows(parity, rank_),
                          bytes);
    add_signal(commands[s], s, 1, parity, count);
  }
  exchange_->run(commands, "combine");
  wait_signals(1, parity, epoch, "combine");

  // Per token, the sum of the rows that came back, in float.
  const uint32_t tokens = handle.num_tokens;
  const uint32_t hidden = handle.hidden;
  std::vector<float> sum(uint64_t{tokens} * hidden, 0.0f);
  std::vector<std::byte> rows;
  for (uint32_t r = 0; r < ranks_; ++r) {
    rows.resize(uint64_t{tokens} * row_bytes);
    uint32_t count = 0;
    for (uint32_t t = 0; t < tokens; ++t) {
      if (handle.send_index[uint64_t{t} * ranks_ + r] >= 0) ++count;
    }
    ctx_.copy(rows.data(), at(layout_.combine_rows(parity, r)), uint64_t{count} * row_bytes);
    for (uint32_t t = 0; t < tokens; ++t) {
      const int32_t j = handle.send_index[uint64_t{t} * ranks_ + r];
      if (j < 0) continue;
      accumulate(dtype, rows.data() + uint64_t(j) * row_bytes, hidden,
                 sum.data() + uint64_t{t} * hidden);
    }
  }
  std::vector<std::byte> out(uint64_t{tokens} * row_bytes);
  store(dtype, sum.data(), sum.size(), out.data());
  ctx_.copy(combined_x_.data(), out.data(), out.size());
  CombineResult result;
  result.combined_x = TensorView(combined_x_.data(), device_, x_tensor.dtype,
                                 {static_cast<int64_t>(tokens), hidden});
  return result;
}

}  // namespace courier::ep
