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
// Prints "[PASS|FAIL] <case>: <detail>" and "ep: P passed, F failed"; exits 1
// if a case failed.
#include <fmt/format.h>

#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "courier/context.hpp"
#include "courier/ep.hpp"

namespace {

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

struct Outcome {
  bool pass = true;
  std::string detail;
};

class Checks {
 public:
  void expect(bool ok, const std::string& what) {
    if (ok) return;
    if (failed_ < 3) text_ += (failed_ == 0 ? "" : "; ") + what;
    ++failed_;
  }
  Outcome outcome(std::string pass_detail) const {
    if (failed_ == 0) return {true, std::move(pass_detail)};
    return {false, fmt::format("{} failed check(s): {}", failed_, text_)};
  }

 private:
  int failed_ = 0;
  std::string text_;
};

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

// Runs `call`, which must throw courier::Error containing `needle`.
void expect_error(Checks& c, const std::string& what, const std::string& needle,
                  const std::function<void()>& call) {
  try {
    call();
    c.expect(false, what + ": no error");
  } catch (const courier::Error& e) {
    c.expect(std::string(e.what()).find(needle) != std::string::npos,
             what + ": the error '" + e.what() + "' lacks '" + needle + "'");
  }
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
  expect_error(c, "wrong output shape",
               fmt::format("num_tokens_per_rank: shape [{}] where [{}] is required", ranks + 1,
                           ranks),
               [&] {
                 buffer.get_dispatch_layout(*topk_idx.view(), experts,
                                            {short_rank.view(), per_expert.view(), in_rank.view()});
               });
  // A good call still works after the errors.
  buffer.get_dispatch_layout(*topk_idx.view(), experts, out);
  c.expect(per_expert.get<int32_t>()[0] == tokens * topk, "the call after the errors is wrong");
  return c.outcome("5 bad calls refused with the argument named; the next call works");
}

}  // namespace

int main() {
  try {
    courier::Context ctx;
    courier::ep::Buffer buffer(ctx);
    const std::vector<std::pair<const char*, std::function<Outcome()>>> cases = {
        {"layout", [&] { return check_layout(ctx, buffer); }},
        {"layout-errors", [&] { return check_layout_errors(ctx, buffer); }},
    };
    int passed = 0, failed = 0;
    for (const auto& [name, run] : cases) {
      Outcome o = run();
      fmt::print("[{}] {}: {}\n", o.pass ? "PASS" : "FAIL", name, o.detail);
      (o.pass ? passed : failed)++;
    }
    ctx.barrier();
    fmt::print("ep: {} passed, {} failed\n", passed, failed);
    return failed == 0 ? 0 : 1;
  } catch (const courier::Error& e) {
    fmt::print(stderr, "ep_check: {}\n", e.what());
    return 1;
  }
}
