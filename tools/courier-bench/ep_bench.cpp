#include "ep_bench.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <random>
#include <utility>

#include "core/check.hpp"
#include "courier/ep.hpp"

namespace courier::bench {

namespace {

constexpr DLDataType kBf16{kDLBfloat, 16, 1};
constexpr DLDataType kFp8{kDLFloat, 8, 1};  // e4m3
constexpr DLDataType kF32{kDLFloat, 32, 1};
constexpr DLDataType kI64{kDLInt, 64, 1};
constexpr DLDataType kI32{kDLInt, 32, 1};
constexpr DLDataType kBool{kDLUInt, 8, 1};

// A zero-filled tensor in the Buffer's memory; its first dimension can be
// set anywhere up to the allocation.
class Tensor {
 public:
  Tensor(Context& ctx, DLDevice device, DLDataType dtype, std::vector<int64_t> shape)
      : shape_(std::move(shape)) {
    int64_t elements = 1;
    for (int64_t d : shape_) elements *= d;
    const size_t bytes = std::max<size_t>(1, static_cast<size_t>(elements) * dtype.bits / 8);
    memory_ = ctx.alloc(bytes);
    std::vector<std::byte> zeros(bytes);
    ctx.copy(memory_.data(), zeros.data(), bytes);
    view_.data = memory_.data();
    view_.device = device;
    view_.ndim = static_cast<int>(shape_.size());
    view_.dtype = dtype;
    view_.shape = shape_.data();
  }
  void set_rows(int64_t rows) { shape_[0] = rows; }
  void* data() const { return memory_.data(); }
  DLTensor* view() { return &view_; }

 private:
  std::vector<int64_t> shape_;
  DeviceBuffer memory_;
  DLTensor view_{};
};

// Fills a bfloat16 tensor of `elements` values with what an expert's
// outputs look like to a combine (both modes): random values of magnitude
// below 1 (the ones LogFMT codes; a block of zeros would stay bfloat16).
// One MiB of values, repeated; each rank's its own.
void fill_expert_outputs(Context& ctx, void* data, uint64_t elements, uint32_t rank) {
  std::mt19937_64 rng(104729ull * rank + 1);
  std::uniform_real_distribution<float> value(-0.9f, 0.9f);
  std::vector<uint16_t> chunk(std::min<uint64_t>(elements, uint64_t{1} << 19));
  for (uint16_t& v : chunk) {
    const float f = value(rng);
    uint32_t bits = 0;
    std::memcpy(&bits, &f, sizeof bits);
    v = static_cast<uint16_t>(bits >> 16);
  }
  auto* out = static_cast<uint16_t*>(data);
  for (uint64_t done = 0; done < elements; done += chunk.size()) {
    ctx.copy(out + done, chunk.data(), std::min<uint64_t>(chunk.size(), elements - done) * 2);
  }
}

template <class T>
std::vector<T> read(const Context& ctx, const void* data, size_t count) {
  std::vector<T> out(count);
  if (count > 0) ctx.copy(out.data(), data, count * sizeof(T));
  return out;
}

double now_us() {
  return std::chrono::duration<double, std::micro>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Random routing: distinct experts per token, about one choice in eight
// masked (-1), as in tests/integration/ep/ep_check.cpp.
std::vector<int64_t> random_topk(std::mt19937_64& rng, uint32_t tokens, uint32_t topk,
                                 uint32_t experts, bool masked) {
  std::vector<int64_t> idx;
  for (uint32_t t = 0; t < tokens; ++t) {
    std::vector<int64_t> chosen;
    while (chosen.size() < topk) {
      const auto e = static_cast<int64_t>(rng() % experts);
      if (std::find(chosen.begin(), chosen.end(), e) == chosen.end()) chosen.push_back(e);
    }
    for (uint32_t k = 0; k < topk; ++k) {
      const bool drop = rng() % 8 == 0;
      idx.push_back(masked && drop ? -1 : chosen[k]);
    }
  }
  return idx;
}

// The baseline: per destination one WRITE (split at kMaxLength) of the bytes
// the EP call sends there, from the start of this rank's window into slot
// `my rank` of the destination's.
class RawWrites {
 public:
  RawWrites(Context& ctx, uint64_t slot_bytes)
      : ctx_(ctx),
        slot_(slot_bytes),
        ranks_(static_cast<uint32_t>(ctx.world_size())),
        me_(static_cast<uint32_t>(ctx.rank())),
        memory_(ctx.alloc(slot_ * (ranks_ + 1))) {
    if (slot_ * (ranks_ + 1) > TransferCmd::kMaxOffset) {
      fail("courier-bench ep: the raw-write window ({} bytes) exceeds a window's 4 GiB",
           slot_ * (ranks_ + 1));
    }
    window_ = ctx.register_window(memory_.data(), memory_.size());
  }
  ~RawWrites() {
    try {
      ctx_.deregister_window(window_);
    } catch (const Error&) {
    }
  }
  RawWrites(const RawWrites&) = delete;
  RawWrites& operator=(const RawWrites&) = delete;

  void run(const std::vector<uint64_t>& bytes_to) {
    std::vector<DeviceCommandList> lists;
    for (uint32_t d = 0; d < ranks_; ++d) {
      if (bytes_to[d] == 0) continue;
      if (bytes_to[d] > slot_)
        fail("courier-bench ep: {} bytes to rank {} overflow the slot", bytes_to[d], d);
      DeviceCommandList list;
      list.channel = d % ctx_.num_channels();
      for (uint64_t done = 0; done < bytes_to[d];) {
        const uint64_t n = std::min<uint64_t>(bytes_to[d] - done, TransferCmd::kMaxLength);
        WriteCmdArgs a;
        a.dst_rank = d;
        a.window = window_;
        a.src_offset = done;
        a.dst_offset = slot_ * (1 + me_) + done;
        a.length = n;
        TransferCmd cmd;
        const CmdStatus status = encode_write(a, &cmd);
        if (status != CmdStatus::ok) fail("courier-bench ep: a WRITE: {}", to_string(status));
        list.commands.push_back(cmd);
        done += n;
      }
      lists.push_back(std::move(list));
    }
    if (lists.empty()) return;
    ctx_.run_device_commands(lists);
    for (const DeviceCommandList& list : lists) {
      if (list.status != PushStatus::ok) {
        fail("courier-bench ep: raw WRITEs on channel {} failed: {} ({})", list.channel,
             to_string(list.status), ctx_.channel_stats(list.channel).first_error);
      }
    }
  }

 private:
  Context& ctx_;
  uint64_t slot_;
  uint32_t ranks_, me_;
  DeviceBuffer memory_;
  uint32_t window_ = 0;
};

void add(Context::CopyStats& sum, const Context::CopyStats& more) {
  sum.calls += more.calls;
  sum.bytes += more.bytes;
}

double total(const std::vector<uint64_t>& bytes) {
  double sum = 0;
  for (uint64_t b : bytes) sum += static_cast<double>(b);
  return sum;
}

// What one Courier call cost the GPU backend (Buffer::gpu_counters).
struct GpuCost {
  double gpu_us = 0;
  double host_us = -1;  // the call until it returned (caller's stream), else -1
  uint64_t launches = 0, host_waits = 0;
};

// Timings of one (phase, path) at one token count.
struct Series {
  std::string phase, path;
  std::vector<double> us;
  double bytes = 0;
  Context::CopyStats copies;  // summed over the timed calls
  // Courier's calls where the plugin counts: how many, their kernels and
  // host waits summed, and the GPU times of those that did not wait on the
  // host (stamps around a call that waits time the host too).
  uint32_t counted = 0;
  uint64_t launches = 0, host_waits = 0;
  std::vector<double> gpu_us, host_us;
};

Series series(std::string phase, std::string path, double bytes) {
  Series s;
  s.phase = std::move(phase);
  s.path = std::move(path);
  s.bytes = bytes;
  return s;
}

// The GPU time of a call that did not wait on the host (stamps around one
// that waits time the host too).
void add_gpu_time(Series& s, const GpuCost& cost) {
  if (cost.host_waits == 0) s.gpu_us.push_back(cost.gpu_us);
}

// `held`: the GPU times come from the held pass (held_courier) instead.
void add(Series& s, const GpuCost& cost, bool counted, bool held) {
  if (!counted) return;
  ++s.counted;
  s.launches += cost.launches;
  s.host_waits += cost.host_waits;
  if (cost.host_us >= 0) s.host_us.push_back(cost.host_us);
  if (!held) add_gpu_time(s, cost);
}

EpRow summarize(const EpOptions& o, uint32_t tokens, Series s) {
  std::sort(s.us.begin(), s.us.end());
  EpRow row;
  row.mode = o.mode + (o.fp8 ? "-fp8" : "") + (o.logfmt ? "-logfmt" : "");
  row.phase = s.phase;
  row.path = s.path;
  row.tokens = tokens;
  row.iters = static_cast<uint32_t>(s.us.size());
  row.bytes = s.bytes;
  row.median_us = s.us[s.us.size() / 2];
  row.p99_us = s.us[std::min(s.us.size() - 1, s.us.size() * 99 / 100)];
  row.gbytes_per_s = s.bytes / (row.median_us * 1e3);
  row.host_copies = static_cast<double>(s.copies.calls) / static_cast<double>(s.us.size());
  row.host_bytes = static_cast<double>(s.copies.bytes) / static_cast<double>(s.us.size());
  if (s.counted > 0) {
    row.counted = true;
    row.launches = static_cast<double>(s.launches) / s.counted;
    row.host_waits = static_cast<double>(s.host_waits) / s.counted;
  }
  if (!s.gpu_us.empty()) {
    std::sort(s.gpu_us.begin(), s.gpu_us.end());
    row.gpu_timed = true;
    row.gpu_median_us = s.gpu_us[s.gpu_us.size() / 2];
  }
  if (!s.host_us.empty()) {
    std::sort(s.host_us.begin(), s.host_us.end());
    row.host_timed = true;
    row.host_median_us = s.host_us[s.host_us.size() / 2];
  }
  return row;
}

// Times `call` between barriers, so every rank starts together; adds the
// host copies it made to *copies.
template <class F>
double timed(Context& ctx, F&& call, Context::CopyStats* copies = nullptr) {
  ctx.barrier();
  const Context::CopyStats before = ctx.copy_stats();
  const double t0 = now_us();
  call();
  const double us = now_us() - t0;
  if (copies != nullptr) {
    const Context::CopyStats after = ctx.copy_stats();
    copies->calls += after.calls - before.calls;
    copies->bytes += after.bytes - before.bytes;
  }
  return us;
}

// timed() for a call of `buffer`, with what it cost the GPU backend in
// *cost where the plugin counts: stamps on the Buffer's stream around the
// call (outside the host's timing) and the counters before and after. The
// stream is idle at the first stamp, so that GPU time includes the host's
// time to launch the call's first kernel: where the plugin can hold the
// stream, held_courier times the GPU instead.
// With the caller's stream (EpOptions::caller_stream) the time runs until
// the call's work is done (Buffer::synchronize after it); the counts are
// the call's own (read before that synchronize, which the timing asked
// for). `held`: the GPU times come from held_courier, so no stamps are
// recorded here and the wall time is the call and its synchronize alone
// (otherwise the stamp after the call is inside it).
template <class F>
double timed_courier(Context& ctx, ep::Buffer& buffer, bool caller_stream, bool held, F&& call,
                     Context::CopyStats* copies, GpuCost* cost) {
  if (!buffer.can_count()) {
    return timed(
        ctx,
        [&] {
          call();
          if (caller_stream) buffer.synchronize();
        },
        copies);
  }
  ctx.barrier();
  const Context::CopyStats copied = ctx.copy_stats();
  const ep::Buffer::GpuCounters before = buffer.gpu_counters();
  if (!held) buffer.gpu_stamp(0);
  const double t0 = now_us();
  call();
  double us = now_us() - t0;
  if (!held) buffer.gpu_stamp(1);
  const double t1 = now_us();
  const ep::Buffer::GpuCounters after = buffer.gpu_counters();
  if (caller_stream) {
    cost->host_us = us;
    const double t2 = now_us();
    buffer.synchronize();
    us = now_us() - t0 - (t2 - t1);  // (reading the counters is not the call's)
  }
  if (!held) cost->gpu_us = buffer.gpu_elapsed_us();
  cost->launches = after.kernel_launches - before.kernel_launches;
  cost->host_waits = after.host_waits - before.host_waits;
  const Context::CopyStats now = ctx.copy_stats();
  copies->calls += now.calls - copied.calls;
  copies->bytes += now.bytes - copied.bytes;
  return us;
}

// How long held_courier holds the stream before a call: longer than any
// call's host time, so the call is all queued when the hold ends.
constexpr uint32_t kHoldUs = 300;

// A call of `buffer` for its GPU time alone, after the timed iterations
// where the plugin can hold the stream (Buffer::can_hold): the stream held
// while the host queues the call between the stamps, so cost->gpu_us is the
// GPU's own time (kernels and the gaps between them) without the host's time
// to prepare and launch the first kernel, which an idle stream would count.
// cost->host_waits says whether the call waited on the host (the stamps
// then time the host too). The wall times come from timed_courier alone.
template <class F>
void held_courier(Context& ctx, ep::Buffer& buffer, bool caller_stream, F&& call, GpuCost* cost) {
  ctx.barrier();
  const uint64_t waits = buffer.gpu_counters().host_waits;
  buffer.gpu_hold(kHoldUs);
  buffer.gpu_stamp(0);
  call();
  buffer.gpu_stamp(1);
  cost->host_waits = buffer.gpu_counters().host_waits - waits;
  if (caller_stream) buffer.synchronize();
  cost->gpu_us = buffer.gpu_elapsed_us();
}

// The floor under held_courier's GPU times: an empty kernel (a zero-length
// hold, one thread) between the same stamps, so a call's GPU time can be
// read against what any kernel between two stamps costs.
void held_floor(Context& ctx, ep::Buffer& buffer, bool caller_stream, std::vector<double>* us) {
  GpuCost cost;
  held_courier(
      ctx, buffer, caller_stream, [&] { buffer.gpu_hold(0); }, &cost);
  us->push_back(cost.gpu_us);
}

// Each Courier row's floor (held_floor's median), where it has a GPU time.
void set_floor(std::vector<EpRow>& rows, size_t first, std::vector<double> floor_us) {
  if (floor_us.empty()) return;
  std::sort(floor_us.begin(), floor_us.end());
  for (size_t i = first; i < rows.size(); ++i) {
    if (!rows[i].gpu_timed) continue;
    rows[i].floor_timed = true;
    rows[i].gpu_floor_us = floor_us[floor_us.size() / 2];
  }
}

// Whether a rank's rows to itself go through the NIC backend too
// (COURIER_EP_LOOPBACK=1); the baseline then writes them to itself as well.
bool loopback() {
  const char* v = std::getenv("COURIER_EP_LOOPBACK");
  return v != nullptr && std::string(v) == "1";
}

struct Setup {
  uint32_t ranks, me, per, max_tokens;
  uint64_t row_bytes;
};

void bench_ht(Context& ctx, const EpOptions& o, const Setup& s, RawWrites& raw,
              std::vector<EpRow>& rows) {
  ep::BufferOptions b;
  b.max_tokens_per_rank = s.max_tokens;
  b.hidden = o.hidden;
  b.element_bytes = 2;
  b.max_topk = o.topk;
  ep::Buffer buffer(ctx, b);
  if (o.caller_stream) buffer.set_stream(nullptr);
  // The GPU times from a held pass (held_courier): only calls on the
  // caller's stream can give them (on the Buffer's own, every call waits).
  const bool held = buffer.can_hold() && o.caller_stream;
  const DLDevice dev = buffer.device();
  const int64_t T = s.max_tokens, R = s.ranks;
  // --fp8: x goes as FP8 e4m3 with a float scale per 128 channels (as
  // DeepEP's high-throughput dispatch takes it); combine stays bfloat16.
  Tensor x(ctx, dev, o.fp8 ? kFp8 : kBf16, {T, o.hidden}), idx(ctx, dev, kI64, {T, o.topk}),
      scales(ctx, dev, kF32, {T, o.fp8 ? o.hidden / 128 : 1}), weights(ctx, dev, kF32, {T, o.topk}),
      per_rank(ctx, dev, kI32, {R}), per_expert(ctx, dev, kI32, {o.experts}),
      in_rank(ctx, dev, kBool, {T, R}), y(ctx, dev, kBf16, {R * T, o.hidden});
  fill_expert_outputs(ctx, y.data(), uint64_t(R * T) * o.hidden, s.me);
  for (uint32_t tokens : o.tokens) {
    std::mt19937_64 rng(7919ull * s.me + tokens);
    const std::vector<int64_t> routing = random_topk(rng, tokens, o.topk, o.experts, !o.unmasked);
    ctx.copy(idx.data(), routing.data(), routing.size() * 8);
    for (Tensor* t : {&x, &scales, &idx, &weights, &in_rank}) t->set_rows(tokens);
    buffer.get_dispatch_layout(*idx.view(), static_cast<int>(o.experts),
                               {per_rank.view(), per_expert.view(), in_rank.view()});
    std::vector<uint64_t> dispatch_to(R), combine_to(R);
    const std::vector<int32_t> counts = read<int32_t>(ctx, per_rank.data(), R);
    const uint64_t sent_row_bytes = o.fp8 ? o.hidden + o.hidden / 128 * 4 : s.row_bytes;
    for (uint32_t d = 0; d < s.ranks; ++d) {
      dispatch_to[d] = d == s.me && !loopback() ? 0 : counts[d] * sent_row_bytes;
    }
    ep::DispatchArgs args;
    args.x = x.view();
    if (o.fp8) args.x_scales = scales.view();
    args.topk_idx = idx.view();
    args.topk_weights = weights.view();
    args.is_token_in_rank = in_rank.view();
    args.num_experts = static_cast<int>(o.experts);
    const std::string path = fmt::format("courier-{}", buffer.transport());
    Series d = series("dispatch", path, total(dispatch_to));
    Series dr = series("dispatch", "raw-write", d.bytes);
    Series c = series("combine", path, 0), cr = series("combine", "raw-write", 0);
    for (uint32_t i = 0; i < o.warmup + o.iters; ++i) {
      ep::DispatchResult got;
      Context::CopyStats dc, cc;
      GpuCost dg, cg;
      const double td = timed_courier(
          ctx, buffer, o.caller_stream, held, [&] { got = buffer.dispatch(args); }, &dc, &dg);
      const double tdr = timed(ctx, [&] { raw.run(dispatch_to); });
      for (uint32_t r = 0; r < s.ranks; ++r) {
        combine_to[r] = r == s.me && !loopback() ? 0 : got.handle.recv_counts[r] * s.row_bytes;
      }
      y.set_rows(got.recv_x.tensor().shape[0]);
      const double tc = timed_courier(
          ctx, buffer, o.caller_stream, held, [&] { buffer.combine(*y.view(), got.handle); }, &cc,
          &cg);
      const double tcr = timed(ctx, [&] { raw.run(combine_to); });
      if (i < o.warmup) continue;
      d.us.push_back(td);
      dr.us.push_back(tdr);
      c.us.push_back(tc);
      cr.us.push_back(tcr);
      add(d.copies, dc);
      add(c.copies, cc);
      add(d, dg, buffer.can_count(), held);
      add(c, cg, buffer.can_count(), held);
      c.bytes = cr.bytes = total(combine_to);
    }
    // The GPU times, each call with the stream held (held_courier), and
    // their floor.
    std::vector<double> floor_us;
    for (uint32_t i = 0; held && i < o.iters; ++i) {
      ep::DispatchResult got;
      GpuCost dg, cg;
      held_courier(
          ctx, buffer, o.caller_stream, [&] { got = buffer.dispatch(args); }, &dg);
      y.set_rows(got.recv_x.tensor().shape[0]);
      held_courier(
          ctx, buffer, o.caller_stream, [&] { buffer.combine(*y.view(), got.handle); }, &cg);
      add_gpu_time(d, dg);
      add_gpu_time(c, cg);
      held_floor(ctx, buffer, o.caller_stream, &floor_us);
    }
    const size_t first = rows.size();
    for (Series* series : {&d, &dr, &c, &cr}) rows.push_back(summarize(o, tokens, *series));
    set_floor(rows, first, std::move(floor_us));
  }
}

void bench_ll(Context& ctx, const EpOptions& o, const Setup& s, RawWrites& raw,
              std::vector<EpRow>& rows) {
  ep::BufferOptions b;
  b.low_latency_mode = true;
  b.max_tokens_per_rank = s.max_tokens;
  b.hidden = o.hidden;
  b.element_bytes = 2;
  b.max_topk = o.topk;
  b.num_experts = o.experts;
  ep::Buffer buffer(ctx, b);
  if (o.caller_stream) buffer.set_stream(nullptr);
  // The GPU times from a held pass (held_courier): only calls on the
  // caller's stream can give them (on the Buffer's own, every call waits).
  const bool held = buffer.can_hold() && o.caller_stream;
  const DLDevice dev = buffer.device();
  const int64_t T = s.max_tokens, R = s.ranks, per = s.per;
  Tensor x(ctx, dev, kBf16, {T, o.hidden}), idx(ctx, dev, kI64, {T, o.topk}),
      weights(ctx, dev, kF32, {T, o.topk}), y(ctx, dev, kBf16, {per, R * T, o.hidden});
  fill_expert_outputs(ctx, y.data(), uint64_t(per) * uint64_t(R * T) * o.hidden, s.me);
  ep::LowLatencyCombineOptions combine_options;
  combine_options.use_logfmt = o.logfmt;
  for (uint32_t tokens : o.tokens) {
    std::mt19937_64 rng(7919ull * s.me + tokens);
    const std::vector<int64_t> routing = random_topk(rng, tokens, o.topk, o.experts, !o.unmasked);
    ctx.copy(idx.data(), routing.data(), routing.size() * 8);
    for (Tensor* t : {&x, &idx, &weights}) t->set_rows(tokens);
    std::vector<uint64_t> dispatch_to(R, 0), combine_to(R, 0);
    // An FP8 row travels as hidden bytes plus one float scale per 128.
    const uint64_t sent_row_bytes = o.fp8 ? o.hidden + o.hidden / 128 * 4 : s.row_bytes;
    for (int64_t e : routing) {
      if (e >= 0 && (e / s.per != s.me || loopback())) dispatch_to[e / s.per] += sent_row_bytes;
    }
    ep::LowLatencyDispatchArgs args;
    args.x = x.view();
    args.topk_idx = idx.view();
    args.use_fp8 = o.fp8;
    const std::string path = fmt::format("courier-{}", buffer.transport());
    Series d = series("dispatch", path, total(dispatch_to));
    Series dr = series("dispatch", "raw-write", d.bytes);
    Series c = series("combine", path, 0), cr = series("combine", "raw-write", 0);
    for (uint32_t i = 0; i < o.warmup + o.iters; ++i) {
      ep::LowLatencyDispatchResult got;
      Context::CopyStats dc, cc;
      GpuCost dg, cg;
      const double td = timed_courier(
          ctx, buffer, o.caller_stream, held, [&] { got = buffer.low_latency_dispatch(args); }, &dc,
          &dg);
      const double tdr = timed(ctx, [&] { raw.run(dispatch_to); });
      const std::vector<int64_t> ranges =
          read<int64_t>(ctx, got.packed_recv_layout_range.tensor().data, size_t(per * R));
      std::fill(combine_to.begin(), combine_to.end(), 0);
      for (int64_t e = 0; e < per; ++e) {
        for (uint32_t r = 0; r < s.ranks; ++r) {
          if (r != s.me || loopback()) {
            combine_to[r] += (ranges[e * R + r] & 0xffffffff) * s.row_bytes;
          }
        }
      }
      const double tc = timed_courier(
          ctx, buffer, o.caller_stream, held,
          [&] {
            buffer.low_latency_combine(*y.view(), *idx.view(), *weights.view(), got.handle,
                                       combine_options);
          },
          &cc, &cg);
      const double tcr = timed(ctx, [&] { raw.run(combine_to); });
      if (i < o.warmup) continue;
      d.us.push_back(td);
      dr.us.push_back(tdr);
      c.us.push_back(tc);
      cr.us.push_back(tcr);
      add(d.copies, dc);
      add(c.copies, cc);
      add(d, dg, buffer.can_count(), held);
      add(c, cg, buffer.can_count(), held);
      c.bytes = cr.bytes = total(combine_to);
    }
    // The GPU times, each call with the stream held (held_courier), and
    // their floor.
    std::vector<double> floor_us;
    for (uint32_t i = 0; held && i < o.iters; ++i) {
      ep::LowLatencyDispatchResult got;
      GpuCost dg, cg;
      held_courier(
          ctx, buffer, o.caller_stream, [&] { got = buffer.low_latency_dispatch(args); }, &dg);
      held_courier(
          ctx, buffer, o.caller_stream,
          [&] {
            buffer.low_latency_combine(*y.view(), *idx.view(), *weights.view(), got.handle,
                                       combine_options);
          },
          &cg);
      add_gpu_time(d, dg);
      add_gpu_time(c, cg);
      held_floor(ctx, buffer, o.caller_stream, &floor_us);
    }
    const size_t first = rows.size();
    for (Series* series : {&d, &dr, &c, &cr}) rows.push_back(summarize(o, tokens, *series));
    set_floor(rows, first, std::move(floor_us));
  }
}

}  // namespace

std::vector<EpRow> run_ep_bench(Context& ctx, const EpOptions& o) {
  Setup s;
  s.ranks = static_cast<uint32_t>(ctx.world_size());
  s.me = static_cast<uint32_t>(ctx.rank());
  s.per = o.experts / s.ranks;
  s.max_tokens = *std::max_element(o.tokens.begin(), o.tokens.end());
  s.row_bytes = uint64_t{o.hidden} * 2;
  // A slot holds the most one rank can send another: every (token, expert)
  // pair of the largest token count.
  RawWrites raw(ctx, uint64_t{s.max_tokens} * o.topk * s.row_bytes);
  std::vector<EpRow> rows;
  if (o.mode == "ht") {
    bench_ht(ctx, o, s, raw, rows);
  } else {
    bench_ll(ctx, o, s, raw, rows);
  }
  ctx.barrier();
  return rows;
}

}  // namespace courier::bench
