// moe_demo: one MoE layer's communication with courier::ep (docs/ep.md).
// Every rank routes random bfloat16 tokens to top-k experts (some choices
// masked with -1), dispatches them, lets identity "experts" send them back
// and combines, in high-throughput mode (ht) and low-latency mode (ll).
// Each phase is checked against a plain computation, then timed.
//
//   courier-run -n 4 build/bin/moe_demo [--tokens N] [--hidden H] [--topk K]
//       [--experts E] [--mode ll|ht|both] [--provider shm|tcp] [--iters N]
//
// Prints the configuration, "<mode> <phase> OK" (or FAILED with the reason)
// per phase and mode, and a table of latency (median, p99 over the timed
// iterations, after 2 warm-up ones) and GB/s: bytes of the token rows this
// rank sent to other ranks in the phase / median time, as measured on rank 0. Exit status: 0
// when every check passed, 1 when one failed or the library threw, 2 for an
// impossible configuration.
#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "courier/bootstrap.hpp"  // Context::bootstrap(): the job's verdict exchange
#include "courier/context.hpp"
#include "courier/ep.hpp"

namespace {

constexpr const char* kUsage =
    "usage: moe_demo [--tokens N] [--hidden H] [--topk K] [--experts E] [--mode ll|ht|both] "
    "[--provider shm|tcp] [--iters N]";

struct Options {
  int64_t tokens = 128;  // per rank
  int64_t hidden = 1024;
  int64_t topk = 4;
  int64_t experts = 16;
  int64_t iters = 20;
  bool ht = true, ll = true;
  std::string provider;  // "": COURIER_OFI_PROVIDER as set
};

// One line on stderr, exit 2: the same on every rank, since every rank
// parses the same arguments.
[[noreturn]] void config_error(const std::string& message) {
  fmt::print(stderr, "moe_demo: {} ({})\n", message, kUsage);
  std::exit(2);
}

int64_t parse_positive(const std::string& flag, const char* text, int64_t max) {
  char* end = nullptr;
  errno = 0;
  long long value = std::strtoll(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || value < 1 || value > max) {
    config_error(
        fmt::format("{} '{}' is invalid: expected an integer in [1, {}]", flag, text, max));
  }
  return value;
}

// The job's size before any Context exists (courier-run, or an MPI
// launcher); 0 when unknown, and then checked once the Context is up.
int64_t world_size_from_env() {
  for (const char* name : {"COURIER_WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE"}) {
    const char* text = std::getenv(name);
    if (text == nullptr) continue;
    char* end = nullptr;
    long long value = std::strtoll(text, &end, 10);
    if (end != text && *end == '\0' && value > 0) return value;
  }
  return 0;
}

void check_against_ranks(const Options& o, int64_t ranks) {
  if (o.experts % ranks != 0) {
    config_error(fmt::format("--experts {} is not a multiple of the {} ranks", o.experts, ranks));
  }
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) config_error(arg + " needs a value");
      return argv[++i];
    };
    if (arg == "--help" || arg == "-h") {
      fmt::print("{}\n", kUsage);
      std::exit(0);
    } else if (arg == "--tokens") {
      o.tokens = parse_positive(arg, value(), 1 << 16);
    } else if (arg == "--hidden") {
      o.hidden = parse_positive(arg, value(), 1 << 16);
    } else if (arg == "--topk") {
      o.topk = parse_positive(arg, value(), 64);
    } else if (arg == "--experts") {
      o.experts = parse_positive(arg, value(), 4096);
    } else if (arg == "--iters") {
      o.iters = parse_positive(arg, value(), 1000000);
    } else if (arg == "--mode") {
      const std::string mode = value();
      if (mode != "ll" && mode != "ht" && mode != "both") {
        config_error("--mode '" + mode + "' is invalid: expected ll, ht or both");
      }
      o.ht = mode != "ll";
      o.ll = mode != "ht";
    } else if (arg == "--provider") {
      o.provider = value();
      if (o.provider != "shm" && o.provider != "tcp") {
        config_error("--provider '" + o.provider + "' is invalid: expected shm or tcp");
      }
    } else {
      config_error("unknown argument '" + arg + "'");
    }
  }
  if (o.topk > o.experts) {
    config_error(fmt::format("--topk {} exceeds --experts {}", o.topk, o.experts));
  }
  if (uint64_t(o.tokens) * uint64_t(o.hidden) * 2 > (uint64_t{1} << 30)) {
    config_error(fmt::format("--tokens {} x --hidden {} is more than 1 GiB of bfloat16 rows",
                             o.tokens, o.hidden));
  }
  if (const int64_t ranks = world_size_from_env(); ranks > 0) check_against_ranks(o, ranks);
  return o;
}

constexpr DLDataType kBf16{kDLBfloat, 16, 1};
constexpr DLDataType kF32{kDLFloat, 32, 1};
constexpr DLDataType kI64{kDLInt, 64, 1};
constexpr DLDataType kI32{kDLInt, 32, 1};
constexpr DLDataType kBool{kDLUInt, 8, 1};

// A tensor in the Buffer's memory (ctx.alloc), with its DLPack view; the
// first dimension may shrink below the allocation (set_rows).
class Tensor {
 public:
  Tensor(courier::Context& ctx, DLDevice device, DLDataType dtype, std::vector<int64_t> shape)
      : ctx_(&ctx), shape_(std::move(shape)) {
    int64_t elements = 1;
    for (int64_t d : shape_) elements *= d;
    bytes_ = static_cast<size_t>(elements) * dtype.bits / 8;
    memory_ = ctx.alloc(bytes_ == 0 ? 1 : bytes_);
    view_.data = memory_.data();
    view_.device = device;
    view_.ndim = static_cast<int>(shape_.size());
    view_.dtype = dtype;
    view_.shape = shape_.data();
  }
  template <class T>
  void set(const std::vector<T>& values) {
    ctx_->copy(memory_.data(), values.data(), values.size() * sizeof(T));
  }
  void set_rows(int64_t rows) { shape_[0] = rows; }
  void* data() const { return memory_.data(); }
  DLTensor* view() { return &view_; }

 private:
  courier::Context* ctx_;
  std::vector<int64_t> shape_;
  size_t bytes_ = 0;
  courier::DeviceBuffer memory_;
  DLTensor view_{};
};

template <class T>
std::vector<T> read(const courier::Context& ctx, const void* data, size_t count) {
  std::vector<T> out(count);
  if (count > 0) ctx.copy(out.data(), data, count * sizeof(T));
  return out;
}

uint16_t to_bf16(float f) {  // round to nearest even
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  bits += 0x7fff + ((bits >> 16) & 1);
  return static_cast<uint16_t>(bits >> 16);
}
float from_bf16(uint16_t v) {
  const uint32_t bits = uint32_t{v} << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// One rank's routing and tokens for one call; any rank can rebuild any
// other's (the seed is the rank and the call).
struct Inputs {
  std::vector<int64_t> idx;    // [tokens, topk], distinct experts, ~1 in 8 masked (-1)
  std::vector<float> weights;  // [tokens, topk], quarters in [0.25, 1]
  std::vector<uint16_t> x;     // [tokens, hidden] bfloat16: small integers, exact
};

Inputs inputs_of(const Options& o, int rank, int call) {
  std::mt19937_64 rng(1000003ull * rank + 7919ull * call + 17);
  Inputs in;
  for (int64_t t = 0; t < o.tokens; ++t) {
    std::vector<int64_t> chosen;
    while (static_cast<int64_t>(chosen.size()) < o.topk) {
      const auto e = static_cast<int64_t>(rng() % static_cast<uint64_t>(o.experts));
      if (std::find(chosen.begin(), chosen.end(), e) == chosen.end()) chosen.push_back(e);
    }
    for (int64_t k = 0; k < o.topk; ++k) {
      in.idx.push_back(rng() % 8 == 0 ? -1 : chosen[k]);
      in.weights.push_back(0.25f * static_cast<float>(1 + rng() % 4));
    }
  }
  in.x.resize(static_cast<size_t>(o.tokens * o.hidden));
  for (int64_t t = 0; t < o.tokens; ++t) {
    for (int64_t h = 0; h < o.hidden; ++h) {
      const int64_t v = (rank * 37 + t * 11 + h * 3 + call * 5) % 101 - 50;
      in.x[t * o.hidden + h] = to_bf16(static_cast<float>(v));
    }
  }
  return in;
}

// Sum of the weights of the token's unmasked choices, over all of them or
// only those living on rank `only_rank`.
float weight_sum(const Options& o, const Inputs& in, int64_t t, int per, int only_rank = -1) {
  float sum = 0;
  for (int64_t k = 0; k < o.topk; ++k) {
    const int64_t e = in.idx[t * o.topk + k];
    if (e >= 0 && (only_rank < 0 || e / per == only_rank)) sum += in.weights[t * o.topk + k];
  }
  return sum;
}

// Counts wrong combined values: want = x * total weight, bfloat16 tolerance.
int64_t combine_errors(const Options& o, const Inputs& mine, const std::vector<uint16_t>& got,
                       int per) {
  int64_t wrong = 0;
  for (int64_t t = 0; t < o.tokens; ++t) {
    const float total = weight_sum(o, mine, t, per);
    for (int64_t h = 0; h < o.hidden; ++h) {
      const float want = from_bf16(mine.x[t * o.hidden + h]) * total;
      const float have = from_bf16(got[t * o.hidden + h]);
      if (std::fabs(have - want) > 1e-2f * std::fabs(want) + 1e-2f) ++wrong;
    }
  }
  return wrong;
}

// What one rank found in one phase; gathered so that rank 0 reports the job.
struct Verdict {
  uint32_t ok = 1;
  char reason[200] = {};
};

class Job {
 public:
  explicit Job(courier::Context& ctx) : ctx_(ctx) {}
  // Every rank's verdict on one check; rank 0 prints the line. True if all passed.
  bool report(const std::string& name, const std::string& my_failure) {
    Verdict mine;
    mine.ok = my_failure.empty() ? 1 : 0;
    std::snprintf(mine.reason, sizeof mine.reason, "%s", my_failure.c_str());
    if (!my_failure.empty())
      fmt::print(stderr, "rank {}: {} FAILED: {}\n", ctx_.rank(), name, my_failure);
    std::vector<std::byte> all =
        ctx_.bootstrap().allgather(std::as_bytes(std::span<const Verdict, 1>(&mine, 1)));
    std::string first;
    int failed = 0;
    for (int r = 0; r < ctx_.world_size(); ++r) {
      Verdict v;
      std::memcpy(&v, all.data() + r * sizeof(Verdict), sizeof v);
      if (v.ok) continue;
      if (failed++ == 0) first = fmt::format("rank {}: {}", r, v.reason);
    }
    if (ctx_.rank() == 0) {
      if (failed == 0) {
        fmt::print("{} OK\n", name);
      } else {
        fmt::print("{} FAILED on {} rank(s): {}\n", name, failed, first);
      }
      std::fflush(stdout);
    }
    (failed == 0 ? passed_ : failed_)++;
    return failed == 0;
  }
  int passed() const { return passed_; }
  int failed() const { return failed_; }

 private:
  courier::Context& ctx_;
  int passed_ = 0, failed_ = 0;
};

struct Timing {
  std::string mode, phase;
  std::vector<double> us;  // per timed iteration
  double bytes = 0;        // row bytes this rank moves per call
};

double now_us() {
  return std::chrono::duration<double, std::micro>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// ---- high-throughput mode ----

class HighThroughputRun {
 public:
  HighThroughputRun(courier::Context& ctx, const Options& o)
      : ctx_(ctx),
        o_(o),
        ranks_(ctx.world_size()),
        me_(ctx.rank()),
        per_(static_cast<int>(o.experts) / ranks_),
        buffer_(ctx, buffer_options(o)),
        dev_(buffer_.device()),
        x_(ctx, dev_, kBf16, {o.tokens, o.hidden}),
        idx_(ctx, dev_, kI64, {o.tokens, o.topk}),
        weights_(ctx, dev_, kF32, {o.tokens, o.topk}),
        per_rank_(ctx, dev_, kI32, {ranks_}),
        per_expert_(ctx, dev_, kI32, {o.experts}),
        in_rank_(ctx, dev_, kBool, {o.tokens, ranks_}),
        y_(ctx, dev_, kBf16, {ranks_ * o.tokens, o.hidden}) {}

  static courier::ep::BufferOptions buffer_options(const Options& o) {
    courier::ep::BufferOptions b;
    b.max_tokens_per_rank = static_cast<uint32_t>(o.tokens);
    b.hidden = static_cast<uint32_t>(o.hidden);
    b.element_bytes = 2;
    b.max_topk = static_cast<uint32_t>(o.topk);
    return b;
  }

  void load(const Inputs& in) {
    x_.set(in.x);
    idx_.set(in.idx);
    weights_.set(in.weights);
    buffer_.get_dispatch_layout(*idx_.view(), static_cast<int>(o_.experts),
                                {per_rank_.view(), per_expert_.view(), in_rank_.view()});
  }

  courier::ep::DispatchResult dispatch() {
    courier::ep::DispatchArgs args;
    args.x = x_.view();
    args.topk_idx = idx_.view();
    args.topk_weights = weights_.view();
    args.is_token_in_rank = in_rank_.view();
    args.num_experts = static_cast<int>(o_.experts);
    return buffer_.dispatch(args);
  }

  // Checks what arrived against every rank's inputs; returns "" or the reason.
  // Fills y_ with the expert outputs: each row times its local weight sum.
  std::string check_dispatch(const courier::ep::DispatchResult& got, int call) {
    std::vector<uint16_t> want_x, y;
    std::vector<int32_t> want_per_expert(per_, 0);
    for (int s = 0; s < ranks_; ++s) {
      const Inputs in = inputs_of(o_, s, call);
      for (int64_t t = 0; t < o_.tokens; ++t) {
        bool here = false;
        for (int64_t k = 0; k < o_.topk; ++k) {
          const int64_t e = in.idx[t * o_.topk + k];
          if (e >= 0 && e / per_ == me_) {
            here = true;
            ++want_per_expert[e - int64_t{me_} * per_];
          }
        }
        if (!here) continue;
        const float w = weight_sum(o_, in, t, per_, me_);
        for (int64_t h = 0; h < o_.hidden; ++h) {
          const uint16_t v = in.x[t * o_.hidden + h];
          want_x.push_back(v);
          y.push_back(to_bf16(from_bf16(v) * w));
        }
      }
    }
    const int64_t rows = got.recv_x.tensor().shape[0];
    const auto want_rows = static_cast<int64_t>(want_x.size() / o_.hidden);
    y_.set_rows(rows);
    if (rows != want_rows) {
      return fmt::format("received {} rows, expected {}", rows, want_rows);
    }
    y_.set(y);
    if (read<uint16_t>(ctx_, got.recv_x.tensor().data, want_x.size()) != want_x) {
      return "received rows differ from the source tokens";
    }
    if (got.num_recv_tokens_per_expert != want_per_expert) {
      return "tokens per local expert differ";
    }
    return "";
  }

  std::string check_combine(const courier::ep::CombineResult& got, const Inputs& mine) {
    const std::vector<uint16_t> out = read<uint16_t>(ctx_, got.combined_x.tensor().data,
                                                     static_cast<size_t>(o_.tokens * o_.hidden));
    const int64_t wrong = combine_errors(o_, mine, out, per_);
    return wrong == 0 ? "" : fmt::format("{} combined values off", wrong);
  }

  courier::ep::CombineResult combine(const courier::ep::DispatchHandle& handle) {
    return buffer_.combine(*y_.view(), handle);
  }

  // Prepares y_ for combine without checking (timed runs): the received rows.
  void pass_through(const courier::ep::DispatchResult& got) {
    const int64_t rows = got.recv_x.tensor().shape[0];
    y_.set_rows(rows);
    ctx_.copy(y_.data(), got.recv_x.tensor().data, static_cast<size_t>(rows * o_.hidden * 2));
  }

  // Row bytes this rank sends to other ranks in dispatch (a token once per
  // rank) and in combine (the rows other ranks sent it).
  double dispatch_bytes() const {
    const std::vector<int32_t> rows = read<int32_t>(ctx_, per_rank_.data(), ranks_);
    int64_t sent = 0;
    for (int r = 0; r < ranks_; ++r) sent += r == me_ ? 0 : rows[r];
    return static_cast<double>(sent * o_.hidden * 2);
  }
  double combine_bytes(const courier::ep::DispatchHandle& handle) const {
    int64_t sent = 0;
    for (int r = 0; r < ranks_; ++r) sent += r == me_ ? 0 : handle.recv_counts[r];
    return static_cast<double>(sent * o_.hidden * 2);
  }

 private:
  courier::Context& ctx_;
  const Options& o_;
  const int ranks_, me_, per_;
  courier::ep::Buffer buffer_;
  const DLDevice dev_;
  Tensor x_, idx_, weights_, per_rank_, per_expert_, in_rank_, y_;
};

// ---- low-latency mode ----

class LowLatencyRun {
 public:
  LowLatencyRun(courier::Context& ctx, const Options& o)
      : ctx_(ctx),
        o_(o),
        ranks_(ctx.world_size()),
        me_(ctx.rank()),
        per_(static_cast<int>(o.experts) / ranks_),
        slots_(ranks_ * o.tokens),
        buffer_(ctx, buffer_options(o)),
        dev_(buffer_.device()),
        x_(ctx, dev_, kBf16, {o.tokens, o.hidden}),
        idx_(ctx, dev_, kI64, {o.tokens, o.topk}),
        weights_(ctx, dev_, kF32, {o.tokens, o.topk}),
        y_(ctx, dev_, kBf16, {per_, slots_, o.hidden}) {}

  static courier::ep::BufferOptions buffer_options(const Options& o) {
    courier::ep::BufferOptions b;
    b.low_latency_mode = true;
    b.max_tokens_per_rank = static_cast<uint32_t>(o.tokens);
    b.hidden = static_cast<uint32_t>(o.hidden);
    b.element_bytes = 2;
    b.max_topk = static_cast<uint32_t>(o.topk);
    b.num_experts = static_cast<uint32_t>(o.experts);
    return b;
  }

  void load(const Inputs& in) {
    x_.set(in.x);
    idx_.set(in.idx);
    weights_.set(in.weights);
    pairs_ = 0;
    for (int64_t e : in.idx) pairs_ += e >= 0 && e / per_ != me_ ? 1 : 0;
  }

  courier::ep::LowLatencyDispatchResult dispatch() {
    courier::ep::LowLatencyDispatchArgs args;
    args.x = x_.view();
    args.topk_idx = idx_.view();
    return buffer_.low_latency_dispatch(args);
  }

  // Per local expert and source rank: the count, the layout range, and the
  // rows (each the source token named in src_info, every expected token
  // exactly once, in any order).
  std::string check_dispatch(const courier::ep::LowLatencyDispatchResult& got, int call) {
    const std::vector<int32_t> counts =
        read<int32_t>(ctx_, got.packed_recv_count.tensor().data, per_);
    const std::vector<int64_t> ranges =
        read<int64_t>(ctx_, got.packed_recv_layout_range.tensor().data, size_t(per_) * ranks_);
    const std::vector<int32_t> src =
        read<int32_t>(ctx_, got.packed_recv_src_info.tensor().data, size_t(per_ * slots_));
    const std::vector<uint16_t> rows = read<uint16_t>(
        ctx_, got.packed_recv_x.tensor().data, static_cast<size_t>(per_ * slots_ * o_.hidden));
    std::vector<int64_t> total(per_, 0);
    for (int s = 0; s < ranks_; ++s) {
      const Inputs in = inputs_of(o_, s, call);
      for (int e = 0; e < per_; ++e) {
        const int64_t expert = int64_t{me_} * per_ + e;
        std::set<int64_t> want;
        for (int64_t t = 0; t < o_.tokens; ++t) {
          for (int64_t k = 0; k < o_.topk; ++k) {
            if (in.idx[t * o_.topk + k] == expert) want.insert(t);
          }
        }
        const int64_t range = ranges[size_t(e) * ranks_ + s];
        const int64_t begin = range >> 32, count = range & 0xffffffff;
        if (count != static_cast<int64_t>(want.size()) || begin != total[e]) {
          return fmt::format("expert {} from rank {}: layout range ({}, {}), expected ({}, {})",
                             expert, s, begin, count, total[e], want.size());
        }
        for (int64_t i = begin; i < begin + count; ++i) {
          const int64_t t = src[size_t(e * slots_ + i)];
          if (want.erase(t) != 1) {
            return fmt::format("expert {} row {}: source token {} was not sent by rank {} or twice",
                               expert, i, t, s);
          }
          const uint16_t* row = rows.data() + (e * slots_ + i) * o_.hidden;
          if (!std::equal(row, row + o_.hidden, in.x.begin() + t * o_.hidden)) {
            return fmt::format("expert {} row {}: differs from rank {}'s token {}", expert, i, s,
                               t);
          }
        }
        total[e] += count;
      }
    }
    for (int e = 0; e < per_; ++e) {
      if (counts[e] != total[e]) {
        return fmt::format("packed_recv_count[{}] = {}, expected {}", e, counts[e], total[e]);
      }
    }
    pass_through(got);  // identity experts: what arrived goes back as it is
    return "";
  }

  void pass_through(const courier::ep::LowLatencyDispatchResult& got) {
    ctx_.copy(y_.data(), got.packed_recv_x.tensor().data,
              static_cast<size_t>(per_ * slots_ * o_.hidden * 2));
    const std::vector<int64_t> ranges =
        read<int64_t>(ctx_, got.packed_recv_layout_range.tensor().data, size_t(per_) * ranks_);
    received_ = 0;
    for (int e = 0; e < per_; ++e) {
      for (int s = 0; s < ranks_; ++s) {
        if (s != me_) received_ += ranges[size_t(e) * ranks_ + s] & 0xffffffff;
      }
    }
  }

  courier::ep::CombineResult combine(const courier::ep::LowLatencyHandle& handle) {
    return buffer_.low_latency_combine(*y_.view(), *idx_.view(), *weights_.view(), handle);
  }

  std::string check_combine(const courier::ep::CombineResult& got, const Inputs& mine) {
    const std::vector<uint16_t> out = read<uint16_t>(ctx_, got.combined_x.tensor().data,
                                                     static_cast<size_t>(o_.tokens * o_.hidden));
    const int64_t wrong = combine_errors(o_, mine, out, per_);
    return wrong == 0 ? "" : fmt::format("{} combined values off", wrong);
  }

  // Row bytes this rank sends to other ranks: one row per (token, remote
  // expert) pair; back, one per row another rank sent it.
  double dispatch_bytes() const { return static_cast<double>(pairs_ * o_.hidden * 2); }
  double combine_bytes() const { return static_cast<double>(received_ * o_.hidden * 2); }

 private:
  courier::Context& ctx_;
  const Options& o_;
  const int ranks_, me_, per_;
  const int64_t slots_;
  courier::ep::Buffer buffer_;
  const DLDevice dev_;
  Tensor x_, idx_, weights_, y_;
  int64_t pairs_ = 0, received_ = 0;
};

constexpr int kChecked = 2;  // checked calls: both halves of a double buffer
constexpr int kWarmup = 2;

// Runs `call` and returns "" or the library's error (so every rank still
// reaches the verdict exchange).
constexpr const char* kThrew = "the library threw: ";
template <class F>
std::string guarded(F&& call) {
  try {
    return call();
  } catch (const courier::Error& e) {
    return kThrew + std::string(e.what());
  }
}
bool threw(const std::string& failure) { return failure.rfind(kThrew, 0) == 0; }

void run_ht(courier::Context& ctx, const Options& o, Job& job, std::vector<Timing>& timings) {
  HighThroughputRun ht(ctx, o);
  std::string dispatch_failure, combine_failure;
  for (int call = 0; call < kChecked; ++call) {
    const Inputs mine = inputs_of(o, ctx.rank(), call);
    ht.load(mine);
    courier::ep::DispatchResult got;
    const std::string d = guarded([&] {
      got = ht.dispatch();
      return ht.check_dispatch(got, call);
    });
    if (!d.empty() && dispatch_failure.empty()) {
      dispatch_failure = fmt::format("call {}: {}", call, d);
    }
    if (threw(d)) {  // every rank failed the call: no combine to run
      combine_failure = "not run: dispatch threw";
      break;
    }
    // Combine runs on every rank even after a wrong dispatch: peers wait for it.
    const std::string c = guarded([&] { return ht.check_combine(ht.combine(got.handle), mine); });
    if (!c.empty() && combine_failure.empty())
      combine_failure = fmt::format("call {}: {}", call, c);
  }
  const bool dispatch_ok = job.report("ht dispatch", dispatch_failure);
  const bool combine_ok = job.report("ht combine", combine_failure);
  if (!dispatch_ok || !combine_ok) return;

  Timing td{"ht", "dispatch", {}, 0}, tc{"ht", "combine", {}, 0};
  const Inputs mine = inputs_of(o, ctx.rank(), kChecked);
  ht.load(mine);
  td.bytes = ht.dispatch_bytes();
  for (int64_t i = 0; i < kWarmup + o.iters; ++i) {
    ctx.barrier();
    const double t0 = now_us();
    courier::ep::DispatchResult got = ht.dispatch();
    const double t1 = now_us();
    ht.pass_through(got);
    tc.bytes = ht.combine_bytes(got.handle);
    ctx.barrier();
    const double t2 = now_us();
    ht.combine(got.handle);
    const double t3 = now_us();
    if (i < kWarmup) continue;
    td.us.push_back(t1 - t0);
    tc.us.push_back(t3 - t2);
  }
  timings.push_back(td);
  timings.push_back(tc);
}

void run_ll(courier::Context& ctx, const Options& o, Job& job, std::vector<Timing>& timings) {
  LowLatencyRun ll(ctx, o);
  std::string dispatch_failure, combine_failure;
  for (int call = 0; call < kChecked; ++call) {
    const Inputs mine = inputs_of(o, ctx.rank(), call);
    ll.load(mine);
    courier::ep::LowLatencyDispatchResult got;
    const std::string d = guarded([&] {
      got = ll.dispatch();
      return ll.check_dispatch(got, call);
    });
    if (!d.empty() && dispatch_failure.empty()) {
      dispatch_failure = fmt::format("call {}: {}", call, d);
    }
    if (threw(d)) {
      combine_failure = "not run: dispatch threw";
      break;
    }
    if (!d.empty()) ll.pass_through(got);  // combine still runs on every rank
    const std::string c = guarded([&] { return ll.check_combine(ll.combine(got.handle), mine); });
    if (!c.empty() && combine_failure.empty())
      combine_failure = fmt::format("call {}: {}", call, c);
  }
  const bool dispatch_ok = job.report("ll dispatch", dispatch_failure);
  const bool combine_ok = job.report("ll combine", combine_failure);
  if (!dispatch_ok || !combine_ok) return;

  Timing td{"ll", "dispatch", {}, 0}, tc{"ll", "combine", {}, 0};
  const Inputs mine = inputs_of(o, ctx.rank(), kChecked);
  ll.load(mine);
  td.bytes = ll.dispatch_bytes();
  for (int64_t i = 0; i < kWarmup + o.iters; ++i) {
    ctx.barrier();
    const double t0 = now_us();
    courier::ep::LowLatencyDispatchResult got = ll.dispatch();
    const double t1 = now_us();
    ll.pass_through(got);
    tc.bytes = ll.combine_bytes();
    ctx.barrier();
    const double t2 = now_us();
    ll.combine(got.handle);
    const double t3 = now_us();
    if (i < kWarmup) continue;
    td.us.push_back(t1 - t0);
    tc.us.push_back(t3 - t2);
  }
  timings.push_back(td);
  timings.push_back(tc);
}

void print_table(const std::vector<Timing>& timings) {
  if (timings.empty()) return;
  fmt::print("\n{:<5} {:<9} {:>6} {:>12} {:>12} {:>12} {:>9}\n", "mode", "phase", "iters",
             "median us", "p99 us", "row bytes", "GB/s");
  for (Timing t : timings) {
    std::sort(t.us.begin(), t.us.end());
    const double median = t.us[t.us.size() / 2];
    const double p99 = t.us[std::min(t.us.size() - 1, t.us.size() * 99 / 100)];
    fmt::print("{:<5} {:<9} {:>6} {:>12.1f} {:>12.1f} {:>12.0f} {:>9.3f}\n", t.mode, t.phase,
               t.us.size(), median, p99, t.bytes, t.bytes / (median * 1e3));
  }
  fmt::print("(rank 0: bytes of the rows it sent to other ranks per call / median time)\n");
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  try {
    courier::ContextOptions options;
    if (!o.provider.empty()) options.env.push_back({"COURIER_OFI_PROVIDER", o.provider});
    courier::Context ctx(options);
    check_against_ranks(o, ctx.world_size());
    if (ctx.rank() == 0) {
      fmt::print(
          "moe_demo: {} ranks, gpu {}, nic {}; {} tokens per rank, hidden {} (bfloat16), top-{}, "
          "{} experts ({} per rank), mode {}, {} timed iterations after {} warm-up\n",
          ctx.world_size(), ctx.gpu_backend(), ctx.nic_backend(), o.tokens, o.hidden, o.topk,
          o.experts, o.experts / ctx.world_size(), o.ht && o.ll ? "both" : (o.ht ? "ht" : "ll"),
          o.iters, kWarmup);
      std::fflush(stdout);
    }
    Job job(ctx);
    std::vector<Timing> timings;
    if (o.ht) run_ht(ctx, o, job, timings);
    if (o.ll) {
      run_ll(ctx, o, job, timings);
    }
    ctx.barrier();
    if (ctx.rank() == 0) {
      print_table(timings);
      fmt::print("moe_demo: {} checks OK, {} FAILED\n", job.passed(), job.failed());
    }
    ctx.barrier();  // nobody tears down an endpoint a peer still uses
    return job.failed() == 0 ? 0 : 1;
  } catch (const courier::Error& e) {
    fmt::print(stderr, "moe_demo: {}\n", e.what());
    return 1;
  }
}
