// moe_demo: one MoE layer's communication with courier::ep (docs/ep.md), the
// smallest complete program to start from. Every rank
//   1. joins the job (courier::Context) and makes an ep::Buffer,
//   2. makes its tokens (bfloat16) and routes each to its top-k experts,
//   3. dispatches: every token travels to the ranks that hold its experts,
//   4. runs its experts on what arrived (a toy expert: twice the row),
//   5. combines: every token comes back as the weighted sum of its experts'
//      outputs,
//   6. checks the sums against a host reference and prints one line.
// It does this in high-throughput mode (training, prefill) and in
// low-latency mode (decoding).
//
//   courier-run -n 4 build/bin/moe_demo
//
// The sizes are the constants below. Exit status: 0 when every rank's
// results match, 1 when one does not or Courier threw, 2 for an argument
// (the demo takes none). Latency and bandwidth: courier-bench ep.
#include <dlpack/dlpack.h>
#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "courier/context.hpp"
#include "courier/ep.hpp"

namespace {

constexpr int64_t kTokens = 128;  // per rank
constexpr int64_t kHidden = 1024;
constexpr int64_t kTopk = 4;
constexpr int kExpertsPerRank = 4;

constexpr DLDataType kBf16{kDLBfloat, 16, 1};
constexpr DLDataType kF32{kDLFloat, 32, 1};
constexpr DLDataType kI32{kDLInt, 32, 1};
constexpr DLDataType kI64{kDLInt, 64, 1};
constexpr DLDataType kBool{kDLUInt, 8, 1};

// bfloat16 is the upper half of a float (rounded to nearest even here; finite
// values only). Frameworks bring their own conversions.
uint16_t to_bf16(float f) {
  const auto bits = std::bit_cast<uint32_t>(f);
  return static_cast<uint16_t>((bits + 0x7fff + ((bits >> 16) & 1)) >> 16);
}
float from_bf16(uint16_t v) { return std::bit_cast<float>(uint32_t{v} << 16); }

// A tensor in the GPU backend's memory (host memory on gpu-host) with the
// DLPack view the ep API takes; a framework passes its own tensors' views.
class Tensor {
 public:
  Tensor(courier::Context& ctx, DLDevice device, DLDataType dtype, std::vector<int64_t> shape)
      : ctx_(ctx), shape_(std::move(shape)) {
    size_t elements = 1;
    for (int64_t d : shape_) elements *= static_cast<size_t>(d);
    memory_ = ctx.alloc(std::max<size_t>(1, elements * dtype.bits / 8));
    view_.data = memory_.data();
    view_.device = device;
    view_.ndim = static_cast<int>(shape_.size());
    view_.dtype = dtype;
    view_.shape = shape_.data();
  }
  template <class T>
  void upload(const std::vector<T>& values) {
    ctx_.copy(memory_.data(), values.data(), values.size() * sizeof(T));
  }
  DLTensor* view() { return &view_; }

 private:
  courier::Context& ctx_;
  std::vector<int64_t> shape_;
  courier::DeviceBuffer memory_;
  DLTensor view_{};
};

// A result's values, copied to the host.
template <class T>
std::vector<T> download(const courier::Context& ctx, const DLTensor& t) {
  size_t elements = 1;
  for (int i = 0; i < t.ndim; ++i) elements *= static_cast<size_t>(t.shape[i]);
  std::vector<T> values(elements);
  if (elements > 0) ctx.copy(values.data(), t.data, elements * sizeof(T));
  return values;
}

// One rank's layer input: tokens and the router's choices.
struct Tokens {
  std::vector<uint16_t> x;       // [kTokens, kHidden] bfloat16
  std::vector<int64_t> experts;  // [kTokens, kTopk] distinct expert ids (-1 would drop one)
  std::vector<float> weights;    // [kTokens, kTopk]
};

Tokens make_tokens(int rank, int num_experts) {
  std::mt19937 rng(static_cast<unsigned>(rank) + 1);
  Tokens in;
  for (int64_t t = 0; t < kTokens; ++t) {
    for (int64_t h = 0; h < kHidden; ++h) {  // small integers: exact in bfloat16
      in.x.push_back(to_bf16(static_cast<float>((rank * 37 + t * 11 + h * 3) % 101 - 50)));
    }
    std::vector<int64_t> chosen;
    while (chosen.size() < kTopk) {
      const auto e = static_cast<int64_t>(rng() % static_cast<unsigned>(num_experts));
      if (std::find(chosen.begin(), chosen.end(), e) == chosen.end()) chosen.push_back(e);
    }
    for (int64_t e : chosen) {
      in.experts.push_back(e);
      in.weights.push_back(0.25f * static_cast<float>(1 + rng() % 4));
    }
  }
  return in;
}

float toy_expert(float x) { return 2 * x; }

// High-throughput mode: a token travels once to each rank holding one of
// its experts. Returns the combined rows [kTokens, kHidden].
std::vector<uint16_t> high_throughput_layer(courier::Context& ctx, const Tokens& in) {
  const int ranks = ctx.world_size(), num_experts = kExpertsPerRank * ranks;
  courier::ep::BufferOptions options;
  options.max_tokens_per_rank = kTokens;
  options.hidden = kHidden;
  options.max_topk = kTopk;
  courier::ep::Buffer buffer(ctx, options);  // collective
  const DLDevice dev = buffer.device();
  Tensor x(ctx, dev, kBf16, {kTokens, kHidden}), idx(ctx, dev, kI64, {kTokens, kTopk}),
      weights(ctx, dev, kF32, {kTokens, kTopk});
  x.upload(in.x);
  idx.upload(in.experts);
  weights.upload(in.weights);

  // Which ranks each token goes to (and how many tokens each rank and expert gets).
  Tensor per_rank(ctx, dev, kI32, {ranks}), per_expert(ctx, dev, kI32, {num_experts}),
      in_rank(ctx, dev, kBool, {kTokens, ranks});
  buffer.get_dispatch_layout(*idx.view(), num_experts,
                             {per_rank.view(), per_expert.view(), in_rank.view()});
  courier::ep::DispatchArgs args;
  args.x = x.view();
  args.topk_idx = idx.view();
  args.topk_weights = weights.view();
  args.is_token_in_rank = in_rank.view();
  args.num_experts = num_experts;
  const courier::ep::DispatchResult got = buffer.dispatch(args);

  // The experts. recv_x: one row per token with an expert here;
  // recv_topk_weights: its weights for the local experts (0 elsewhere). This
  // rank's output for a row is the weighted sum of its local experts'.
  // (A real layer runs its expert kernels on the device; the host stands in.)
  const std::vector<uint16_t> rows = download<uint16_t>(ctx, got.recv_x.tensor());
  const std::vector<float> w = download<float>(ctx, got.recv_topk_weights.tensor());
  const int64_t received = got.recv_x.tensor().shape[0],
                topk = got.recv_topk_weights.tensor().shape[1];
  std::vector<uint16_t> out(rows.size());
  for (int64_t r = 0; r < received; ++r) {
    float local = 0;
    for (int64_t k = 0; k < topk; ++k) local += w[r * topk + k];
    for (int64_t h = 0; h < kHidden; ++h) {
      out[r * kHidden + h] = to_bf16(toy_expert(from_bf16(rows[r * kHidden + h])) * local);
    }
  }
  Tensor y(ctx, dev, kBf16, {received, kHidden});
  y.upload(out);
  // Every rank's outputs go back to their tokens, summed per token.
  const courier::ep::CombineResult combined = buffer.combine(*y.view(), got.handle);
  return download<uint16_t>(ctx, combined.combined_x.tensor());
}

// Low-latency mode: every (token, expert) pair travels, into per-expert
// receive buffers; the combine applies the router's weights.
std::vector<uint16_t> low_latency_layer(courier::Context& ctx, const Tokens& in) {
  courier::ep::BufferOptions options;
  options.low_latency_mode = true;
  options.max_tokens_per_rank = kTokens;
  options.hidden = kHidden;
  options.max_topk = kTopk;
  options.num_experts = kExpertsPerRank * ctx.world_size();
  courier::ep::Buffer buffer(ctx, options);
  const DLDevice dev = buffer.device();
  Tensor x(ctx, dev, kBf16, {kTokens, kHidden}), idx(ctx, dev, kI64, {kTokens, kTopk}),
      weights(ctx, dev, kF32, {kTokens, kTopk});
  x.upload(in.x);
  idx.upload(in.experts);
  weights.upload(in.weights);
  courier::ep::LowLatencyDispatchArgs args;
  args.x = x.view();
  args.topk_idx = idx.view();
  const courier::ep::LowLatencyDispatchResult got = buffer.low_latency_dispatch(args);

  // packed_recv_x [local experts, ranks * kTokens, kHidden]: per local
  // expert, packed_recv_count rows from the front. The toy expert doubles
  // every slot (those past the count are not read back).
  const DLTensor& packed = got.packed_recv_x.tensor();
  std::vector<uint16_t> rows = download<uint16_t>(ctx, packed);
  for (uint16_t& v : rows) v = to_bf16(toy_expert(from_bf16(v)));
  Tensor y(ctx, dev, kBf16, {packed.shape[0], packed.shape[1], packed.shape[2]});
  y.upload(rows);
  const courier::ep::CombineResult combined =
      buffer.low_latency_combine(*y.view(), *idx.view(), *weights.view(), got.handle);
  return download<uint16_t>(ctx, combined.combined_x.tensor());
}

// Host reference: token t's combined row is toy_expert(x) * (sum of its
// weights), within bfloat16 rounding. Returns the number of values off.
int64_t values_off(const Tokens& in, const std::vector<uint16_t>& combined) {
  int64_t off = 0;
  for (int64_t t = 0; t < kTokens; ++t) {
    float total = 0;
    for (int64_t k = 0; k < kTopk; ++k) {
      if (in.experts[t * kTopk + k] >= 0) total += in.weights[t * kTopk + k];
    }
    for (int64_t h = 0; h < kHidden; ++h) {
      const float want = toy_expert(from_bf16(in.x[t * kHidden + h])) * total;
      const float have = from_bf16(combined[t * kHidden + h]);
      if (std::fabs(have - want) > 1e-2f * std::fabs(want) + 1e-2f) ++off;
    }
  }
  return off;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1) {
    fmt::print(stderr, "moe_demo: unknown argument '{}' (usage: courier-run -n N moe_demo)\n",
               argv[1]);
    return 2;
  }
  try {
    courier::Context ctx;  // rank, peers, GPU and NIC backends: from courier-run's environment
    const Tokens in = make_tokens(ctx.rank(), kExpertsPerRank * ctx.world_size());
    const int64_t ht_off = values_off(in, high_throughput_layer(ctx, in));
    const int64_t ll_off = values_off(in, low_latency_layer(ctx, in));
    ctx.barrier();  // nobody tears down an endpoint a peer still uses
    const bool ok = ht_off == 0 && ll_off == 0;
    fmt::print(
        "moe_demo: rank {} of {} (gpu {}, nic {}): {} tokens of hidden {}, top-{} of {} "
        "experts: high-throughput {}, low-latency {}\n",
        ctx.rank(), ctx.world_size(), ctx.gpu_backend(), ctx.nic_backend(), kTokens, kHidden, kTopk,
        kExpertsPerRank * ctx.world_size(),
        ht_off == 0 ? "OK" : fmt::format("FAILED ({} values off)", ht_off),
        ll_off == 0 ? "OK" : fmt::format("FAILED ({} values off)", ll_off));
    return ok ? 0 : 1;
  } catch (const courier::Error& e) {
    fmt::print(stderr, "moe_demo: {}\n", e.what());
    return 1;
  }
}
