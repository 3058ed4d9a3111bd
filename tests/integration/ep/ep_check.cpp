// ep_check: expert-parallel correctness under courier-run (docs/ep.md), on
// whatever GPU and NIC backend the environment names. Tensors live in the
// Buffer's device memory (ctx.alloc) and are filled and read with ctx.copy,
// so the same checks run on gpu-host and on GPUs.
//
// Cases (every rank, in order):
//   layout          random top-k with masked (-1) entries: counts per rank
//                   and per expert and is_token_in_rank equal a plain
//                   computation
//   layout-errors   an expert index past the end, one below -1, num_experts
//                   not a multiple of the ranks, a wrong dtype, a wrong
//                   output shape: each a clear error naming the argument
//   ht-float32,     high-throughput dispatch then combine, twice: every
//   ht-bfloat16     received row equals its source token, meta (local
//                   experts, weights) right, per-expert counts right; a
//                   cached-handle dispatch padded to num_worst_tokens gives
//                   the same rows and zero padding; combine
//                   of x * (sum of its local weights) gives x * (sum of all
//                   its weights) within the dtype's tolerance; combining
//                   recv_x itself (read in place) gives x once per rank
//                   it went to; recv_x and recv_topk_idx copied out with
//                   copy_result keep their values after later calls
//   ht-bfloat16-300-tokens  the same with 300 tokens (several send batches)
//   ht-empty-rank   rank 0 passes no tokens in tensors without a data
//                   pointer (as torch's empty ones): every rank still gets
//                   the top-k columns
//   ht-fp8          FP8 e4m3 rows with one scale per 128 channels (quantized
//                   by an independent reference codec): values and scales
//                   arrive bit-exact; bfloat16 combine right
//   ll-float32,     low-latency dispatch (once at once, once through the
//   ll-bfloat16     receive hook), then combine: per local expert, the rows
//                   of every rank's tokens that chose it, one block per
//                   rank where its layout range says (the blocks tile the
//                   expert's rows), in token order within it; counts and
//                   source indices right;
//                   combine of the rows as they came gives x * (sum of the
//                   token's weights)
//   ll-fp8          use_fp8: rows quantized by Courier equal an independent
//                   reference quantization (values and scales); bfloat16
//                   weighted combine right
//   ll-bfloat16-3-experts-per-rank, ht-bfloat16-3-experts-per-rank
//                   the same with num_experts not a multiple of 4
//   ht-errors       one rank with more tokens than the buffer holds, or an
//                   expert index out of range: every rank fails, none
//                   hangs, the next call works; ranks with different
//                   configurations at the first call: every rank fails
//   ll-errors       the same for low-latency dispatch (an expert index out
//                   of range), and the next calls work
// --gpu-shapes runs the high-throughput and low-latency cases at the field's
// standard shapes instead (4096 and 128 tokens, hidden 7168, top-8 of 256 and
// 288 experts), without the float32 ones.
// Prints "[PASS|FAIL] <case>: <detail>" and "ep: P passed, F failed
// (transport direct|proxy)"; exits 1 if a case failed.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "courier/context.hpp"
#include "courier/ep.hpp"
#include "tests/support/bfloat16.hpp"
#include "tests/support/check_harness.hpp"

namespace {

using courier::test::CaseLog;
using courier::test::Checks;
using courier::test::expect_error;
using courier::test::from_bf16;
using courier::test::Outcome;
using courier::test::round_bf16;
using courier::test::to_bf16;
constexpr auto kRefusal = courier::test::ErrorKind::refusal;

// A tensor in the Buffer's memory, with its DLPack view.
class Tensor {
 public:
  Tensor(courier::Context& ctx, DLDevice device, DLDataType dtype, std::vector<int64_t> shape)
      : ctx_(ctx), shape_(std::move(shape)) {
    int64_t elements = 1;
    for (int64_t d : shape_) elements *= d;
    bytes_ = static_cast<size_t>(elements) * dtype.bits / 8;
    memory_ = ctx.alloc(bytes_ == 0 ? 1 : bytes_);
    view_.data = memory_.data();
    view_.device = device;
    view_.ndim = static_cast<int>(shape_.size());
    view_.dtype = dtype;
    view_.shape = shape_.data();
    view_.strides = nullptr;
    view_.byte_offset = 0;
  }
  template <class T>
  void set(const std::vector<T>& values) {
    ctx_.copy(memory_.data(), values.data(), values.size() * sizeof(T));
  }
  template <class T>
  std::vector<T> get() const {
    std::vector<T> values(bytes_ / sizeof(T));
    ctx_.copy(values.data(), memory_.data(), bytes_);
    return values;
  }
  DLTensor* view() { return &view_; }

 private:
  courier::Context& ctx_;
  std::vector<int64_t> shape_;
  size_t bytes_ = 0;
  courier::DeviceBuffer memory_;
  DLTensor view_{};
};

constexpr DLDataType kInt64{kDLInt, 64, 1};
constexpr DLDataType kInt32{kDLInt, 32, 1};
constexpr DLDataType kBool{kDLUInt, 8, 1};

// The arguments of a dispatch with top-k of these tensors.
courier::ep::DispatchArgs topk_dispatch(Tensor& x, Tensor& idx, Tensor& weights, Tensor& in_rank,
                                        int experts) {
  courier::ep::DispatchArgs args;
  args.x = x.view();
  args.topk_idx = idx.view();
  args.topk_weights = weights.view();
  args.is_token_in_rank = in_rank.view();
  args.num_experts = experts;
  return args;
}

// Random top-k choices: distinct experts per token, about one in eight -1.
std::vector<int64_t> random_topk(std::mt19937_64& rng, int tokens, int topk, int experts) {
  std::vector<int64_t> idx(static_cast<size_t>(tokens) * topk);
  for (int t = 0; t < tokens; ++t) {
    std::vector<int64_t> chosen;
    while (static_cast<int>(chosen.size()) < topk) {
      int64_t e = static_cast<int64_t>(rng() % experts);
      if (std::find(chosen.begin(), chosen.end(), e) == chosen.end()) chosen.push_back(e);
    }
    for (int k = 0; k < topk; ++k) {
      idx[static_cast<size_t>(t) * topk + k] = rng() % 8 == 0 ? -1 : chosen[k];
    }
  }
  return idx;
}

Outcome check_layout(courier::Context& ctx, courier::ep::Buffer& buffer) {
  const int ranks = buffer.num_ranks();
  const int tokens = 300, topk = 8, experts = 8 * ranks;
  std::mt19937_64 rng(1234 + buffer.rank());
  const std::vector<int64_t> idx = random_topk(rng, tokens, topk, experts);
  const DLDevice dev = buffer.device();
  Tensor topk_idx(ctx, dev, kInt64, {tokens, topk});
  topk_idx.set(idx);
  Tensor per_rank(ctx, dev, kInt32, {ranks});
  Tensor per_expert(ctx, dev, kInt32, {experts});
  Tensor in_rank(ctx, dev, kBool, {tokens, ranks});
  per_rank.set(std::vector<int32_t>(ranks, 77));  // stale values must be overwritten
  buffer.get_dispatch_layout(*topk_idx.view(), experts,
                             {per_rank.view(), per_expert.view(), in_rank.view()});

  std::vector<int32_t> want_rank(ranks, 0), want_expert(experts, 0);
  std::vector<uint8_t> want_in(static_cast<size_t>(tokens) * ranks, 0);
  const int per = experts / ranks;
  for (int t = 0; t < tokens; ++t) {
    for (int k = 0; k < topk; ++k) {
      int64_t e = idx[static_cast<size_t>(t) * topk + k];
      if (e < 0) continue;
      ++want_expert[e];
      uint8_t& in = want_in[static_cast<size_t>(t) * ranks + e / per];
      if (!in) ++want_rank[e / per];
      in = 1;
    }
  }
  Checks c;
  c.expect(per_rank.get<int32_t>() == want_rank, "num_tokens_per_rank differs");
  c.expect(per_expert.get<int32_t>() == want_expert, "num_tokens_per_expert differs");
  c.expect(in_rank.get<uint8_t>() == want_in, "is_token_in_rank differs");
  int sent = 0;
  for (int v : want_rank) sent += v;
  return c.outcome(fmt::format("{} tokens, top-{}, {} experts: {} token-rank pairs, counts exact",
                               tokens, topk, experts, sent));
}

Outcome check_layout_errors(courier::Context& ctx, courier::ep::Buffer& buffer) {
  const int ranks = buffer.num_ranks();
  const int tokens = 16, topk = 4, experts = 4 * ranks;
  const DLDevice dev = buffer.device();
  Tensor topk_idx(ctx, dev, kInt64, {tokens, topk});
  Tensor per_rank(ctx, dev, kInt32, {ranks});
  Tensor per_expert(ctx, dev, kInt32, {experts});
  Tensor in_rank(ctx, dev, kBool, {tokens, ranks});
  courier::ep::DispatchLayout out{per_rank.view(), per_expert.view(), in_rank.view()};
  std::vector<int64_t> idx(tokens * topk, 0);
  Checks c;

  idx[5 * topk + 2] = experts;
  topk_idx.set(idx);
  expect_error(c, "index past the end",
               fmt::format("topk_idx[5][2] = {} is outside [-1, {})", experts, experts),
               [&] { buffer.get_dispatch_layout(*topk_idx.view(), experts, out); });
  idx[5 * topk + 2] = 0;
  idx[9 * topk + 0] = -2;
  topk_idx.set(idx);
  expect_error(c, "index below -1", "topk_idx[9][0] = -2 is outside",
               [&] { buffer.get_dispatch_layout(*topk_idx.view(), experts, out); });
  idx[9 * topk + 0] = 0;
  topk_idx.set(idx);
  if (ranks > 1) {
    expect_error(c, "experts not divisible",
                 fmt::format("num_experts {} is not a positive multiple of the {} ranks",
                             experts + 1, ranks),
                 [&] { buffer.get_dispatch_layout(*topk_idx.view(), experts + 1, out); });
  }
  Tensor idx32(ctx, dev, kInt32, {tokens, topk});
  expect_error(c, "int32 topk_idx", "topk_idx: dtype int32 where int64 is required",
               [&] { buffer.get_dispatch_layout(*idx32.view(), experts, out); });
  Tensor short_rank(ctx, dev, kInt32, {ranks + 1});
  expect_error(
      c, "wrong output shape",
      fmt::format("num_tokens_per_rank: shape [{}] where [{}] is required", ranks + 1, ranks), [&] {
        buffer.get_dispatch_layout(*topk_idx.view(), experts,
                                   {short_rank.view(), per_expert.view(), in_rank.view()});
      });
  // A good call still works after the errors.
  buffer.get_dispatch_layout(*topk_idx.view(), experts, out);
  c.expect(per_expert.get<int32_t>()[0] == tokens * topk, "the call after the errors is wrong");
  return c.outcome("5 bad calls refused with the argument named; the next call works");
}

// The sizes of a case. The defaults are small enough for CPU ranks;
// --gpu-shapes gives the field's standard ones (4096 tokens in
// high-throughput mode, 128 in low-latency mode, hidden 7168, top-8).
struct Shape {
  int max_tokens = 64;
  // Rank r's call c dispatches tokens + 7 (r mod 6) + 3c (small) or
  // tokens - 7 (r mod 4) - 3c: within max_tokens and at least 0 at any
  // number of ranks.
  int tokens = 20;
  bool fewer = false;  // the second form, to stay within max_tokens
  int hidden = 0;
  int topk = 4;
  int experts_per_rank = 4;
  int experts = 0;  // when set: this many in all, instead of experts_per_rank
  // The Buffer's kernels on the GPU runtime's default stream
  // (Buffer::set_stream(nullptr)) instead of its own.
  bool default_stream = false;
  int tokens_of(int rank, int call) const {
    return fewer ? tokens - 7 * (rank % 4) - 3 * call : tokens + 7 * (rank % 6) + 3 * call;
  }
  int experts_of(int ranks) const { return experts > 0 ? experts : experts_per_rank * ranks; }
};

// A low-latency Buffer's options for `shape` on `ranks` ranks, rows of
// `element_bytes` (FP8 and LogFMT rows ride in bfloat16-sized slots).
courier::ep::BufferOptions low_latency_options(const Shape& shape, int ranks,
                                               uint32_t element_bytes) {
  courier::ep::BufferOptions options;
  options.low_latency_mode = true;
  options.max_tokens_per_rank = static_cast<uint32_t>(shape.max_tokens);
  options.hidden = static_cast<uint32_t>(shape.hidden);
  options.element_bytes = element_bytes;
  options.max_topk = static_cast<uint32_t>(shape.topk);
  options.num_experts = static_cast<uint32_t>(shape.experts_of(ranks));
  return options;
}

// The error cases' low-latency Buffer: 16 tokens of hidden 64 in bfloat16,
// top-2 of 2 experts per rank.
courier::ep::BufferOptions small_low_latency_options(int ranks) {
  Shape shape;
  shape.max_tokens = 16;
  shape.hidden = 64;
  shape.topk = 2;
  shape.experts_per_rank = 2;
  return low_latency_options(shape, ranks, 2);
}

// One rank's dispatch inputs, reproducible by every rank.
struct Inputs {
  int tokens = 0;
  std::vector<int64_t> idx;
  std::vector<float> weights;
  std::vector<float> x;  // [tokens, hidden], small integers: exact in bfloat16
};

Inputs inputs_of(const Shape& shape, int rank, int hidden, int topk, int experts, int call) {
  std::mt19937_64 rng(977 * rank + 31 * call + 5);
  Inputs in;
  in.tokens = shape.tokens_of(rank, call);
  in.idx = random_topk(rng, in.tokens, topk, experts);
  for (size_t i = 0; i < in.idx.size(); ++i) in.weights.push_back(0.25f * (1 + rng() % 4));
  for (int t = 0; t < in.tokens; ++t) {
    for (int h = 0; h < hidden; ++h) {
      in.x.push_back(static_cast<float>((rank * 37 + t * 11 + h * 3 + call) % 101 - 50));
    }
  }
  return in;
}

// Rows of floats as the tensor's dtype and back.
std::vector<std::byte> encode(const std::vector<float>& values, bool bf16) {
  std::vector<std::byte> out(values.size() * (bf16 ? 2 : 4));
  for (size_t i = 0; i < values.size(); ++i) {
    if (bf16) {
      uint16_t v = to_bf16(values[i]);
      std::memcpy(out.data() + 2 * i, &v, 2);
    } else {
      std::memcpy(out.data() + 4 * i, &values[i], 4);
    }
  }
  return out;
}
std::vector<float> decode(const std::vector<std::byte>& bytes, bool bf16) {
  std::vector<float> out(bytes.size() / (bf16 ? 2 : 4));
  for (size_t i = 0; i < out.size(); ++i) {
    if (bf16) {
      uint16_t v;
      std::memcpy(&v, bytes.data() + 2 * i, 2);
      out[i] = from_bf16(v);
    } else {
      std::memcpy(&out[i], bytes.data() + 4 * i, 4);
    }
  }
  return out;
}

// One rank's inputs in device memory: x (bfloat16 or float32 rows of
// `hidden`), the top-k expert indices and their weights.
struct DeviceInputs {
  DeviceInputs(courier::Context& ctx, DLDevice dev, const Inputs& in, int hidden, int topk,
               bool bf16)
      : x(ctx, dev, bf16 ? DLDataType{kDLBfloat, 16, 1} : DLDataType{kDLFloat, 32, 1},
          {in.tokens, hidden}),
        idx(ctx, dev, kInt64, {in.tokens, topk}),
        weights(ctx, dev, DLDataType{kDLFloat, 32, 1}, {in.tokens, topk}) {
    x.set(encode(in.x, bf16));
    idx.set(in.idx);
    weights.set(in.weights);
  }
  Tensor x, idx, weights;
};

// How many values of combined_x [tokens, hidden] differ from x(t, h) times the
// sum of token t's weights (masked experts excluded) by more than
// rel * |want| + abs.
int combined_values_off(courier::Context& ctx, const courier::ep::CombineResult& combined,
                        const Inputs& mine, int topk, int hidden, bool bf16, float rel, float abs,
                        const std::function<float(int, int)>& x) {
  std::vector<std::byte> bytes(static_cast<size_t>(mine.tokens) * hidden * (bf16 ? 2 : 4));
  ctx.copy(bytes.data(), combined.combined_x.tensor().data, bytes.size());
  const std::vector<float> out = decode(bytes, bf16);
  int wrong = 0;
  for (int t = 0; t < mine.tokens; ++t) {
    float total = 0;
    for (int k = 0; k < topk; ++k) {
      if (mine.idx[t * topk + k] >= 0) total += mine.weights[t * topk + k];
    }
    for (int h = 0; h < hidden; ++h) {
      const float want = x(t, h) * total;
      if (std::fabs(out[t * hidden + h] - want) > rel * std::fabs(want) + abs) ++wrong;
    }
  }
  return wrong;
}

Outcome check_ht(courier::Context& ctx, const Shape& shape, bool bf16) {
  const int ranks = ctx.world_size(), me = ctx.rank();
  const int hidden = shape.hidden, topk = shape.topk, experts = shape.experts_of(ranks),
            per = experts / ranks;
  courier::ep::BufferOptions options;
  options.max_tokens_per_rank = static_cast<uint32_t>(shape.max_tokens);
  options.hidden = hidden;
  options.element_bytes = bf16 ? 2 : 4;
  options.max_topk = topk;
  courier::ep::Buffer buffer(ctx, options);
  if (shape.default_stream) buffer.set_stream(nullptr);
  const DLDevice dev = buffer.device();
  const DLDataType xtype = bf16 ? DLDataType{kDLBfloat, 16, 1} : DLDataType{kDLFloat, 32, 1};
  Checks c;
  uint64_t rows_checked = 0;
  // Each call's handle and expert output, combined once more at the end.
  struct Kept {
    courier::ep::DispatchHandle handle;
    std::unique_ptr<Tensor> y;
    Inputs mine;
    // recv_x and recv_topk_idx copied out (copy_result) at the dispatch,
    // and what they must hold after the Buffer reused their views.
    std::unique_ptr<Tensor> owned_x, owned_idx;
    std::vector<float> want_x;
    std::vector<int64_t> want_idx;
  };
  std::vector<Kept> kept;
  for (int call = 0; call < 2; ++call) {  // twice: both halves of the double buffer
    const Inputs mine = inputs_of(shape, me, hidden, topk, experts, call);
    DeviceInputs inputs(ctx, dev, mine, hidden, topk, bf16);
    Tensor &x = inputs.x, &idx = inputs.idx, &weights = inputs.weights;
    Tensor per_rank(ctx, dev, kInt32, {ranks});
    Tensor per_expert(ctx, dev, kInt32, {experts});
    Tensor in_rank(ctx, dev, kBool, {mine.tokens, ranks});
    buffer.get_dispatch_layout(*idx.view(), experts,
                               {per_rank.view(), per_expert.view(), in_rank.view()});
    courier::ep::DispatchArgs args = topk_dispatch(x, idx, weights, in_rank, experts);
    courier::ep::DispatchResult got = buffer.dispatch(args);
    // x is the caller's again once dispatch returns (a proxy path that
    // sends it in place has waited for its WRITEs): the peers must not see
    // this.
    const std::vector<float> scribble(mine.x.size(), -7.0f);
    x.set(encode(scribble, bf16));

    // What should have arrived: each rank's tokens with an expert here, in order.
    std::vector<float> want_x, want_w, local_weight_sum;
    std::vector<int64_t> want_idx;
    std::vector<int32_t> want_per_expert(per, 0);
    for (int s = 0; s < ranks; ++s) {
      const Inputs in = inputs_of(shape, s, hidden, topk, experts, call);
      for (int t = 0; t < in.tokens; ++t) {
        bool here = false;
        for (int k = 0; k < topk; ++k)
          here |= in.idx[t * topk + k] >= 0 && in.idx[t * topk + k] / per == me;
        if (!here) continue;
        want_x.insert(want_x.end(), in.x.begin() + t * hidden, in.x.begin() + (t + 1) * hidden);
        float sum = 0;
        for (int k = 0; k < topk; ++k) {
          const int64_t e = in.idx[t * topk + k];
          const bool local = e >= 0 && e / per == me;
          want_idx.push_back(local ? e - int64_t{me} * per : -1);
          want_w.push_back(local ? in.weights[t * topk + k] : 0.0f);  // as DeepEP's
          if (local) {
            sum += in.weights[t * topk + k];
            ++want_per_expert[e - int64_t{me} * per];
          }
        }
        local_weight_sum.push_back(sum);
      }
    }
    const int64_t received = got.recv_x.tensor().shape[0];
    c.expect(received == static_cast<int64_t>(local_weight_sum.size()),
             fmt::format("call {}: received {} rows, expected {}", call, received,
                         local_weight_sum.size()));
    if (received != static_cast<int64_t>(local_weight_sum.size())) break;
    std::vector<std::byte> recv_bytes(want_x.size() * (bf16 ? 2 : 4));
    ctx.copy(recv_bytes.data(), got.recv_x.tensor().data, recv_bytes.size());
    c.expect(decode(recv_bytes, bf16) == want_x,
             fmt::format("call {}: received rows differ", call));
    std::vector<int64_t> r_idx(want_idx.size());
    ctx.copy(r_idx.data(), got.recv_topk_idx.tensor().data, r_idx.size() * 8);
    c.expect(r_idx == want_idx, fmt::format("call {}: recv_topk_idx differs", call));
    std::vector<float> r_w(want_w.size());
    ctx.copy(r_w.data(), got.recv_topk_weights.tensor().data, r_w.size() * 4);
    c.expect(r_w == want_w, fmt::format("call {}: recv_topk_weights differs", call));
    c.expect(got.num_recv_tokens_per_expert == want_per_expert,
             fmt::format("call {}: tokens per local expert differ", call));
    rows_checked += static_cast<uint64_t>(received);
    // The caller's copies of the results, on the Buffer's stream: they
    // outlive the views (checked after the next call reused them).
    auto owned_x =
        std::make_unique<Tensor>(ctx, dev, xtype, std::vector<int64_t>{received, hidden});
    auto owned_idx =
        std::make_unique<Tensor>(ctx, dev, kInt64, std::vector<int64_t>{received, topk});
    buffer.copy_result(got.recv_x.tensor(), *owned_x->view());
    buffer.copy_result(got.recv_topk_idx.tensor(), *owned_idx->view());
    expect_error(c, fmt::format("call {}: copy_result into a tensor of another shape", call),
                 "must match",
                 [&] { buffer.copy_result(got.recv_x.tensor(), *owned_idx->view()); });
    // (No synchronize here: the copies must be ordered before the next
    // dispatch that reuses the views, which the checks at the end see.)

    // The same tokens again through the cached handle, rows padded to a
    // fixed count: the same rows, zeros after them, no topk columns.
    const int64_t worst = int64_t{ranks} * shape.max_tokens;
    x.set(encode(mine.x, bf16));
    courier::ep::DispatchArgs cached_args;
    cached_args.x = x.view();
    cached_args.cached_handle = &got.handle;
    cached_args.num_worst_tokens = static_cast<int>(worst);
    courier::ep::DispatchResult again = buffer.dispatch(cached_args);
    c.expect(again.recv_x.tensor().shape[0] == worst && again.recv_topk_idx.tensor().shape[1] == 0,
             fmt::format("call {}: the padded cached dispatch has shape [{}, {}]", call,
                         again.recv_x.tensor().shape[0], again.recv_topk_idx.tensor().shape[1]));
    std::vector<std::byte> again_bytes(static_cast<size_t>(worst) * hidden * (bf16 ? 2 : 4));
    ctx.copy(again_bytes.data(), again.recv_x.tensor().data, again_bytes.size());
    std::vector<float> again_rows = decode(again_bytes, bf16);
    c.expect(std::equal(want_x.begin(), want_x.end(), again_rows.begin()),
             fmt::format("call {}: cached dispatch rows differ from uncached", call));
    c.expect(std::all_of(again_rows.begin() + static_cast<int64_t>(want_x.size()), again_rows.end(),
                         [](float v) { return v == 0.0f; }),
             fmt::format("call {}: padding rows are not zero", call));

    // Combine x * (sum of its local weights): the source gets x * (sum of all).
    std::vector<float> y(want_x.size());
    for (size_t i = 0; i < y.size(); ++i) y[i] = want_x[i] * local_weight_sum[i / hidden];
    auto y_tensor =
        std::make_unique<Tensor>(ctx, dev, xtype, std::vector<int64_t>{received, hidden});
    y_tensor->set(encode(y, bf16));
    courier::ep::CombineResult combined = buffer.combine(*y_tensor->view(), got.handle);
    y_tensor->set(encode(std::vector<float>(y.size(), -7.0f), bf16));  // as x above
    const int wrong = combined_values_off(ctx, combined, mine, topk, hidden, bf16,
                                          bf16 ? 1e-2f : 1e-5f, bf16 ? 1e-2f : 1e-6f,
                                          [&](int t, int h) { return mine.x[t * hidden + h]; });
    c.expect(wrong == 0, fmt::format("call {}: {} combined values off", call, wrong));

    // recv_x itself combined (read where it landed, nothing packed): each
    // token comes back once per rank it went to.
    std::vector<int> ranks_of(static_cast<size_t>(mine.tokens), 0);
    for (int t = 0; t < mine.tokens; ++t) {
      std::vector<bool> seen(static_cast<size_t>(ranks), false);
      for (int k = 0; k < topk; ++k) {
        const int64_t e = mine.idx[t * topk + k];
        if (e >= 0 && !seen[static_cast<size_t>(e / per)]) {
          seen[static_cast<size_t>(e / per)] = true;
          ++ranks_of[static_cast<size_t>(t)];
        }
      }
    }
    courier::ep::CombineResult in_place = buffer.combine(got.recv_x.tensor(), got.handle);
    // (combined_values_off scales by the token's weights: divided out here.)
    const int wrong_in_place = combined_values_off(
        ctx, in_place, mine, topk, hidden, bf16, bf16 ? 1e-2f : 1e-5f, bf16 ? 1e-2f : 1e-6f,
        [&](int t, int h) {
          float total = 0;
          for (int k = 0; k < topk; ++k) {
            if (mine.idx[t * topk + k] >= 0) total += mine.weights[t * topk + k];
          }
          return total == 0 ? 0.0f
                            : mine.x[t * hidden + h] * static_cast<float>(ranks_of[t]) / total;
        });
    c.expect(wrong_in_place == 0,
             fmt::format("call {}: {} values off combining recv_x in place", call, wrong_in_place));
    y_tensor->set(encode(y, bf16));
    kept.push_back({got.handle, std::move(y_tensor), mine, std::move(owned_x), std::move(owned_idx),
                    want_x, want_idx});
  }
  // Handles of earlier dispatches, as with two micro-batches in flight
  // (dispatch A, dispatch B, combine A, combine B): the plan on the device
  // is then another dispatch's.
  buffer.synchronize();  // the copies of copy_result, read below
  for (size_t k = 0; k < kept.size(); ++k) {
    const Kept& old = kept[k];
    courier::ep::CombineResult combined = buffer.combine(*old.y->view(), old.handle);
    const int wrong = combined_values_off(ctx, combined, old.mine, topk, hidden, bf16,
                                          bf16 ? 1e-2f : 1e-5f, bf16 ? 1e-2f : 1e-6f,
                                          [&](int t, int h) { return old.mine.x[t * hidden + h]; });
    c.expect(wrong == 0, fmt::format("call {} combined again after call {}: {} values off", k,
                                     kept.size() - 1, wrong));
    c.expect(
        decode(old.owned_x->get<std::byte>(), bf16) == old.want_x &&
            old.owned_idx->get<int64_t>() == old.want_idx,
        fmt::format("call {}: the results copied out (copy_result) changed after later calls", k));
  }
  return c.outcome(
      fmt::format("2 dispatch+combine calls, {} rows checked, cached-handle padded "
                  "dispatch equal to uncached, results copied out kept, combine (also of "
                  "recv_x in place, and with the older handle after the newer) within {}",
                  rows_checked, bf16 ? "1e-2 relative" : "1e-5 relative"));
}

// A rank without tokens passes tensors with no data pointer (as torch's
// empty tensors are): it still receives the other ranks' rows with their
// top-k columns.
Outcome check_ht_empty_rank(courier::Context& ctx) {
  const int ranks = ctx.world_size(), me = ctx.rank();
  const int hidden = 128, topk = 2, experts = 4 * ranks, per = experts / ranks;
  courier::ep::BufferOptions options;
  options.max_tokens_per_rank = 64;
  options.hidden = hidden;
  options.element_bytes = 4;
  options.max_topk = topk;
  courier::ep::Buffer buffer(ctx, options);
  const DLDevice dev = buffer.device();
  Shape shape;
  shape.tokens = 5;
  shape.topk = topk;
  shape.hidden = hidden;
  const Inputs mine = me == 0 ? Inputs{} : inputs_of(shape, me, hidden, topk, experts, 0);
  DeviceInputs inputs(ctx, dev, mine, hidden, topk, false);
  Tensor per_rank(ctx, dev, kInt32, {ranks});
  Tensor per_expert(ctx, dev, kInt32, {experts});
  Tensor in_rank(ctx, dev, kBool, {mine.tokens, ranks});
  if (me == 0) {
    for (Tensor* t : {&inputs.x, &inputs.idx, &inputs.weights, &in_rank}) t->view()->data = nullptr;
  }
  buffer.get_dispatch_layout(*inputs.idx.view(), experts,
                             {per_rank.view(), per_expert.view(), in_rank.view()});
  courier::ep::DispatchArgs args =
      topk_dispatch(inputs.x, inputs.idx, inputs.weights, in_rank, experts);
  const courier::ep::DispatchResult got = buffer.dispatch(args);
  int64_t want = 0;
  for (int s = 1; s < ranks; ++s) {
    const Inputs in = inputs_of(shape, s, hidden, topk, experts, 0);
    for (int t = 0; t < in.tokens; ++t) {
      bool here = false;
      for (int k = 0; k < topk; ++k) {
        const int64_t e = in.idx[t * topk + k];
        here |= e >= 0 && e / per == me;
      }
      want += here ? 1 : 0;
    }
  }
  Checks c;
  const DLTensor& idx = got.recv_topk_idx.tensor();
  c.expect(got.recv_x.tensor().shape[0] == want,
           fmt::format("received {} rows, expected {}", got.recv_x.tensor().shape[0], want));
  c.expect(idx.ndim == 2 && idx.shape[1] == topk,
           fmt::format("recv_topk_idx has {} columns, expected {} (rank 0 passed no tokens)",
                       idx.ndim == 2 ? idx.shape[1] : -1, topk));
  return c.outcome(
      fmt::format("rank 0 without tokens (no data pointers); {} rows and top-{} "
                  "columns received here",
                  want, topk));
}

// A reference e4m3fn codec, independent of Courier's: the nearest of the
// 254 finite values (ties to the even code), saturating at +-448.
float e4m3_value(uint8_t code) {
  const float sign = (code & 0x80) != 0 ? -1.0f : 1.0f;
  const int e = (code >> 3) & 0xF, m = code & 7;
  return e == 0 ? sign * std::ldexp(static_cast<float>(m), -9)
                : sign * std::ldexp(1.0f + m / 8.0f, e - 7);
}
uint8_t nearest_e4m3_code(float v) {
  uint8_t best = 0;
  float best_err = INFINITY;
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7F) == 0x7F) continue;  // NaN
    const float err = std::fabs(e4m3_value(static_cast<uint8_t>(c)) - v);
    if (err < best_err || (err == best_err && (c & 1) == 0 && (best & 1) == 1)) {
      best = static_cast<uint8_t>(c);
      best_err = err;
    }
  }
  return best;
}
// The search above, remembered per value: the test rows hold few distinct
// values, and the large shapes quantize millions of them.
uint8_t e4m3_code(float v) {
  static std::unordered_map<float, uint8_t> known;
  auto [at, inserted] = known.try_emplace(v, 0);
  if (inserted) at->second = nearest_e4m3_code(v);
  return at->second;
}
// Quantizes rows of `hidden` (a multiple of 128) to codes and scales.
void quantize(const std::vector<float>& x, int hidden, std::vector<uint8_t>* codes,
              std::vector<float>* scales) {
  for (size_t row = 0; row < x.size() / hidden; ++row) {
    for (int b = 0; b < hidden / 128; ++b) {
      float amax = 0;
      for (int i = 0; i < 128; ++i) amax = std::max(amax, std::fabs(x[row * hidden + b * 128 + i]));
      const float scale = amax > 0 ? amax / 448.0f : 1.0f;
      scales->push_back(scale);
      for (int i = 0; i < 128; ++i)
        codes->push_back(e4m3_code(x[row * hidden + b * 128 + i] / scale));
    }
  }
}

Outcome check_ht_fp8(courier::Context& ctx, const Shape& shape) {
  const int ranks = ctx.world_size(), me = ctx.rank();
  const int hidden = shape.hidden, topk = shape.topk, experts = shape.experts_of(ranks),
            per = experts / ranks;
  courier::ep::BufferOptions options;
  options.max_tokens_per_rank = static_cast<uint32_t>(shape.max_tokens);
  options.hidden = hidden;
  options.element_bytes = 2;  // FP8 rows ride in bfloat16-sized slots
  options.max_topk = topk;
  courier::ep::Buffer buffer(ctx, options);
  const DLDevice dev = buffer.device();
  const Inputs mine = inputs_of(shape, me, hidden, topk, experts, 0);
  std::vector<uint8_t> codes;
  std::vector<float> scales;
  quantize(mine.x, hidden, &codes, &scales);
  Tensor x(ctx, dev, DLDataType{kDLFloat, 8, 1}, {mine.tokens, hidden});
  x.set(codes);
  Tensor x_scales(ctx, dev, DLDataType{kDLFloat, 32, 1}, {mine.tokens, hidden / 128});
  x_scales.set(scales);
  Tensor idx(ctx, dev, kInt64, {mine.tokens, topk});
  idx.set(mine.idx);
  Tensor weights(ctx, dev, DLDataType{kDLFloat, 32, 1}, {mine.tokens, topk});
  weights.set(mine.weights);
  Tensor per_rank(ctx, dev, kInt32, {ranks});
  Tensor per_expert(ctx, dev, kInt32, {experts});
  Tensor in_rank(ctx, dev, kBool, {mine.tokens, ranks});
  buffer.get_dispatch_layout(*idx.view(), experts,
                             {per_rank.view(), per_expert.view(), in_rank.view()});
  courier::ep::DispatchArgs args = topk_dispatch(x, idx, weights, in_rank, experts);
  args.x_scales = x_scales.view();
  courier::ep::DispatchResult got = buffer.dispatch(args);

  // Expected: each source's codes and scales for its tokens with an expert here.
  std::vector<uint8_t> want_codes;
  std::vector<float> want_scales, dequantized, local_sum;
  for (int s = 0; s < ranks; ++s) {
    const Inputs in = inputs_of(shape, s, hidden, topk, experts, 0);
    std::vector<uint8_t> c;
    std::vector<float> sc;
    quantize(in.x, hidden, &c, &sc);
    for (int t = 0; t < in.tokens; ++t) {
      float sum = 0;
      bool here = false;
      for (int k = 0; k < topk; ++k) {
        const int64_t e = in.idx[t * topk + k];
        if (e >= 0 && e / per == me) {
          here = true;
          sum += in.weights[t * topk + k];
        }
      }
      if (!here) continue;
      want_codes.insert(want_codes.end(), c.begin() + t * hidden, c.begin() + (t + 1) * hidden);
      want_scales.insert(want_scales.end(), sc.begin() + t * (hidden / 128),
                         sc.begin() + (t + 1) * (hidden / 128));
      for (int h = 0; h < hidden; ++h) {
        dequantized.push_back(e4m3_value(c[t * hidden + h]) * sc[t * (hidden / 128) + h / 128]);
      }
      local_sum.push_back(sum);
    }
  }
  Checks c;
  const int64_t received = got.recv_x.tensor().shape[0];
  c.expect(received == static_cast<int64_t>(local_sum.size()),
           fmt::format("received {} rows, expected {}", received, local_sum.size()));
  if (received != static_cast<int64_t>(local_sum.size())) return c.outcome("");
  std::vector<uint8_t> r_codes(want_codes.size());
  std::vector<float> r_scales(want_scales.size());
  ctx.copy(r_codes.data(), got.recv_x.tensor().data, r_codes.size());
  ctx.copy(r_scales.data(), got.recv_x_scales.tensor().data, r_scales.size() * 4);
  c.expect(r_codes == want_codes, "received FP8 values differ");
  c.expect(r_scales == want_scales, "received scales differ");
  double worst = 0;
  for (size_t i = 0; i < dequantized.size(); ++i) {
    const float v = e4m3_value(r_codes[i]) * r_scales[i / 128];
    worst = std::max(worst, std::fabs(static_cast<double>(v) - dequantized[i]) /
                                (std::fabs(dequantized[i]) + 1e-6));
  }
  c.expect(worst <= 1e-3, fmt::format("dequantized rows off by {} relative", worst));

  // Combine in bfloat16: x_dequantized * local weight sum comes back summed.
  std::vector<float> y(dequantized.size());
  for (size_t i = 0; i < y.size(); ++i) y[i] = dequantized[i] * local_sum[i / hidden];
  Tensor y_tensor(ctx, dev, DLDataType{kDLBfloat, 16, 1}, {received, hidden});
  std::vector<uint16_t> y_bf16(y.size());
  for (size_t i = 0; i < y.size(); ++i) y_bf16[i] = to_bf16(y[i]);
  y_tensor.set(y_bf16);
  courier::ep::CombineResult combined = buffer.combine(*y_tensor.view(), got.handle);
  const int wrong =
      combined_values_off(ctx, combined, mine, topk, hidden, true, 2e-2f, 1e-2f, [&](int t, int h) {
        return e4m3_value(codes[t * hidden + h]) * scales[t * (hidden / 128) + h / 128];
      });
  c.expect(wrong == 0, fmt::format("{} combined values off", wrong));
  return c.outcome(
      fmt::format("{} FP8 rows and their scales arrived bit-exact (dequantized within "
                  "1e-3: worst {:.1e}); bfloat16 combine right",
                  received, worst));
}

Outcome check_ll(courier::Context& ctx, const Shape& shape, bool bf16) {
  const int ranks = ctx.world_size(), me = ctx.rank();
  const int hidden = shape.hidden, topk = shape.topk, experts = shape.experts_of(ranks),
            per = experts / ranks, max_tokens = shape.max_tokens;
  courier::ep::Buffer buffer(ctx, low_latency_options(shape, ranks, bf16 ? 2 : 4));
  if (shape.default_stream) buffer.set_stream(nullptr);
  const DLDevice dev = buffer.device();
  const DLDataType xtype = bf16 ? DLDataType{kDLBfloat, 16, 1} : DLDataType{kDLFloat, 32, 1};
  const int64_t slots = int64_t{ranks} * max_tokens;
  Checks c;
  uint64_t rows_checked = 0;
  for (int call = 0; call < 2; ++call) {
    const Inputs mine = inputs_of(shape, me, hidden, topk, experts, call);
    DeviceInputs inputs(ctx, dev, mine, hidden, topk, bf16);
    Tensor &x = inputs.x, &idx = inputs.idx, &weights = inputs.weights;
    courier::ep::LowLatencyDispatchArgs args;
    args.x = x.view();
    args.topk_idx = idx.view();
    args.return_recv_hook = call == 1;
    courier::ep::LowLatencyDispatchResult got = buffer.low_latency_dispatch(args);
    if (got.recv_hook) got.recv_hook();
    // On the caller's stream the calls do not wait: the outputs are read
    // after synchronize().
    if (shape.default_stream) buffer.synchronize();
    c.expect(args.return_recv_hook == static_cast<bool>(got.recv_hook),
             fmt::format("call {}: recv_hook set {} times wrongly", call, 1));

    std::vector<std::byte> packed_bytes(static_cast<size_t>(per * slots * hidden) * (bf16 ? 2 : 4));
    ctx.copy(packed_bytes.data(), got.packed_recv_x.tensor().data, packed_bytes.size());
    const std::vector<float> packed = decode(packed_bytes, bf16);
    std::vector<int32_t> count(per), src(static_cast<size_t>(per * slots));
    std::vector<int64_t> range(static_cast<size_t>(per * ranks));
    ctx.copy(count.data(), got.packed_recv_count.tensor().data, count.size() * 4);
    ctx.copy(src.data(), got.packed_recv_src_info.tensor().data, src.size() * 4);
    ctx.copy(range.data(), got.packed_recv_layout_range.tensor().data, range.size() * 8);
    std::vector<Inputs> all;
    for (int s = 0; s < ranks; ++s) all.push_back(inputs_of(shape, s, hidden, topk, experts, call));
    for (int le = 0; le < per; ++le) {
      // Each rank's rows are one block, in token order, where its layout
      // range says (the blocks' order is the backend's: DeepEP's is that of
      // arrival); together the blocks fill rows [0, count) exactly.
      int64_t rows = 0;
      std::vector<std::pair<int64_t, int64_t>> blocks;  // (begin, rows) per rank
      for (int s = 0; s < ranks; ++s) {
        const Inputs& in = all[s];
        const int64_t begin = range[le * ranks + s] >> 32;
        int64_t row = begin;
        for (int t = 0; t < in.tokens; ++t) {
          bool chose = false;
          for (int k = 0; k < topk; ++k) chose |= in.idx[t * topk + k] == me * per + le;
          if (!chose) continue;
          if (row >= slots) break;  // (the range check below fails)
          const float* want = in.x.data() + t * hidden;
          const float* have = packed.data() + (le * slots + row) * hidden;
          c.expect(std::equal(want, want + hidden, have),
                   fmt::format("call {}: expert {} row {} differs", call, le, row));
          c.expect(src[le * slots + row] == t,
                   fmt::format("call {}: expert {} row {} names source token {}, not {}", call, le,
                               row, src[le * slots + row], t));
          ++row;
        }
        c.expect((range[le * ranks + s] & 0xffffffff) == row - begin,
                 fmt::format("call {}: layout range of expert {} from rank {} counts {} rows, "
                             "expected {}",
                             call, le, s, range[le * ranks + s] & 0xffffffff, row - begin));
        blocks.emplace_back(begin, row - begin);
        rows += row - begin;
      }
      std::sort(blocks.begin(), blocks.end());
      int64_t end = 0;
      for (const auto& [begin, n] : blocks) {
        c.expect(n == 0 || begin == end,
                 fmt::format("call {}: expert {}'s blocks of rows do not follow each other (one "
                             "begins at row {} after row {})",
                             call, le, begin, end));
        end += n;
      }
      c.expect(count[le] == rows, fmt::format("call {}: expert {} counts {} rows, expected {}",
                                              call, le, count[le], rows));
      rows_checked += static_cast<uint64_t>(rows);
    }

    // Identity experts: send the rows back as they came.
    Tensor back(ctx, dev, xtype, {per, slots, hidden});
    back.set(packed_bytes);
    courier::ep::CombineResult combined =
        buffer.low_latency_combine(*back.view(), *idx.view(), *weights.view(), got.handle);
    if (shape.default_stream) buffer.synchronize();
    const int wrong = combined_values_off(ctx, combined, mine, topk, hidden, bf16,
                                          bf16 ? 1e-2f : 1e-5f, bf16 ? 1e-2f : 1e-6f,
                                          [&](int t, int h) { return mine.x[t * hidden + h]; });
    c.expect(wrong == 0, fmt::format("call {}: {} combined values off", call, wrong));
  }
  return c.outcome(
      fmt::format("2 calls (one through the recv hook), {} expert rows checked, "
                  "weighted combine within {}",
                  rows_checked, bf16 ? "1e-2 relative" : "1e-5 relative"));
}

// wait_cost_stats (DeepEP's dispatch/combine_wait_recv_cost_stats): on the
// proxy path every entry grows by a call's wait for that rank; the last rank
// starts each call 50 ms late, so on every other rank its entry ends largest
// (only the order between ranks is checked, not a time). The direct path
// refuses the argument, naming it.
Outcome check_ll_wait_cost(courier::Context& ctx, const Shape& shape) {
  const int ranks = ctx.world_size(), me = ctx.rank(), late = ranks - 1;
  const int hidden = shape.hidden, topk = shape.topk, experts = shape.experts_of(ranks),
            per = experts / ranks, max_tokens = shape.max_tokens;
  courier::ep::Buffer buffer(ctx, low_latency_options(shape, ranks, 2));
  const DLDevice dev = buffer.device();
  Checks c;
  const Inputs mine = inputs_of(shape, me, hidden, topk, experts, 0);
  DeviceInputs inputs(ctx, dev, mine, hidden, topk, true);
  const DLDataType i64{kDLInt, 64, 1};
  Tensor dispatch_cost(ctx, dev, i64, {ranks}), combine_cost(ctx, dev, i64, {ranks});
  dispatch_cost.set(std::vector<int64_t>(static_cast<size_t>(ranks), 0));
  combine_cost.set(std::vector<int64_t>(static_cast<size_t>(ranks), 0));
  courier::ep::LowLatencyDispatchArgs args;
  args.x = inputs.x.view();
  args.topk_idx = inputs.idx.view();
  args.wait_cost_stats = dispatch_cost.view();
  if (std::string(buffer.transport()) == "direct") {
    expect_error(
        c, "wait_cost_stats on the direct path",
        "wait_cost_stats is measured on the proxy path only",
        [&] { buffer.low_latency_dispatch(args); }, kRefusal);
    return c.outcome("refused on the direct path, naming the argument");
  }
  auto pause_if_late = [&] {
    ctx.barrier();
    if (me == late && ranks > 1) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  };
  const int64_t slots = int64_t{ranks} * max_tokens;
  for (int call = 0; call < 2; ++call) {
    pause_if_late();
    args.return_recv_hook = call == 1;
    courier::ep::LowLatencyDispatchResult got = buffer.low_latency_dispatch(args);
    if (got.recv_hook) got.recv_hook();
    Tensor back(ctx, dev, DLDataType{kDLBfloat, 16, 1}, {per, slots, hidden});
    std::vector<std::byte> rows(static_cast<size_t>(per * slots * hidden) * 2);
    ctx.copy(rows.data(), got.packed_recv_x.tensor().data, rows.size());
    back.set(rows);
    courier::ep::LowLatencyCombineOptions options;
    options.wait_cost_stats = combine_cost.view();
    pause_if_late();
    buffer.low_latency_combine(*back.view(), *inputs.idx.view(), *inputs.weights.view(), got.handle,
                               options);
  }
  for (auto [name, tensor] : {std::pair{"dispatch", &dispatch_cost}, {"combine", &combine_cost}}) {
    const std::vector<int64_t> cost = tensor->get<int64_t>();
    for (int r = 0; r < ranks; ++r) {
      c.expect(cost[r] >= 0,
               fmt::format("{} wait cost of rank {} is negative: {}", name, r, cost[r]));
      if (me != late && r != late) {
        c.expect(cost[r] < cost[late],
                 fmt::format("{}: rank {} came 50 ms late twice, yet its wait cost {} ns is not "
                             "above rank {}'s {} ns",
                             name, late, cost[late], r, cost[r]));
      }
    }
  }
  return c.outcome(fmt::format("2 dispatches and combines; the late rank's cost is the largest{}",
                               ranks > 1 ? "" : " (one rank: not compared)"));
}

Outcome check_ll_fp8(courier::Context& ctx, const Shape& shape) {
  const int ranks = ctx.world_size(), me = ctx.rank();
  const int hidden = shape.hidden, topk = shape.topk, experts = shape.experts_of(ranks),
            per = experts / ranks, max_tokens = shape.max_tokens;
  const int columns = hidden / 128;
  courier::ep::Buffer buffer(ctx, low_latency_options(shape, ranks, 2));
  const DLDevice dev = buffer.device();
  const int64_t slots = int64_t{ranks} * max_tokens;
  const Inputs mine = inputs_of(shape, me, hidden, topk, experts, 0);
  DeviceInputs inputs(ctx, dev, mine, hidden, topk, true);
  Tensor &x = inputs.x, &idx = inputs.idx, &weights = inputs.weights;
  courier::ep::LowLatencyDispatchArgs args;
  args.x = x.view();
  args.topk_idx = idx.view();
  args.use_fp8 = true;
  courier::ep::LowLatencyDispatchResult got = buffer.low_latency_dispatch(args);
  Checks c;
  c.expect(
      got.packed_recv_x.tensor().dtype.bits == 8 && got.packed_recv_x_scales.tensor().ndim == 3,
      "packed_recv_x is not FP8 with scales");
  std::vector<uint8_t> codes(static_cast<size_t>(per * slots * hidden));
  std::vector<float> scales(static_cast<size_t>(per * slots * columns));
  ctx.copy(codes.data(), got.packed_recv_x.tensor().data, codes.size());
  ctx.copy(scales.data(), got.packed_recv_x_scales.tensor().data, scales.size() * 4);
  std::vector<int64_t> range(static_cast<size_t>(per * ranks));
  ctx.copy(range.data(), got.packed_recv_layout_range.tensor().data, range.size() * 8);
  std::vector<float> dequantized(static_cast<size_t>(per * slots * hidden), 0.0f);
  uint64_t rows = 0;
  std::vector<Inputs> all;
  std::vector<std::vector<uint8_t>> all_codes(ranks);
  std::vector<std::vector<float>> all_scales(ranks);
  for (int s = 0; s < ranks; ++s) {
    all.push_back(inputs_of(shape, s, hidden, topk, experts, 0));
    quantize(all[s].x, hidden, &all_codes[s], &all_scales[s]);
  }
  for (int le = 0; le < per; ++le) {
    for (int s = 0; s < ranks; ++s) {
      const Inputs& in = all[s];
      const std::vector<uint8_t>& want_codes = all_codes[s];
      const std::vector<float>& want_scales = all_scales[s];
      // Rank s's rows where its layout range says (check_ll checks the ranges).
      int64_t row = range[le * ranks + s] >> 32;
      for (int t = 0; t < in.tokens; ++t) {
        bool chose = false;
        for (int k = 0; k < topk; ++k) chose |= in.idx[t * topk + k] == me * per + le;
        if (!chose) continue;
        if (row >= slots) break;
        c.expect(row < (range[le * ranks + s] >> 32) + (range[le * ranks + s] & 0xffffffff),
                 fmt::format("expert {} row {}: past rank {}'s layout range", le, row, s));
        const size_t at = static_cast<size_t>((le * slots + row) * hidden);
        c.expect(std::equal(want_codes.begin() + t * hidden, want_codes.begin() + (t + 1) * hidden,
                            codes.begin() + static_cast<int64_t>(at)),
                 fmt::format("expert {} row {}: FP8 values differ from the reference", le, row));
        c.expect(
            std::equal(want_scales.begin() + t * columns, want_scales.begin() + (t + 1) * columns,
                       scales.begin() + static_cast<int64_t>(at / 128)),
            fmt::format("expert {} row {}: scales differ from the reference", le, row));
        for (int h = 0; h < hidden; ++h) {
          dequantized[at + h] = e4m3_value(codes[at + h]) * scales[(at + h) / 128];
        }
        ++row;
        ++rows;
      }
    }
  }
  // Identity experts in bfloat16: the weighted sum of the dequantized rows.
  Tensor back(ctx, dev, DLDataType{kDLBfloat, 16, 1}, {per, slots, hidden});
  back.set(encode(dequantized, true));
  courier::ep::CombineResult combined =
      buffer.low_latency_combine(*back.view(), *idx.view(), *weights.view(), got.handle);
  std::vector<uint8_t> my_codes;
  std::vector<float> my_scales;
  quantize(mine.x, hidden, &my_codes, &my_scales);
  const int wrong =
      combined_values_off(ctx, combined, mine, topk, hidden, true, 2e-2f, 1e-2f, [&](int t, int h) {
        return e4m3_value(my_codes[t * hidden + h]) * my_scales[t * columns + h / 128];
      });
  c.expect(wrong == 0, fmt::format("{} combined values off", wrong));
  return c.outcome(
      fmt::format("{} expert rows quantized exactly as the reference codec, scales "
                  "equal; bfloat16 weighted combine right",
                  rows));
}

// on_stream: the Buffer on the caller's stream, where a direct-path
// dispatch still waits for its counts (so a refusal or a bad index fails
// every rank at the call, as above) but a combine does not: a refused
// combine breaks the Buffer on every rank (found at the next call, or at
// once on the refusing rank); the proxy path's combine of such a handle
// waits, so its refusal is the plain one.
Outcome check_ht_errors(courier::Context& ctx, bool on_stream = false) {
  const int ranks = ctx.world_size(), me = ctx.rank();
  const int hidden = 32, topk = 2, experts = 2 * ranks;
  Checks c;
  courier::ep::BufferOptions options;
  options.max_tokens_per_rank = 16;
  options.hidden = hidden;
  options.element_bytes = 4;
  options.max_topk = topk;
  auto run = [&](courier::ep::Buffer& buffer, int tokens, int k, int64_t expert = 0) {
    const DLDevice dev = buffer.device();
    Tensor x(ctx, dev, DLDataType{kDLFloat, 32, 1}, {tokens, hidden});
    Tensor idx(ctx, dev, kInt64, {tokens, k});
    idx.set(std::vector<int64_t>(static_cast<size_t>(tokens) * k, expert));
    Tensor weights(ctx, dev, DLDataType{kDLFloat, 32, 1}, {tokens, k});
    Tensor in_rank(ctx, dev, kBool, {tokens, ranks});
    courier::ep::DispatchArgs args = topk_dispatch(x, idx, weights, in_rank, experts);
    return buffer.dispatch(args);
  };
  // The rank with bad input: rank 1 (rank 0 alone in a one-rank job, where
  // only its own error can be checked).
  const int bad = ranks > 1 ? 1 : 0;
  const std::string refused = fmt::format("rank {} refused its arguments", bad);
  {
    courier::ep::Buffer buffer(ctx, options);
    if (on_stream) buffer.set_stream(nullptr);
    run(buffer, 8, topk);  // a good first call
    expect_error(
        c, fmt::format("too many tokens (rank {})", bad),
        me == bad ? "x has 17 tokens, more than the 16 the buffer was sized for" : refused,
        [&] { run(buffer, me == bad ? 17 : 8, topk); }, kRefusal);
    run(buffer, 8, topk);  // and the Buffer still works
    expect_error(
        c, fmt::format("an expert index past the end (rank {})", bad),
        me == bad ? "is outside [-1, " : refused,
        [&] { run(buffer, 8, topk, me == bad ? experts : 0); }, kRefusal);
    const courier::ep::DispatchResult got = run(buffer, 8, topk);
    if (on_stream) {
      // A combine whose x has a row too many on the bad rank.
      const int64_t rows = got.recv_x.tensor().shape[0];
      Tensor y(ctx, buffer.device(), DLDataType{kDLFloat, 32, 1},
               {rows + (me == bad ? 1 : 0), hidden});
      const bool direct = std::string(buffer.transport()) == "direct";
      if (!direct) {
        expect_error(
            c, "a combine with a row too many", me == bad ? "x: shape" : refused,
            [&] { buffer.combine(*y.view(), got.handle); }, kRefusal);
      } else if (me == bad) {
        expect_error(c, "a combine with a row too many, where combines do not wait",
                     "make a new Buffer", [&] { buffer.combine(*y.view(), got.handle); });
      } else {
        buffer.combine(*y.view(), got.handle);  // returns: the refusal is found later
        expect_error(c, "synchronize after the peer refused a combine that did not wait", refused,
                     [&] { buffer.synchronize(); });
      }
      if (direct) {
        expect_error(c, "a dispatch after the refused combine", "make a new Buffer",
                     [&] { run(buffer, 8, topk); });
      }
    }
  }
  if (ranks > 1 && !on_stream) {  // a configuration that differs needs two ranks
    courier::ep::Buffer buffer(ctx, options);
    expect_error(
        c, "top-k differs between ranks at the first call",
        "every rank must use the same configuration", [&] { run(buffer, 8, me == 0 ? 1 : 2); },
        kRefusal);
  }
  if (on_stream) {
    return c.outcome(
        "on the caller's stream a refused dispatch (too many tokens, an expert index out of "
        "range) still fails every rank at the call and the next works; a refused combine that "
        "does not wait (direct path) breaks the Buffer on every rank, a waiting one (proxy "
        "path) is refused at the call");
  }
  return c.outcome(
      ranks > 1 ? "a refused call (too many tokens, an expert index out of range) fails every rank "
                  "at once, the next call works; mismatched configurations fail every rank"
                : "a refused call (too many tokens, an expert index out of range) fails at once, "
                  "the next call works (one rank: no configuration to mismatch)");
}

// Low-latency bad input: an expert index out of range on rank 1 fails every
// rank; the calls after it (both halves of the double buffer) work.
// DeepEP's calc_diff (tests/utils.py): 1 - 2 sum(x y) / sum(x^2 + y^2) over
// x + 1 and y + 1, in double.
double calc_diff(const std::vector<double>& x, const std::vector<double>& y) {
  double xy = 0, xx_yy = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    xy += (x[i] + 1) * (y[i] + 1);
    xx_yy += (x[i] + 1) * (x[i] + 1) + (y[i] + 1) * (y[i] + 1);
  }
  return 1 - 2 * xy / xx_yy;
}

// Low-latency combine with use_logfmt (docs/ep.md, "LogFMT combine"):
// identity experts send the rows back LogFMT-encoded; each token's result
// is compared with x * (sum of its weights) in float. Per 128-channel block:
// block 0 holds values in (-0.9, 0.9) (coded), block 1 zeros and a range
// past the 2^32 clip (coded; the clipped value becomes 0), block 2 values
// up to 3 (kept bfloat16), block 3 coded on even tokens only. Tolerances: a
// coded value is off by at most 2^(step / 2) - 1 <= 2.2% (step <= 32 / 510
// in log2), the bfloat16 result rounds by 0.4% more: 3% relative (plus 1e-6
// for the clipped values) where coded, 1e-2 as the plain bfloat16 check
// elsewhere; over the whole output DeepEP's own test bound, calc_diff <
// 1e-5 (tests/test_low_latency.py, bfloat16 dispatch). Coded values must
// also differ somewhere from the plain bfloat16 result (the rows really
// travelled coded). Then: use_logfmt with float32 rows is refused on every
// rank, and the Buffer stays usable.
Outcome check_ll_logfmt(courier::Context& ctx, const Shape& shape) {
  const int ranks = ctx.world_size(), me = ctx.rank();
  const int hidden = shape.hidden, topk = shape.topk, experts = shape.experts_of(ranks),
            per = experts / ranks, max_tokens = shape.max_tokens;
  courier::ep::Buffer buffer(ctx, low_latency_options(shape, ranks, 2));
  const DLDevice dev = buffer.device();
  const DLDataType bf16{kDLBfloat, 16, 1};
  const int64_t slots = int64_t{ranks} * max_tokens;
  Checks c;
  double worst_diff = 0;
  int coded_differ = 0;
  for (int call = 0; call < 2; ++call) {
    Inputs mine = inputs_of(shape, me, hidden, topk, experts, call);
    for (int t = 0; t < mine.tokens; ++t) {
      for (int h = 0; h < hidden; ++h) {
        const int block = (h / 128) % 4, i = h % 128;
        const float wave = std::sin(0.37f * static_cast<float>(h + 13 * t + 101 * me + 7 * call));
        float v = 0;
        if (block == 0) {
          v = 0.9f * wave;
        } else if (block == 1) {
          v = i % 7 == 0 ? 0.0f : 0.3f * wave * std::ldexp(1.0f, -(i % 20));
          if (i == 5) v = 1e-12f;  // more than 2^32 below the block's largest: clipped to 0
        } else if (block == 2) {
          v = 3.0f * wave;
        } else {
          v = (t % 2 == 0 ? 0.5f : 4.0f) * wave;
        }
        mine.x[static_cast<size_t>(t) * hidden + h] = round_bf16(v);
      }
    }
    auto coded = [&](int t, int h) {
      const int block = (h / 128) % 4;
      return block == 0 || block == 1 || (block == 3 && t % 2 == 0);
    };
    DeviceInputs inputs(ctx, dev, mine, hidden, topk, true);  // exact: already bfloat16
    Tensor &x = inputs.x, &idx = inputs.idx, &weights = inputs.weights;
    courier::ep::LowLatencyDispatchArgs args;
    args.x = x.view();
    args.topk_idx = idx.view();
    courier::ep::LowLatencyDispatchResult got = buffer.low_latency_dispatch(args);
    std::vector<std::byte> packed(static_cast<size_t>(per * slots * hidden) * 2);
    ctx.copy(packed.data(), got.packed_recv_x.tensor().data, packed.size());
    Tensor back(ctx, dev, bf16, {per, slots, hidden});
    back.set(packed);
    courier::ep::LowLatencyCombineOptions logfmt;
    logfmt.use_logfmt = true;
    courier::ep::CombineResult combined =
        buffer.low_latency_combine(*back.view(), *idx.view(), *weights.view(), got.handle, logfmt);
    std::vector<std::byte> out_bytes(static_cast<size_t>(mine.tokens) * hidden * 2);
    ctx.copy(out_bytes.data(), combined.combined_x.tensor().data, out_bytes.size());
    const std::vector<float> out = decode(out_bytes, true);
    std::vector<double> want_all, got_all;
    int wrong = 0;
    for (int t = 0; t < mine.tokens; ++t) {
      float total = 0;
      for (int k = 0; k < topk; ++k) {
        if (mine.idx[t * topk + k] >= 0) total += mine.weights[t * topk + k];
      }
      for (int h = 0; h < hidden; ++h) {
        const float want = mine.x[static_cast<size_t>(t) * hidden + h] * total;
        const float have = out[static_cast<size_t>(t) * hidden + h];
        const bool is_coded = coded(t, h);
        const float bound =
            is_coded ? 0.03f * std::fabs(want) + 1e-6f : 1e-2f * std::fabs(want) + 1e-2f;
        if (!(std::fabs(have - want) <= bound)) ++wrong;
        if (is_coded && have != round_bf16(want)) ++coded_differ;
        want_all.push_back(want);
        got_all.push_back(have);
      }
    }
    c.expect(wrong == 0, fmt::format("call {}: {} combined values off", call, wrong));
    const double diff = calc_diff(want_all, got_all);
    worst_diff = std::max(worst_diff, diff);
    c.expect(diff < 1e-5, fmt::format("call {}: calc_diff {:.2e}, not below 1e-5", call, diff));
  }
  c.expect(coded_differ > 0, "no coded value differs from the plain bfloat16 combine");

  // float32 rows cannot travel in LogFMT: refused on every rank alike (at
  // hidden 128 whatever the case's shape: a float32 Buffer of the standard
  // shape would pass a window's 4 GiB at EP1).
  const int narrow = 128;
  courier::ep::BufferOptions f32 = low_latency_options(shape, ranks, 4);
  f32.hidden = narrow;
  courier::ep::Buffer wide(ctx, f32);
  const Inputs in = inputs_of(shape, me, narrow, topk, experts, 0);
  DeviceInputs inputs(ctx, dev, in, narrow, topk, false);
  Tensor &x = inputs.x, &idx = inputs.idx, &weights = inputs.weights;
  courier::ep::LowLatencyDispatchArgs args;
  args.x = x.view();
  args.topk_idx = idx.view();
  courier::ep::LowLatencyDispatchResult got = wide.low_latency_dispatch(args);
  Tensor back(ctx, dev, DLDataType{kDLFloat, 32, 1}, {per, slots, narrow});
  std::vector<std::byte> packed(static_cast<size_t>(per * slots * narrow) * 4);
  ctx.copy(packed.data(), got.packed_recv_x.tensor().data, packed.size());
  back.set(packed);
  courier::ep::LowLatencyCombineOptions logfmt;
  logfmt.use_logfmt = true;
  expect_error(
      c, "use_logfmt with float32 rows", "use_logfmt needs bfloat16 x",
      [&] {
        wide.low_latency_combine(*back.view(), *idx.view(), *weights.view(), got.handle, logfmt);
      },
      kRefusal);
  courier::ep::CombineResult plain =
      wide.low_latency_combine(*back.view(), *idx.view(), *weights.view(), got.handle);
  const int wrong = combined_values_off(ctx, plain, in, topk, narrow, false, 1e-5f, 1e-6f,
                                        [&](int t, int h) { return in.x[t * narrow + h]; });
  c.expect(wrong == 0, fmt::format("float32 combine after the refusal: {} values off", wrong));
  return c.outcome(fmt::format(
      "2 calls: coded values within 3%, bfloat16 blocks within 1e-2, calc_diff {:.1e} < 1e-5 "
      "(DeepEP's bound); {} coded values differ from plain bfloat16; float32 refused",
      worst_diff, coded_differ));
}

Outcome check_ll_errors(courier::Context& ctx) {
  const int ranks = ctx.world_size(), me = ctx.rank();
  const int hidden = 64, topk = 2, experts = 2 * ranks, tokens = 8;
  const courier::ep::BufferOptions options = small_low_latency_options(ranks);
  courier::ep::Buffer buffer(ctx, options);
  const DLDevice dev = buffer.device();
  Tensor x(ctx, dev, DLDataType{kDLBfloat, 16, 1}, {tokens, hidden});
  Tensor idx(ctx, dev, kInt64, {tokens, topk});
  auto run = [&](int64_t expert) {
    idx.set(std::vector<int64_t>(static_cast<size_t>(tokens) * topk, expert));
    courier::ep::LowLatencyDispatchArgs args;
    args.x = x.view();
    args.topk_idx = idx.view();
    courier::ep::LowLatencyDispatchResult got = buffer.low_latency_dispatch(args);
    std::vector<int32_t> count(static_cast<size_t>(experts / ranks));
    ctx.copy(count.data(), got.packed_recv_count.tensor().data, count.size() * 4);
    return count;
  };
  Checks c;
  run(0);
  const int bad = ranks > 1 ? 1 : 0;  // rank 0 alone in a one-rank job
  expect_error(
      c, fmt::format("an expert index past the end (rank {})", bad),
      me == bad ? std::string("is outside [-1, ")
                : fmt::format("rank {} refused its arguments", bad),
      [&] { run(me == bad ? experts : 0); }, kRefusal);
  for (int call = 0; call < 2; ++call) {
    // Every rank sends its tokens to expert 0 (rank 0's first): rank 0
    // receives tokens x ranks rows there.
    const std::vector<int32_t> count = run(0);
    c.expect(count[0] == (me == 0 ? tokens * topk * ranks : 0),
             fmt::format("call {} after the error: expert 0 counts {} rows", call, count[0]));
  }
  return c.outcome("a refused call fails every rank at once; the next calls work");
}

// Low-latency dispatch into the caller's tensors (LowLatencyOutputs) with
// each FP8 scales layout, and combine into the caller's `out`: the same
// bytes as a dispatch into the Buffer's memory (row-major scales) of the
// same inputs, the scales transposed (column_major) or reduced to exponent
// bytes, four per int32, zero past the last (ue8m0; hidden 640 has 5
// scales per row); the combines equal bit for bit. A wrong out tensor on
// rank 0 is refused on every rank, naming it there. Both paths.
Outcome check_ll_caller_outputs(courier::Context& ctx, const Shape& shape, bool on_stream) {
  const int ranks = ctx.world_size(), me = ctx.rank();
  const int hidden = shape.hidden, topk = shape.topk, experts = shape.experts_of(ranks),
            per = experts / ranks, max_tokens = shape.max_tokens, cols = hidden / 128;
  const int64_t slots = int64_t{ranks} * max_tokens;
  courier::ep::Buffer buffer(ctx, low_latency_options(shape, ranks, 2));
  if (on_stream) buffer.set_stream(nullptr);  // calls return once queued
  const DLDevice dev = buffer.device();
  const Inputs mine = inputs_of(shape, me, hidden, topk, experts, 0);
  DeviceInputs inputs(ctx, dev, mine, hidden, topk, true);
  const DLDataType bf16{kDLBfloat, 16, 1}, fp8{kDLFloat, 8, 1}, f32{kDLFloat, 32, 1};
  Checks c;
  // Expert outputs to combine: a pattern in bfloat16 (small integers, exact).
  Tensor back(ctx, dev, bf16, {per, slots, hidden});
  std::vector<float> pattern(static_cast<size_t>(per * slots * hidden));
  for (size_t i = 0; i < pattern.size(); ++i) pattern[i] = static_cast<float>(i % 17) - 8.0f;
  back.set(encode(pattern, true));
  auto args_of = [&](courier::ep::ScalesLayout layout) {
    courier::ep::LowLatencyDispatchArgs args;
    args.x = inputs.x.view();
    args.topk_idx = inputs.idx.view();
    args.use_fp8 = true;
    args.round_scale = true;
    args.scales_layout = layout;
    return args;
  };
  using courier::ep::ScalesLayout;
  const int words = (cols + 3) / 4;
  for (ScalesLayout layout :
       {ScalesLayout::row_major, ScalesLayout::column_major, ScalesLayout::ue8m0}) {
    const char* name = layout == ScalesLayout::row_major      ? "row_major"
                       : layout == ScalesLayout::column_major ? "column_major"
                                                              : "ue8m0";
    // Into the Buffer's memory, row-major scales: the reference.
    courier::ep::LowLatencyDispatchResult a =
        buffer.low_latency_dispatch(args_of(ScalesLayout::row_major));
    buffer.synchronize();
    std::vector<uint8_t> a_codes(static_cast<size_t>(per * slots * hidden));
    std::vector<float> a_scales(static_cast<size_t>(per * slots * cols));
    std::vector<int32_t> a_count(static_cast<size_t>(per)), a_src(static_cast<size_t>(per * slots));
    std::vector<int64_t> a_range(static_cast<size_t>(per * ranks));
    ctx.copy(a_codes.data(), a.packed_recv_x.tensor().data, a_codes.size());
    ctx.copy(a_scales.data(), a.packed_recv_x_scales.tensor().data, a_scales.size() * 4);
    ctx.copy(a_count.data(), a.packed_recv_count.tensor().data, a_count.size() * 4);
    ctx.copy(a_src.data(), a.packed_recv_src_info.tensor().data, a_src.size() * 4);
    ctx.copy(a_range.data(), a.packed_recv_layout_range.tensor().data, a_range.size() * 8);
    courier::ep::CombineResult a_combined = buffer.low_latency_combine(
        *back.view(), *inputs.idx.view(), *inputs.weights.view(), a.handle);
    buffer.synchronize();
    std::vector<uint16_t> a_sums(static_cast<size_t>(mine.tokens * hidden));
    ctx.copy(a_sums.data(), a_combined.combined_x.tensor().data, a_sums.size() * 2);

    // Into the caller's tensors, scales as `layout`.
    Tensor x(ctx, dev, fp8, {per, slots, hidden});
    Tensor scales(ctx, dev, layout == ScalesLayout::ue8m0 ? kInt32 : f32,
                  layout == ScalesLayout::row_major      ? std::vector<int64_t>{per, slots, cols}
                  : layout == ScalesLayout::column_major ? std::vector<int64_t>{per, cols, slots}
                                                         : std::vector<int64_t>{per, words, slots});
    scales.set(std::vector<uint8_t>(
        static_cast<size_t>(per * slots) * (layout == ScalesLayout::ue8m0 ? words : cols) * 4,
        0xEE));  // padding bytes must be written as 0
    Tensor count(ctx, dev, kInt32, {per}), src(ctx, dev, kInt32, {per, slots}),
        range(ctx, dev, kInt64, {per, ranks});
    courier::ep::LowLatencyDispatchArgs args = args_of(layout);
    args.out = {x.view(), scales.view(), count.view(), src.view(), range.view()};
    courier::ep::LowLatencyDispatchResult b = buffer.low_latency_dispatch(args);
    buffer.synchronize();
    c.expect(b.packed_recv_x.tensor().data == x.view()->data &&
                 b.packed_recv_x_scales.tensor().data == scales.view()->data,
             fmt::format("{}: the result's views are not the caller's tensors", name));
    const std::vector<uint8_t> b_codes = x.get<uint8_t>();
    const std::vector<int32_t> b_count = count.get<int32_t>(), b_src = src.get<int32_t>();
    const std::vector<int64_t> b_range = range.get<int64_t>();
    c.expect(b_count == a_count, fmt::format("{}: counts differ", name));
    c.expect(b_range == a_range, fmt::format("{}: layout ranges differ", name));
    const std::vector<uint8_t> scale_bytes = scales.get<uint8_t>();
    int wrong_rows = 0, wrong_scales = 0;
    for (int l = 0; l < per; ++l) {
      for (int64_t i = 0; i < a_count[l]; ++i) {
        const size_t row = static_cast<size_t>(l * slots + i);
        wrong_rows +=
            !std::equal(b_codes.begin() + row * hidden, b_codes.begin() + (row + 1) * hidden,
                        a_codes.begin() + row * hidden) ||
            b_src[row] != a_src[row];
        for (int p = 0; p < (layout == ScalesLayout::ue8m0 ? words * 4 : cols); ++p) {
          const float want = p < cols ? a_scales[row * cols + p] : 0.0f;
          if (layout == ScalesLayout::ue8m0) {
            uint32_t bits;
            std::memcpy(&bits, &want, 4);
            const size_t at = ((static_cast<size_t>(l) * words + p / 4) * slots + i) * 4 + p % 4;
            wrong_scales += scale_bytes[at] != (p < cols ? (bits >> 23) & 0xFF : 0);
          } else {
            const size_t at = layout == ScalesLayout::row_major
                                  ? row * cols + p
                                  : (static_cast<size_t>(l) * cols + p) * slots + i;
            float have;
            std::memcpy(&have, scale_bytes.data() + at * 4, 4);
            wrong_scales += have != want;
          }
        }
      }
    }
    c.expect(wrong_rows == 0, fmt::format("{}: {} rows or sources differ", name, wrong_rows));
    c.expect(wrong_scales == 0, fmt::format("{}: {} scales differ", name, wrong_scales));

    Tensor sums(ctx, dev, bf16, {mine.tokens, hidden});
    courier::ep::LowLatencyCombineOptions options;
    options.out = sums.view();
    courier::ep::CombineResult b_combined = buffer.low_latency_combine(
        *back.view(), *inputs.idx.view(), *inputs.weights.view(), b.handle, options);
    buffer.synchronize();
    c.expect(b_combined.combined_x.tensor().data == sums.view()->data,
             fmt::format("{}: combined_x is not the caller's out", name));
    c.expect(sums.get<uint16_t>() == a_sums,
             fmt::format("{}: the combine into out differs from the Buffer's", name));
  }
  // A wrong out tensor on rank 0: refused everywhere, named there.
  Tensor x(ctx, dev, fp8, {per, slots, hidden}), scales(ctx, dev, f32, {per, cols, slots});
  Tensor count(ctx, dev, kInt32, {me == 0 ? per + 1 : per}), src(ctx, dev, kInt32, {per, slots}),
      range(ctx, dev, kInt64, {per, ranks});
  courier::ep::LowLatencyDispatchArgs args = args_of(ScalesLayout::column_major);
  args.out = {x.view(), scales.view(), count.view(), src.view(), range.view()};
  expect_error(
      c, "a wrong out.count on rank 0",
      me == 0 ? std::string("low_latency_dispatch: out.count: shape")
              : std::string("rank 0 refused its arguments"),
      // A Buffer whose calls do not wait is broken by it (docs/ep.md); its
      // other ranks learn of it once their call's kernels ran.
      [&] {
        buffer.low_latency_dispatch(args);
        buffer.synchronize();
      },
      on_stream ? courier::test::ErrorKind::local : kRefusal);
  return c.outcome(fmt::format(
      "{}row_major, column_major and ue8m0 scales ({} per row) into the caller's tensors equal "
      "the Buffer's; combine into out equal; a wrong out refused on every rank",
      on_stream ? "calls that do not wait: " : "", cols));
}

// High-throughput dispatch with num_worst_tokens on the caller's stream
// does not wait (the proxy path): its padded results equal a waiting
// Buffer's for the same inputs, its handle holds no counts (they stay on
// the device) and combines to the same sums while it is one of the last
// two dispatches' handles; later it is refused, naming why; without
// num_worst_tokens a dispatch still waits and its handle has the counts.
Outcome check_ht_worst_no_wait(courier::Context& ctx, const Shape& shape) {
  const int ranks = ctx.world_size(), me = ctx.rank();
  const int hidden = shape.hidden, topk = shape.topk, experts = shape.experts_of(ranks);
  courier::ep::BufferOptions options;
  options.max_tokens_per_rank = static_cast<uint32_t>(shape.max_tokens);
  options.hidden = hidden;
  options.element_bytes = 2;
  options.max_topk = topk;
  courier::ep::Buffer waiting(ctx, options), deferred(ctx, options);
  deferred.set_stream(nullptr);
  const DLDevice dev = waiting.device();
  Checks c;
  if (std::string(deferred.transport()) != "proxy") {
    return c.outcome("skipped: the direct path's high-throughput calls always wait");
  }
  const Inputs mine = inputs_of(shape, me, hidden, topk, experts, 0);
  DeviceInputs inputs(ctx, dev, mine, hidden, topk, true);
  Tensor per_rank(ctx, dev, kInt32, {ranks}), per_expert(ctx, dev, kInt32, {experts});
  Tensor in_rank(ctx, dev, kBool, {mine.tokens, ranks});
  waiting.get_dispatch_layout(*inputs.idx.view(), experts,
                              {per_rank.view(), per_expert.view(), in_rank.view()});
  const int worst = ranks * shape.max_tokens;
  courier::ep::DispatchArgs args =
      topk_dispatch(inputs.x, inputs.idx, inputs.weights, in_rank, experts);
  args.num_worst_tokens = worst;
  auto bytes_of = [&](const courier::ep::TensorView& view, size_t bytes) {
    std::vector<std::byte> out(bytes);
    ctx.copy(out.data(), view.tensor().data, bytes);
    return out;
  };
  const size_t x_bytes = static_cast<size_t>(worst) * hidden * 2;
  const size_t k_elems = static_cast<size_t>(worst) * topk;
  courier::ep::DispatchResult a = waiting.dispatch(args);
  courier::ep::DispatchResult b = deferred.dispatch(args);
  deferred.synchronize();
  c.expect(b.handle.counts_on_device && b.handle.recv_counts.empty() &&
               b.num_recv_tokens_per_expert.empty(),
           "the dispatch that did not wait has counts on the host");
  c.expect(bytes_of(b.recv_x, x_bytes) == bytes_of(a.recv_x, x_bytes), "recv_x differs");
  c.expect(bytes_of(b.recv_topk_idx, k_elems * 8) == bytes_of(a.recv_topk_idx, k_elems * 8),
           "recv_topk_idx differs");
  c.expect(bytes_of(b.recv_topk_weights, k_elems * 4) == bytes_of(a.recv_topk_weights, k_elems * 4),
           "recv_topk_weights differs");
  // Expert outputs: the received rows as they came.
  Tensor y(ctx, dev, DLDataType{kDLBfloat, 16, 1}, {worst, hidden});
  y.set(bytes_of(a.recv_x, x_bytes));
  const size_t out_bytes = static_cast<size_t>(mine.tokens) * hidden * 2;
  courier::ep::CombineResult ca = waiting.combine(*y.view(), a.handle);
  const std::vector<std::byte> want = bytes_of(ca.combined_x, out_bytes);
  // Two dispatches before their combines (two micro-batches): both handles
  // combine, in either order.
  courier::ep::DispatchResult b2 = deferred.dispatch(args);
  auto combined_with = [&](const courier::ep::DispatchHandle& handle) {
    courier::ep::CombineResult out = deferred.combine(*y.view(), handle);
    deferred.synchronize();
    return bytes_of(out.combined_x, out_bytes);
  };
  c.expect(combined_with(b.handle) == want, "combined_x differs (the older of two handles)");
  c.expect(combined_with(b2.handle) == want, "combined_x differs (the newer of two handles)");
  c.expect(combined_with(b2.handle) == want && combined_with(b.handle) == want,
           "combined_x differs (the newer handle, then the older)");
  // The dispatch after next replaces b's counts on the device: b's handle is refused.
  courier::ep::DispatchResult b3 = deferred.dispatch(args);
  expect_error(c, "a combine with the handle of a dispatch two dispatches back that did not wait",
               "combine it before the Buffer's second dispatch after it",
               [&] { deferred.combine(*y.view(), b.handle); });
  // A dispatch that waits, and its combine, leave b3's counts alone.
  args.num_worst_tokens = 0;
  courier::ep::DispatchResult plain = deferred.dispatch(args);
  c.expect(!plain.handle.counts_on_device && plain.handle.recv_counts.size() == size_t(ranks),
           "a dispatch without num_worst_tokens did not read its counts");
  uint64_t received = 0;
  for (uint32_t n : plain.handle.recv_counts) received += n;
  Tensor y_plain(ctx, dev, DLDataType{kDLBfloat, 16, 1}, {static_cast<int64_t>(received), hidden});
  y_plain.set(bytes_of(a.recv_x, received * hidden * 2));
  courier::ep::CombineResult cp = deferred.combine(*y_plain.view(), plain.handle);
  c.expect(bytes_of(cp.combined_x, out_bytes) == want, "combined_x differs (a waiting dispatch)");
  c.expect(combined_with(b3.handle) == want,
           "combined_x differs (a handle that did not wait, after a waiting dispatch's combine)");
  // A dispatch that did not wait and was never combined, then one refused
  // on every rank (another configuration): the Buffer goes on.
  args.num_worst_tokens = worst;
  deferred.dispatch(args);
  courier::ep::DispatchArgs other = args;
  other.num_worst_tokens = 0;
  other.num_experts = experts + ranks;
  expect_error(
      c, "a dispatch of another configuration after one that did not wait",
      "one Buffer serves one configuration", [&] { deferred.dispatch(other); }, kRefusal);
  args.num_worst_tokens = 0;
  try {
    courier::ep::DispatchResult after = deferred.dispatch(args);
    c.expect(after.handle.recv_counts == plain.handle.recv_counts,
             "the dispatch after the refusal received other counts");
  } catch (const courier::Error& e) {
    c.expect(false, fmt::format("the dispatch after the refusal failed: {}", e.what()));
  }
  return c.outcome(fmt::format(
      "num_worst_tokens {} on the caller's stream: padded results and combine equal a waiting "
      "Buffer's; the last two dispatches' handles combine, in any order and around a waiting "
      "dispatch's combine; an older one refused; without num_worst_tokens the counts are read; "
      "a refusal after it leaves the Buffer working",
      worst));
}

// recv_hook: the dispatch after next is refused while the hook of the one
// before is pending (it would reuse its buffers), on every rank alike and
// before anything is sent; a hook runs once; the calls go on afterwards.
Outcome check_ll_hook_order(courier::Context& ctx) {
  const int ranks = ctx.world_size(), me = ctx.rank();
  const int hidden = 64, topk = 2, experts = 2 * ranks, tokens = 8;
  const courier::ep::BufferOptions options = small_low_latency_options(ranks);
  courier::ep::Buffer buffer(ctx, options);
  const DLDevice dev = buffer.device();
  Tensor x(ctx, dev, DLDataType{kDLBfloat, 16, 1}, {tokens, hidden});
  Tensor idx(ctx, dev, kInt64, {tokens, topk});
  idx.set(std::vector<int64_t>(static_cast<size_t>(tokens) * topk, 0));
  auto dispatch = [&](bool hook) {
    courier::ep::LowLatencyDispatchArgs args;
    args.x = x.view();
    args.topk_idx = idx.view();
    args.return_recv_hook = hook;
    return buffer.low_latency_dispatch(args);
  };
  Checks c;
  courier::ep::LowLatencyDispatchResult first = dispatch(true);
  dispatch(false);
  expect_error(c, "the dispatch after next with a hook pending",
               "the recv_hook of low_latency_dispatch call 0 has not run",
               [&] { dispatch(false); });
  first.recv_hook();
  expect_error(c, "a hook run twice", "ran already", [&] { first.recv_hook(); });
  courier::ep::LowLatencyDispatchResult after = dispatch(false);
  std::vector<int32_t> count(static_cast<size_t>(experts / ranks));
  ctx.copy(count.data(), after.packed_recv_count.tensor().data, count.size() * 4);
  c.expect(count[0] == (me == 0 ? tokens * topk * ranks : 0),
           fmt::format("the dispatch after the hook ran: expert 0 counts {} rows", count[0]));
  return c.outcome(
      "a pending hook refuses the dispatch after next on every rank; a hook runs once; the "
      "calls go on");
}

// Low-latency calls on the caller's stream do not wait on the host: a bad
// expert index on one rank, found by its kernels, fails no call at once;
// synchronize() throws it on every rank (naming the index there, the rank
// elsewhere), and every later call throws it too (the ranks cannot agree to
// go on). A second Buffer, still waiting on the host, refuses the same index
// at the call and stays usable.
Outcome check_ll_no_wait_errors(courier::Context& ctx) {
  const int ranks = ctx.world_size(), me = ctx.rank();
  const int hidden = 64, topk = 2, experts = 2 * ranks, tokens = 8;
  const int bad = ranks > 1 ? 1 : 0;
  const courier::ep::BufferOptions options = small_low_latency_options(ranks);
  Checks c;
  courier::ep::Buffer buffer(ctx, options);
  buffer.set_stream(nullptr);
  const DLDevice dev = buffer.device();
  Tensor x(ctx, dev, DLDataType{kDLBfloat, 16, 1}, {tokens, hidden});
  Tensor idx(ctx, dev, kInt64, {tokens, topk});
  // Every token to `expert`, on `on` (this case's two Buffers).
  auto dispatch_on = [&](courier::ep::Buffer& on, int64_t expert) {
    idx.set(std::vector<int64_t>(static_cast<size_t>(tokens) * topk, expert));
    courier::ep::LowLatencyDispatchArgs args;
    args.x = x.view();
    args.topk_idx = idx.view();
    return on.low_latency_dispatch(args);
  };
  auto dispatch = [&](int64_t expert) { return dispatch_on(buffer, expert); };
  // A good call first: its outcome is checked by the next call.
  dispatch(0);
  buffer.synchronize();
  bool returned = false;
  try {
    dispatch(me == bad ? experts : 0);
    returned = true;
  } catch (const courier::Error& e) {
    c.expect(false, fmt::format("the call with the bad index threw at once: {}", e.what()));
  }
  if (returned) {
    const std::string found = me == bad ? std::string("is outside [-1, num_experts)")
                                        : fmt::format("rank {} refused its arguments", bad);
    expect_error(c, "synchronize after the bad index", found, [&] { buffer.synchronize(); });
    expect_error(c, "a call after the failure", found, [&] { dispatch(0); });
    expect_error(c, "use_own_stream after the failure", found, [&] { buffer.use_own_stream(); });
  }
  // The same index where calls wait: refused at the call, and the Buffer
  // goes on.
  courier::ep::Buffer waiting(ctx, options);
  auto dispatch_waiting = [&](int64_t expert) { return dispatch_on(waiting, expert); };
  dispatch_waiting(0);
  expect_error(
      c, "the bad index where calls wait",
      me == bad ? std::string("is outside [-1, ")
                : fmt::format("rank {} refused its arguments", bad),
      [&] { dispatch_waiting(me == bad ? experts : 0); }, kRefusal);
  courier::ep::LowLatencyDispatchResult after = dispatch_waiting(0);
  std::vector<int32_t> count(static_cast<size_t>(experts / ranks));
  ctx.copy(count.data(), after.packed_recv_count.tensor().data, count.size() * 4);
  c.expect(count[0] == (me == 0 ? tokens * topk * ranks : 0),
           fmt::format("after the refusal where calls wait: expert 0 counts {} rows", count[0]));
  return c.outcome(
      "on the caller's stream a kernel-found bad index surfaces at synchronize() on every rank "
      "and breaks the Buffer; where calls wait it is refused at the call");
}

}  // namespace

// Buffer::set_stream: every backend takes the runtime's default stream (the
// ht-/ll-default-stream cases then run on it; gpu-host accepts any stream,
// its kernels running before each call returns).
Outcome check_streams(courier::ep::Buffer& buffer) {
  Checks c;
  c.expect(buffer.can_set_stream(), "can_set_stream() is false");
  buffer.set_stream(nullptr);
  buffer.synchronize();
  buffer.use_own_stream();
  buffer.synchronize();
  return c.outcome("set_stream, synchronize and use_own_stream");
}

int main(int argc, char** argv) {
  const bool gpu_shapes = argc > 1 && std::string(argv[1]) == "--gpu-shapes";
  if (argc > 2 || (argc == 2 && !gpu_shapes)) {
    fmt::print(stderr, "usage: ep_check [--gpu-shapes]\n");
    return 2;
  }
  try {
    courier::Context ctx;
    courier::ep::Buffer buffer(ctx);
    auto shape = [](int hidden) {
      Shape s;
      s.hidden = hidden;
      return s;
    };
    // The field's standard shapes: high-throughput 4096 tokens, hidden
    // 7168, top-8 of 256 (BF16) or 288 (FP8) experts; low-latency 128
    // tokens of 288 experts.
    auto big = [](int max_tokens, int experts) {
      Shape s;
      s.max_tokens = max_tokens;
      s.tokens = max_tokens;
      s.fewer = true;
      s.hidden = 7168;
      s.topk = 8;
      s.experts = experts;
      return s;
    };
    std::vector<std::pair<const char*, std::function<Outcome()>>> cases = {
        {"layout", [&] { return check_layout(ctx, buffer); }},
        {"layout-errors", [&] { return check_layout_errors(ctx, buffer); }},
        {"streams", [&] { return check_streams(buffer); }},
    };
    auto many_tokens = [](int hidden) {
      Shape s;
      s.hidden = hidden;
      s.max_tokens = 640;
      s.tokens = 600;
      s.fewer = true;
      s.topk = 8;
      s.experts_per_rank = 16;
      return s;
    };
    auto three_experts_per_rank = [] {
      Shape s;
      s.hidden = 64;
      s.topk = 2;  // distinct experts per token, 3 of them at EP1
      s.experts_per_rank = 3;
      return s;
    };
    auto on_default_stream = [](Shape s) {
      s.default_stream = true;
      return s;
    };
    if (gpu_shapes) {
      cases.insert(
          cases.end(),
          {
              {"ht-bfloat16-4096x7168-top8-of-256",
               [&] { return check_ht(ctx, big(4096, 256), true); }},
              {"ht-bfloat16-4096x7168-top8-of-288",
               [&] { return check_ht(ctx, big(4096, 288), true); }},
              {"ht-fp8-4096x7168-top8-of-256", [&] { return check_ht_fp8(ctx, big(4096, 256)); }},
              {"ll-bfloat16-128x7168-top8-of-288",
               [&] { return check_ll(ctx, big(128, 288), true); }},
              {"ll-fp8-128x7168-top8-of-288", [&] { return check_ll_fp8(ctx, big(128, 288)); }},
              {"ll-fp8-128x7168-top8-of-256", [&] { return check_ll_fp8(ctx, big(128, 256)); }},
              {"ll-logfmt-128x7168-top8-of-288",
               [&] { return check_ll_logfmt(ctx, big(128, 288)); }},
          });
    } else {
      cases.insert(
          cases.end(),
          {
              {"ht-float32", [&] { return check_ht(ctx, shape(96), false); }},
              {"ht-bfloat16", [&] { return check_ht(ctx, shape(96), true); }},
              // Several hundred tokens: a CPU rank packs and sends
              // them in several batches.
              {"ht-bfloat16-300-tokens",
               [&] {
                 Shape s = shape(64);
                 s.max_tokens = 320;
                 s.tokens = 300;
                 s.fewer = true;
                 return check_ht(ctx, s, true);
               }},
              {"ht-fp8", [&] { return check_ht_fp8(ctx, shape(256)); }},
              {"ht-empty-rank", [&] { return check_ht_empty_rank(ctx); }},
              {"ll-float32", [&] { return check_ll(ctx, shape(64), false); }},
              {"ll-bfloat16", [&] { return check_ll(ctx, shape(64), true); }},
              {"ll-fp8", [&] { return check_ll_fp8(ctx, shape(256)); }},
              {"ll-logfmt", [&] { return check_ll_logfmt(ctx, shape(512)); }},
              // More tokens than a GPU launch has blocks (each block
              // takes several in turn), the last ones with more
              // pairs before them than a block loads at once.
              {"ll-fp8-600-tokens", [&] { return check_ll_fp8(ctx, many_tokens(256)); }},
              {"ll-bfloat16-600-tokens", [&] { return check_ll(ctx, many_tokens(64), true); }},
              // num_experts not a multiple of 4 (from two ranks): each
              // rank's record of counts per expert ends off a 16-byte
              // boundary, where a padded layout would misplace the next.
              {"ll-bfloat16-3-experts-per-rank",
               [&] { return check_ll(ctx, three_experts_per_rank(), true); }},
              {"ht-bfloat16-3-experts-per-rank",
               [&] { return check_ht(ctx, three_experts_per_rank(), true); }},
          });
    }
    // The same kernels on the runtime's default stream; low-latency calls
    // then do not wait on the host.
    cases.insert(cases.end(),
                 {
                     {"ht-bfloat16-default-stream",
                      [&] { return check_ht(ctx, on_default_stream(shape(96)), true); }},
                     {"ll-bfloat16-default-stream",
                      [&] { return check_ll(ctx, on_default_stream(shape(64)), true); }},
                 });
    cases.emplace_back("ll-wait-cost", [&] { return check_ll_wait_cost(ctx, shape(128)); });
    cases.emplace_back("ht-errors", [&] { return check_ht_errors(ctx); });
    cases.emplace_back("ht-errors-on-stream", [&] { return check_ht_errors(ctx, true); });
    cases.emplace_back("ll-errors", [&] { return check_ll_errors(ctx); });
    cases.emplace_back("ll-no-wait-errors", [&] { return check_ll_no_wait_errors(ctx); });
    cases.emplace_back("ll-hook-order", [&] { return check_ll_hook_order(ctx); });
    cases.emplace_back("ht-worst-no-wait", [&] { return check_ht_worst_no_wait(ctx, shape(96)); });
    for (bool on_stream : {false, true}) {
      cases.emplace_back(on_stream ? "ll-caller-outputs-on-stream" : "ll-caller-outputs",
                         [&, on_stream] {
                           Shape s = shape(640);
                           s.max_tokens = 32;
                           s.tokens = 24;
                           s.fewer = true;
                           return check_ll_caller_outputs(ctx, s, on_stream);
                         });
    }
    CaseLog log;
    for (const auto& [name, run] : cases) log.record(name, run());
    ctx.barrier();
    fmt::print("ep: {} passed, {} failed (transport {})\n", log.passed(), log.failed(),
               buffer.transport());
    return log.failed() == 0 ? 0 : 1;
  } catch (const courier::Error& e) {
    fmt::print(stderr, "ep_check: {}\n", e.what());
    return 1;
  }
}
