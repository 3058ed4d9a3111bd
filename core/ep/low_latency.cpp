#include "core/ep/low_latency.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <memory>

#include "core/check.hpp"
#include "core/ep/element_types.hpp"

namespace courier::ep {

namespace {

constexpr uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

}  // namespace

LlWindowLayout::LlWindowLayout(uint32_t ranks, uint32_t local_experts, uint32_t max_tokens,
                               uint32_t row_bytes)
    : ranks(ranks), local_experts(local_experts), max_tokens(max_tokens), row_bytes(row_bytes) {
  record_bytes = 8ull * (local_experts + 1);
  const uint64_t slots = uint64_t{ranks} * local_experts * max_tokens;  // one side's rows
  send_rows_ = 0;
  send_src_ = align_up(send_rows_ + slots * row_bytes, 64);
  staging_ = align_up(send_src_ + slots * 4, 64);
  recv_rows_ = align_up(staging_ + ranks * record_bytes, 64);
  recv_src_ = align_up(recv_rows_ + 2 * slots * row_bytes, 64);
  combine_rows_ = align_up(recv_src_ + 2 * slots * 4, 64);
  signals_ = align_up(combine_rows_ + 2 * slots * row_bytes, 64);
  end_ = signals_ + 2ull * 2 * ranks * record_bytes;
}

uint64_t LlWindowLayout::block(uint32_t rows_of) const { return uint64_t{rows_of} * max_tokens; }
uint64_t LlWindowLayout::send_rows(uint32_t dst, uint32_t expert) const {
  return send_rows_ + block(dst * local_experts + expert) * row_bytes;
}
uint64_t LlWindowLayout::send_src(uint32_t dst, uint32_t expert) const {
  return send_src_ + block(dst * local_experts + expert) * 4;
}
uint64_t LlWindowLayout::staging(uint32_t dst) const { return staging_ + dst * record_bytes; }
uint64_t LlWindowLayout::recv_rows(uint32_t parity, uint32_t src, uint32_t expert) const {
  return recv_rows_ + block((parity * ranks + src) * local_experts + expert) * row_bytes;
}
uint64_t LlWindowLayout::recv_src(uint32_t parity, uint32_t src, uint32_t expert) const {
  return recv_src_ + block((parity * ranks + src) * local_experts + expert) * 4;
}
uint64_t LlWindowLayout::combine_rows(uint32_t parity, uint32_t src, uint32_t expert) const {
  return combine_rows_ + block((parity * ranks + src) * local_experts + expert) * row_bytes;
}
uint64_t LlWindowLayout::signal(uint32_t phase, uint32_t parity, uint32_t src) const {
  return signals_ + ((uint64_t{phase} * 2 + parity) * ranks + src) * record_bytes;
}

uint64_t LowLatency::checked_size(const LlWindowLayout& layout, const BufferOptions& options) {
  if (options.hidden == 0 || (options.element_bytes != 2 && options.element_bytes != 4) ||
      options.max_tokens_per_rank == 0 || layout.local_experts == 0 ||
      options.num_experts % layout.ranks != 0) {
    fail(
        "ep::Buffer (low-latency): hidden {}, element_bytes {}, max_tokens_per_rank {}, "
        "num_experts {}: hidden and max_tokens_per_rank must be positive, element_bytes 2 or 4, "
        "num_experts a positive multiple of the {} ranks",
        options.hidden, options.element_bytes, options.max_tokens_per_rank, options.num_experts,
        layout.ranks);
  }
  return layout.total_bytes();
}

LowLatency::LowLatency(Context& ctx, const BufferOptions& options, DLDevice device)
    : ctx_(ctx),
      options_(options),
      device_(device),
      rank_(static_cast<uint32_t>(ctx.rank())),
      ranks_(static_cast<uint32_t>(ctx.world_size())),
      local_experts_(options.num_experts / ranks_),
      layout_(ranks_, local_experts_, options.max_tokens_per_rank,
              options.hidden * options.element_bytes),
      admission_(ctx) {
  checked_size(layout_, options);
  if (PeerWindows::usable(ctx, direct_misfit(options))) {
    direct_ = std::make_unique<DirectLowLatency>(ctx, options, device);
    return;
  }
  exchange_ = std::make_unique<Exchange>(ctx, layout_.total_bytes());
  const uint64_t slots = uint64_t{local_experts_} * ranks_ * options.max_tokens_per_rank;
  packed_x_ = ctx.alloc(slots * layout_.row_bytes);
  packed_scales_ = ctx.alloc(std::max<uint64_t>(slots * (options.hidden / kFp8Block) * 4, 1));
  packed_count_ = ctx.alloc(4ull * local_experts_);
  packed_src_ = ctx.alloc(4 * slots);
  packed_range_ = ctx.alloc(8ull * local_experts_ * ranks_);
  combined_x_ = ctx.alloc(uint64_t{options.max_tokens_per_rank} * layout_.row_bytes);
}

LowLatency::Inputs LowLatency::validate(const LowLatencyDispatchArgs& args) const {
  Inputs in;
  if (args.x == nullptr) fail("ep::Buffer::low_latency_dispatch: x is missing");
  const DType dtype =
      args.x->dtype.code == kDLFloat && args.x->dtype.bits == 32 ? DType::float32 : DType::bfloat16;
  in.dtype = dtype;
  in.fp8 = args.use_fp8;
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
  if (in.hidden * element != layout_.row_bytes) {
    fail(
        "ep::Buffer::low_latency_dispatch: a row of x is {} bytes (hidden {} x {}), the buffer "
        "was sized for {}",
        in.hidden * element, in.hidden, to_string(dtype), layout_.row_bytes);
  }
  in.idx = static_cast<const int64_t*>(
      check_tensor(args.topk_idx, "ep::Buffer::low_latency_dispatch: topk_idx", DType::int64,
                   {in.tokens, -1}, device_.device_type));
  in.topk = static_cast<uint32_t>(args.topk_idx->shape[1]);
  if (in.topk == 0 || in.topk > options_.max_topk) {
    fail("ep::Buffer::low_latency_dispatch: top-{} where the buffer was sized for 1..{}", in.topk,
         options_.max_topk);
  }
  if (in.fp8 && in.hidden % kFp8Block != 0) {
    fail(
        "ep::Buffer::low_latency_dispatch: use_fp8 needs hidden a multiple of {} (one scale per "
        "{} channels); hidden is {}",
        kFp8Block, kFp8Block, in.hidden);
  }
  in.config = {in.hidden, in.fp8 ? DType::fp8_e4m3 : dtype, in.topk, options_.num_experts};
  return in;
}

void LowLatency::signal(std::vector<TransferCmd>& list, uint32_t dst, uint32_t phase,
                        uint32_t parity, const std::vector<uint64_t>& counts) {
  ctx_.copy(at(layout_.staging(dst)), counts.data(), counts.size() * 8);
  const uint64_t record = layout_.signal(phase, parity, rank_);
  exchange_->add_signal(list, dst, layout_.staging(dst), record, counts.size() * 8,
                        record + 8ull * local_experts_);
}

void LowLatency::refuse(uint32_t phase, const std::string& why) {
  if (direct_) direct_->refuse(phase, calls_[phase]++, why);
  const uint32_t parity = calls_[phase] & 1;
  ++calls_[phase];
  std::vector<uint64_t> refused(local_experts_, kRefused);
  std::vector<std::vector<TransferCmd>> commands(ranks_);
  for (uint32_t d = 0; d < ranks_; ++d) {
    if (d != rank_) signal(commands[d], d, phase, parity, refused);
  }
  exchange_->refuse(commands, phase == 0 ? "low_latency_dispatch" : "low_latency_combine", why);
}

std::vector<uint64_t> LowLatency::wait(uint32_t phase, uint32_t parity, uint64_t epoch,
                                       const char* what) {
  const std::vector<std::byte> records = exchange_->wait(
      layout_.signal(phase, parity, 0), layout_.record_bytes, 8ull * local_experts_, epoch, what);
  std::vector<uint64_t> counts(uint64_t{ranks_} * local_experts_);
  for (uint32_t s = 0; s < ranks_; ++s) {
    std::memcpy(&counts[uint64_t{s} * local_experts_], records.data() + s * layout_.record_bytes,
                8ull * local_experts_);
    if (counts[uint64_t{s} * local_experts_] == kRefused) {
      refuse_call("ep::Buffer::{}: rank {} refused its arguments (its error says why)", what, s);
    }
  }
  return counts;
}

LowLatencyDispatchResult LowLatency::dispatch(const LowLatencyDispatchArgs& args) {
  Inputs in;
  std::string refused;
  try {
    in = validate(args);
  } catch (const Error& e) {
    refused = e.what();
  }
  admission_.admit(in.config, refused, "low_latency_dispatch",
                   [&](const std::string& why) { refuse(0, why); });
  if (direct_) return direct_->dispatch(in, args.return_recv_hook, calls_[0]++);
  const uint32_t row_bytes = layout_.row_bytes;
  std::vector<int64_t> idx(uint64_t{in.tokens} * in.topk);
  ctx_.copy(idx.data(), in.idx, idx.size() * 8);
  for (size_t i = 0; i < idx.size(); ++i) {
    if (idx[i] < -1 || idx[i] >= static_cast<int64_t>(options_.num_experts)) {
      refuse(0, fmt::format("ep::Buffer::low_latency_dispatch: topk_idx[{}][{}] = {} is outside "
                            "[-1, {})",
                            i / in.topk, i % in.topk, idx[i], options_.num_experts));
    }
  }
  const uint64_t call = calls_[0]++;
  const uint32_t parity = call & 1;

  LowLatencyHandle handle;
  handle.num_tokens = in.tokens;
  handle.topk = in.topk;
  handle.hidden = in.hidden;
  handle.dtype_code = in.x_dtype.code;
  handle.dtype_bits = in.x_dtype.bits;
  handle.call = call;
  handle.send_slot.assign(idx.size(), -1);
  handle.recv_counts = std::make_shared<std::vector<uint32_t>>();
  // Every token's row on the host once, as it will travel (FP8: quantized,
  // values then scales in a row slot).
  const uint32_t scale_columns = in.hidden / kFp8Block;
  std::vector<std::byte> host_rows;
  if (in.fp8) {
    std::vector<std::byte> raw(uint64_t{in.tokens} * row_bytes);
    ctx_.copy(raw.data(), in.x, raw.size());
    host_rows.assign(uint64_t{in.tokens} * row_bytes, std::byte{0});
    std::vector<float> row(in.hidden);
    for (uint32_t t = 0; t < in.tokens; ++t) {
      std::fill(row.begin(), row.end(), 0.0f);
      accumulate(in.dtype, raw.data() + uint64_t{t} * row_bytes, in.hidden, row.data());
      std::byte* slot = host_rows.data() + uint64_t{t} * row_bytes;
      std::vector<float> scales(scale_columns);
      quantize_row(row.data(), in.hidden, reinterpret_cast<uint8_t*>(slot), scales.data());
      std::memcpy(slot + in.hidden, scales.data(), scale_columns * 4);
    }
  } else {  // then one copy per block, not one per row
    host_rows.resize(uint64_t{in.tokens} * row_bytes);
    ctx_.copy(host_rows.data(), in.x, host_rows.size());
  }
  // Pack each (token, expert) pair into its (destination, expert) block.
  std::vector<uint64_t> counts(uint64_t{ranks_} * local_experts_, 0);
  std::vector<std::vector<int32_t>> sources(counts.size());
  for (uint32_t t = 0; t < in.tokens; ++t) {
    for (uint32_t k = 0; k < in.topk; ++k) {
      const int64_t e = idx[uint64_t{t} * in.topk + k];
      if (e < 0) continue;
      const uint32_t d = static_cast<uint32_t>(e) / local_experts_;
      const uint32_t le = static_cast<uint32_t>(e) % local_experts_;
      uint64_t& j = counts[uint64_t{d} * local_experts_ + le];
      handle.send_slot[uint64_t{t} * in.topk + k] = static_cast<int32_t>(j);
      sources[uint64_t{d} * local_experts_ + le].push_back(static_cast<int32_t>(t));
      ++j;
    }
  }
  std::vector<std::vector<TransferCmd>> commands(ranks_);
  for (uint32_t d = 0; d < ranks_; ++d) {
    std::vector<uint64_t> mine(counts.begin() + uint64_t{d} * local_experts_,
                               counts.begin() + uint64_t{d + 1} * local_experts_);
    for (uint32_t le = 0; le < local_experts_; ++le) {
      const auto& src = sources[uint64_t{d} * local_experts_ + le];
      std::vector<std::byte> block(src.size() * row_bytes);
      for (size_t i = 0; i < src.size(); ++i) {
        std::memcpy(block.data() + i * row_bytes,
                    host_rows.data() + static_cast<uint64_t>(src[i]) * row_bytes, row_bytes);
      }
      ctx_.copy(at(layout_.send_rows(d, le)), block.data(), block.size());
      ctx_.copy(at(layout_.send_src(d, le)), src.data(), src.size() * 4);
      if (d == rank_) {
        ctx_.copy(at(layout_.recv_rows(parity, d, le)), at(layout_.send_rows(d, le)),
                  src.size() * row_bytes);
        ctx_.copy(at(layout_.recv_src(parity, d, le)), src.data(), src.size() * 4);
      } else {
        exchange_->add_writes(commands[d], d, layout_.send_rows(d, le),
                              layout_.recv_rows(parity, rank_, le), src.size() * row_bytes);
        exchange_->add_writes(commands[d], d, layout_.send_src(d, le),
                              layout_.recv_src(parity, rank_, le), src.size() * 4);
      }
    }
    if (d == rank_) {  // its own record, written directly
      mine.push_back(call / 2 + 1);
      ctx_.copy(at(layout_.signal(0, parity, rank_)), mine.data(), mine.size() * 8);
    } else {
      signal(commands[d], d, 0, parity, mine);
    }
  }
  exchange_->run(commands, "low_latency_dispatch");

  LowLatencyDispatchResult result;
  const int64_t slots = int64_t{ranks_} * options_.max_tokens_per_rank;
  result.packed_recv_x =
      TensorView(packed_x_.data(), device_, in.fp8 ? DLDataType{kDLFloat, 8, 1} : in.x_dtype,
                 {local_experts_, slots, in.hidden});
  if (in.fp8) {
    result.packed_recv_x_scales =
        TensorView(packed_scales_.data(), device_, DLDataType{kDLFloat, 32, 1},
                   {local_experts_, slots, static_cast<int64_t>(scale_columns)});
  }
  result.packed_recv_count =
      TensorView(packed_count_.data(), device_, DLDataType{kDLInt, 32, 1}, {local_experts_});
  result.packed_recv_src_info =
      TensorView(packed_src_.data(), device_, DLDataType{kDLInt, 32, 1}, {local_experts_, slots});
  result.packed_recv_layout_range = TensorView(packed_range_.data(), device_,
                                               DLDataType{kDLInt, 64, 1}, {local_experts_, ranks_});
  result.handle = handle;
  if (args.return_recv_hook) {
    // The copy shares recv_counts with the handle returned.
    result.recv_hook = [this, call, fp8 = in.fp8, copy = handle]() mutable {
      receive(call, fp8, &copy);
    };
  } else {
    receive(call, in.fp8, &result.handle);
  }
  return result;
}

void LowLatency::receive(uint64_t call, bool fp8, LowLatencyHandle* handle) {
  const uint32_t parity = call & 1;
  const std::vector<uint64_t> counts = wait(0, parity, call / 2 + 1, "low_latency_dispatch");
  const uint32_t row_bytes = layout_.row_bytes;
  const uint64_t slots = uint64_t{ranks_} * options_.max_tokens_per_rank;
  std::vector<int32_t> per_expert(local_experts_, 0);
  std::vector<int64_t> range(uint64_t{local_experts_} * ranks_, 0);
  std::vector<uint32_t>& recv = *handle->recv_counts;
  recv.assign(uint64_t{local_experts_} * ranks_, 0);
  for (uint32_t le = 0; le < local_experts_; ++le) {
    uint64_t begin = 0;
    for (uint32_t s = 0; s < ranks_; ++s) {
      const uint64_t count = counts[uint64_t{s} * local_experts_ + le];
      if (count > options_.max_tokens_per_rank) {
        fail(
            "ep::Buffer::low_latency_dispatch: rank {} announced {} rows for expert {}, more "
            "than the buffer holds",
            s, count, le);
      }
      const uint64_t row = le * slots + begin;
      if (fp8) {  // split each slot into values and scales
        const uint32_t hidden = options_.hidden, columns = hidden / kFp8Block;
        std::vector<std::byte> block(count * row_bytes), values(count * hidden),
            scales(count * columns * 4);
        ctx_.copy(block.data(), at(layout_.recv_rows(parity, s, le)), block.size());
        for (uint64_t i = 0; i < count; ++i) {
          std::memcpy(values.data() + i * hidden, block.data() + i * row_bytes, hidden);
          std::memcpy(scales.data() + i * columns * 4, block.data() + i * row_bytes + hidden,
                      columns * 4);
        }
        ctx_.copy(static_cast<std::byte*>(packed_x_.data()) + row * hidden, values.data(),
                  values.size());
        ctx_.copy(static_cast<std::byte*>(packed_scales_.data()) + row * columns * 4, scales.data(),
                  scales.size());
      } else {
        ctx_.copy(static_cast<std::byte*>(packed_x_.data()) + row * row_bytes,
                  at(layout_.recv_rows(parity, s, le)), count * row_bytes);
      }
      ctx_.copy(static_cast<int32_t*>(packed_src_.data()) + row,
                at(layout_.recv_src(parity, s, le)), count * 4);
      range[uint64_t{le} * ranks_ + s] = static_cast<int64_t>(begin << 32 | count);
      recv[uint64_t{le} * ranks_ + s] = static_cast<uint32_t>(count);
      begin += count;
    }
    per_expert[le] = static_cast<int32_t>(begin);
  }
  ctx_.copy(packed_count_.data(), per_expert.data(), per_expert.size() * 4);
  ctx_.copy(packed_range_.data(), range.data(), range.size() * 8);
}

CombineResult LowLatency::combine(const DLTensor& x_tensor, const DLTensor& topk_idx_tensor,
                                  const DLTensor& topk_weights_tensor,
                                  const LowLatencyHandle& handle) {
  const DType dtype = handle.dtype_bits == 32 ? DType::float32 : DType::bfloat16;
  const std::byte* x = nullptr;
  std::vector<int64_t> idx;
  std::vector<float> weights;
  const uint64_t slots = uint64_t{ranks_} * options_.max_tokens_per_rank;
  const float* weights_ptr = nullptr;
  try {
    if (direct_) {
      // The direct path reads the dispatch's receive buffers, which the
      // dispatch after next reuses.
      if (!admission_.configured() || handle.topk == 0 || handle.call + 2 < calls_[0] ||
          handle.call >= calls_[0]) {
        fail(
            "ep::Buffer::low_latency_combine: the handle does not come from one of the last two "
            "low_latency_dispatch calls of this Buffer (their receive buffers are reused after)");
      }
    } else if (!admission_.configured() || !handle.recv_counts ||
               handle.recv_counts->size() != uint64_t{local_experts_} * ranks_ ||
               handle.send_slot.size() != uint64_t{handle.num_tokens} * handle.topk) {
      fail(
          "ep::Buffer::low_latency_combine: the handle does not come from a completed "
          "low_latency_dispatch of this Buffer (with a recv hook: call it first)");
    }
    x = static_cast<const std::byte*>(check_tensor(
        &x_tensor, "ep::Buffer::low_latency_combine: x", dtype,
        {local_experts_, static_cast<int64_t>(slots), handle.hidden}, device_.device_type));
    const int64_t t = handle.num_tokens, k = handle.topk;
    auto* idx_ptr = check_tensor(&topk_idx_tensor, "ep::Buffer::low_latency_combine: topk_idx",
                                 DType::int64, {t, k}, device_.device_type);
    weights_ptr = static_cast<const float*>(
        check_tensor(&topk_weights_tensor, "ep::Buffer::low_latency_combine: topk_weights",
                     DType::float32, {t, k}, device_.device_type));
    if (!direct_) {
      idx.resize(static_cast<size_t>(t * k));
      weights.resize(idx.size());
      ctx_.copy(idx.data(), idx_ptr, idx.size() * 8);
      ctx_.copy(weights.data(), weights_ptr, weights.size() * 4);
      for (size_t i = 0; i < idx.size(); ++i) {
        if ((idx[i] >= 0) != (handle.send_slot[i] >= 0)) {
          fail("ep::Buffer::low_latency_combine: topk_idx[{}][{}] is not the one dispatched", i / k,
               i % k);
        }
      }
    }
  } catch (const Error& e) {
    refuse(1, e.what());
  }
  if (direct_) return direct_->combine(x, weights_ptr, handle, calls_[1]++);
  const uint32_t row_bytes = layout_.row_bytes;
  const uint64_t call = calls_[1]++;
  const uint32_t parity = call & 1;
  // Each (expert, source) block of x goes back to its source.
  const std::vector<uint32_t>& recv = *handle.recv_counts;
  std::vector<std::vector<TransferCmd>> commands(ranks_);
  for (uint32_t s = 0; s < ranks_; ++s) {
    std::vector<uint64_t> mine(local_experts_, 0);
    for (uint32_t le = 0; le < local_experts_; ++le) {
      uint64_t begin = 0;
      for (uint32_t r = 0; r < s; ++r) begin += recv[uint64_t{le} * ranks_ + r];
      const uint64_t count = recv[uint64_t{le} * ranks_ + s];
      mine[le] = count;
      const std::byte* rows = x + (le * slots + begin) * row_bytes;
      if (s == rank_) {
        ctx_.copy(at(layout_.combine_rows(parity, s, le)), rows, count * row_bytes);
      } else {
        ctx_.copy(at(layout_.send_rows(s, le)), rows, count * row_bytes);
        exchange_->add_writes(commands[s], s, layout_.send_rows(s, le),
                              layout_.combine_rows(parity, rank_, le), count * row_bytes);
      }
    }
    if (s == rank_) {
      mine.push_back(call / 2 + 1);
      ctx_.copy(at(layout_.signal(1, parity, rank_)), mine.data(), mine.size() * 8);
    } else {
      signal(commands[s], s, 1, parity, mine);
    }
  }
  exchange_->run(commands, "low_latency_combine");
  const std::vector<uint64_t> back = wait(1, parity, call / 2 + 1, "low_latency_combine");

  // out[t] = sum_k w[t][k] * (the row expert k sent back for t).
  const uint32_t tokens = handle.num_tokens, topk = handle.topk, hidden = handle.hidden;
  std::vector<float> sum(uint64_t{tokens} * hidden, 0.0f), row(hidden);
  std::vector<std::byte> block;
  for (uint32_t d = 0; d < ranks_; ++d) {
    for (uint32_t le = 0; le < local_experts_; ++le) {
      const uint64_t count = back[uint64_t{d} * local_experts_ + le];
      if (count == 0) continue;
      block.resize(count * row_bytes);
      ctx_.copy(block.data(), at(layout_.combine_rows(parity, d, le)), block.size());
      const int64_t expert = int64_t{d} * local_experts_ + le;
      for (uint32_t t = 0; t < tokens; ++t) {
        for (uint32_t k = 0; k < topk; ++k) {
          const uint64_t i = uint64_t{t} * topk + k;
          if (idx[i] != expert) continue;
          const auto j = static_cast<uint64_t>(handle.send_slot[i]);
          if (j >= count)
            fail("ep::Buffer::low_latency_combine: rank {} sent back too few rows", d);
          std::fill(row.begin(), row.end(), 0.0f);
          accumulate(dtype, block.data() + j * row_bytes, hidden, row.data());
          for (uint32_t h = 0; h < hidden; ++h)
            sum[uint64_t{t} * hidden + h] += weights[i] * row[h];
        }
      }
    }
  }
  std::vector<std::byte> out(uint64_t{tokens} * row_bytes);
  store(dtype, sum.data(), sum.size(), out.data());
  ctx_.copy(combined_x_.data(), out.data(), out.size());
  CombineResult result;
  result.combined_x = TensorView(combined_x_.data(), device_,
                                 DLDataType{static_cast<uint8_t>(handle.dtype_code),
                                            static_cast<uint8_t>(handle.dtype_bits), 1},
                                 {static_cast<int64_t>(tokens), hidden});
  return result;
}

}  // namespace courier::ep
