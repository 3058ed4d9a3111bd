// courier::ep: expert-parallel dispatch and combine over a Context
// (docs/ep.md). Tensors cross the API as DLPack views, so frameworks hand
// theirs in without copies; they live in the GPU backend's memory (host
// memory on gpu-host) and are row-major and contiguous.
//
#pragma once

#include <dlpack/dlpack.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <vector>

#include "courier/context.hpp"

namespace courier::ep {

struct BufferOptions {
  size_t num_nvl_bytes = 0;   // for direct stores between GPUs of one host
  size_t num_rdma_bytes = 0;  // for the proxy path
  bool low_latency_mode = false;
  // High-throughput sizing: most tokens a rank dispatches per call, the
  // hidden size and element bytes of its rows, most experts per token.
  // Zero tokens: the Buffer only computes layouts.
  uint32_t max_tokens_per_rank = 0;
  uint32_t hidden = 0;
  uint32_t element_bytes = 2;  // bfloat16; 4 for float32
  uint32_t max_topk = 8;
  // Low-latency sizing (low_latency_mode): the number of experts, which
  // sets the per-expert receive buffers ([experts / ranks, ranks *
  // max_tokens_per_rank, hidden]).
  uint32_t num_experts = 0;
};

// A DLPack view into memory the Buffer owns: valid until the call after next
// that produces the same output (outputs alternate between two sets, by the
// parity of the calls of each kind, as the handles do). Copies keep pointing
// at their own shape.
class TensorView {
 public:
  TensorView() = default;
  // Row-major, or with `strides` (in elements, one per dimension).
  // (Lists, not vectors: a call describes its outputs without allocating.)
  TensorView(void* data, DLDevice device, DLDataType dtype, std::initializer_list<int64_t> shape,
             std::initializer_list<int64_t> strides = {});
  TensorView(const TensorView& other) { *this = other; }
  TensorView& operator=(const TensorView& other);
  const DLTensor& tensor() const { return tensor_; }
  DLTensor& tensor() { return tensor_; }

 private:
  std::array<int64_t, 4> shape_{};
  std::array<int64_t, 4> strides_{};
  DLTensor tensor_{};
};

// What get_dispatch_layout fills: caller-allocated tensors.
struct DispatchLayout {
  DLTensor* num_tokens_per_rank = nullptr;    // [num_ranks] int32
  DLTensor* num_tokens_per_expert = nullptr;  // [num_experts] int32
  DLTensor* is_token_in_rank = nullptr;       // [num_tokens, num_ranks] bool (uint8)
};

struct DispatchArgs {
  // [num_tokens, hidden] bfloat16 or float32; or FP8 e4m3 (kDLFloat, 8
  // bits) with x_scales, into a Buffer sized for bfloat16 rows.
  const DLTensor* x = nullptr;
  const DLTensor* x_scales = nullptr;  // FP8 x: [num_tokens, hidden / 128] float32
  // [num_tokens, topk] int64, -1 = none. May be left out (with
  // topk_weights): rows then go where is_token_in_rank says, and
  // recv_topk_idx, recv_topk_weights have no columns.
  const DLTensor* topk_idx = nullptr;
  const DLTensor* topk_weights = nullptr;      // [num_tokens, topk] float32
  const DLTensor* is_token_in_rank = nullptr;  // [num_tokens, num_ranks] from get_dispatch_layout
  int num_experts = 0;
  // Reuse the layout of an earlier dispatch of the same tokens: topk_idx,
  // topk_weights and is_token_in_rank may then be left out (without
  // topk_idx, recv_topk_idx and recv_topk_weights have no columns).
  const struct DispatchHandle* cached_handle = nullptr;
  // > 0: the receive tensors have exactly this many rows, those past the
  // received ones zero (topk index -1), so shapes do not depend on routing.
  int num_worst_tokens = 0;
};

// What combine needs to bring results back: which rows came from where.
struct DispatchHandle {
  uint32_t num_tokens = 0;            // this rank's tokens in that dispatch
  std::vector<uint32_t> recv_counts;  // rows received from each rank, in rank order
  std::vector<int32_t> send_index;    // [num_tokens * num_ranks]: row of token t at rank r, or -1
  uint32_t hidden = 0;
  uint32_t dtype_code = 0, dtype_bits = 0;
  uint32_t num_worst_tokens = 0;  // rows of recv_x when it was padded (combine's x has as many)
  // A dispatch that did not wait (num_worst_tokens on the caller's stream,
  // docs/ep.md "Calls that do not wait"): recv_counts and send_index are
  // empty, its counts stay on the device, and only a combine before the
  // Buffer's dispatch after next can use the handle. `call` names the
  // dispatch.
  bool counts_on_device = false;
  uint64_t call = 0;
};

struct DispatchResult {
  TensorView recv_x;             // [received, hidden], rows grouped by source rank, in rank order
  TensorView recv_x_scales;      // FP8 dispatch: [received, hidden / 128] float32
  TensorView recv_topk_idx;      // [received, topk] int64: local expert ids, -1 where elsewhere
  TensorView recv_topk_weights;  // [received, topk] float32: 0 where recv_topk_idx is -1
  // Local experts; empty after a dispatch that did not wait.
  std::vector<int32_t> num_recv_tokens_per_expert;
  DispatchHandle handle;
};

struct CombineResult {
  TensorView combined_x;  // [num_tokens, hidden]: per token, the sum of the rows sent back
};

// How low_latency_dispatch lays out the FP8 scales (use_fp8): the shape is
// [local experts, ranks * max_tokens_per_rank, S] either way.
enum class ScalesLayout : uint8_t {
  row_major,     // float32, S = hidden / 128, row-major
  column_major,  // float32, S = hidden / 128, column-major in the last two dimensions (DeepEP's)
  // round_scale's exponent bytes (UE8M0), four per int32, scale 4p + b in
  // byte b of column p: S = ceil(hidden / 512), column-major in the last two
  // dimensions (DeepEP's use_ue8m0). Needs round_scale.
  ue8m0,
};

// The caller's tensors for low_latency_dispatch to receive into instead of
// the Buffer's (the result's views then describe them), on the Buffer's
// device, contiguous: x, count, src_info and layout_range together, and
// x_scales with use_fp8. L = local experts, N = ranks * max_tokens_per_rank.
struct LowLatencyOutputs {
  const DLTensor* x = nullptr;  // [L, N, hidden]: x's dtype, or float8_e4m3 with use_fp8
  // use_fp8, as scales_layout says: row_major [L, N, hidden / 128] float32;
  // column_major [L, hidden / 128, N] float32 and ue8m0 [L, ceil(hidden /
  // 512), N] int32 (the storage: the result's view is its transpose in the
  // last two dimensions, DeepEP's layout).
  const DLTensor* x_scales = nullptr;
  const DLTensor* count = nullptr;     // [L] int32
  const DLTensor* src_info = nullptr;  // [L, N] int32
  // [L, ranks] int64; low_latency_combine of this dispatch reads it: keep
  // it alive and unchanged until then.
  const DLTensor* layout_range = nullptr;
};

struct LowLatencyDispatchArgs {
  const DLTensor* x = nullptr;         // [num_tokens, hidden] bfloat16 or float32
  const DLTensor* topk_idx = nullptr;  // [num_tokens, topk] int64, -1 = none
  // Return after sending; the result's recv_hook() waits for the data and
  // fills the outputs, so compute can run in between.
  bool return_recv_hook = false;
  // Send FP8 e4m3 with one float scale per 128 channels (hidden a multiple
  // of 128): packed_recv_x is then FP8 and packed_recv_x_scales is set.
  bool use_fp8 = false;
  // With use_fp8: each scale rounded up to a power of two,
  // 2^ceil(log2(amax / 448)) (DeepEP's round_scale); needs a GPU backend
  // with the ep_fp8_pow2 capability (GPU ABI minor 4).
  bool round_scale = false;
  // [num_ranks] int64 on the Buffer's device, or null: per rank r, the
  // nanoseconds the receive waited for rank r's rows are added to [r]
  // (DeepEP's dispatch_wait_recv_cost_stats, which counts GPU cycles), to
  // find a slow rank. The proxy path only (GPU ABI 1.9).
  const DLTensor* wait_cost_stats = nullptr;
  // With use_fp8: how packed_recv_x_scales is laid out. Other than
  // row_major: a GPU plugin of ABI 1.10 or later.
  ScalesLayout scales_layout = ScalesLayout::row_major;
  // Receive into the caller's tensors (all or none),
  // so results need no copy and keep their addresses (CUDA graphs).
  LowLatencyOutputs out;
};

// Options of low_latency_combine.
struct LowLatencyCombineOptions {
  // Send the rows in LogFMT (DeepEP's use_logfmt, docs/ep.md "LogFMT
  // combine"): per block of 128 channels whose magnitudes are all below 1,
  // 10 bits per value (a sign and a 9-bit code on a log scale between the
  // block's smallest and largest magnitude) instead of 16; other blocks stay
  // bfloat16. The result approximates the bfloat16 combine. Needs bfloat16
  // x, hidden a multiple of 128, and a GPU backend with the ep_logfmt
  // capability (GPU ABI 1.5). Every rank must pass the same value.
  bool use_logfmt = false;
  // As LowLatencyDispatchArgs::wait_cost_stats, for the combine's wait
  // (DeepEP's combine_wait_recv_cost_stats).
  const DLTensor* wait_cost_stats = nullptr;
  // [num_tokens, hidden] of the dispatch's dtype on the Buffer's device, or
  // null: the sums go there instead of the Buffer's memory.
  const DLTensor* out = nullptr;
};

// What low_latency_combine needs: which dispatch it answers (where each of
// this rank's (token, k) went and which rows came from where stay on the
// device, in the Buffer, for two dispatches).
struct LowLatencyHandle {
  uint32_t num_tokens = 0;
  uint32_t topk = 0;
  uint64_t call = 0;  // which low_latency_dispatch of the Buffer (0, 1, ...)
  uint32_t hidden = 0;
  uint32_t dtype_code = 0, dtype_bits = 0;
  // The dispatch's layout range when it went into the caller's tensor
  // (LowLatencyOutputs::layout_range), else null: the Buffer's.
  const int64_t* layout_range = nullptr;
};

struct LowLatencyDispatchResult {
  // [local experts, ranks * max_tokens_per_rank, hidden]: per expert, the
  // rows from rank 0, then rank 1, ..., packed from row 0.
  TensorView packed_recv_x;
  TensorView packed_recv_x_scales;  // use_fp8: [local experts, ranks * max_tokens, hidden / 128]
  TensorView packed_recv_count;     // [local experts] int32: rows per expert
  TensorView packed_recv_src_info;  // [local experts, ranks * max_tokens] int32: source token
  TensorView packed_recv_layout_range;  // [local experts, ranks] int64: (begin << 32) | count
  LowLatencyHandle handle;
  // Set with return_recv_hook: call before reading the outputs, once, and
  // before the dispatch after next (which reuses its buffers: that call
  // throws otherwise), with the Buffer on the stream it had at the dispatch
  // (the hook's kernels must follow the dispatch's).
  std::function<void()> recv_hook;
};

class Buffer {
 public:
  // Collective over the Context's ranks.
  Buffer(Context& context, const BufferOptions& options = {});
  ~Buffer();
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  // Where the tokens of topk_idx ([num_tokens, topk] int64, -1 = none) go:
  // tokens per rank (once per rank, however many of its experts live
  // there), tokens per expert, and which token goes to which rank. Experts
  // are spread evenly: rank r holds [r * E / R, (r + 1) * E / R). Local (not
  // collective). Throws courier::Error naming the argument that is wrong: a
  // tensor's dtype, shape or device, num_experts not a positive multiple of
  // the number of ranks, or an expert index outside [-1, num_experts).
  void get_dispatch_layout(const DLTensor& topk_idx, int num_experts, const DispatchLayout& out);

  // High-throughput dispatch (collective): every token goes once to each
  // rank that holds one of its experts. Throws courier::Error naming what
  // is wrong: a tensor's dtype, shape or device, more tokens than
  // max_tokens_per_rank, a configuration that differs between ranks (checked
  // at the first call), or a peer that did not answer in COURIER_TIMEOUT_S.
  // Bad arguments on any rank and configurations that differ are refused on
  // every rank together, as courier::CallRefused (the Buffer stays usable);
  // the same holds for the other collective calls below.
  DispatchResult dispatch(const DispatchArgs& args);
  // High-throughput combine (collective): x [received, hidden] in recv_x's
  // order goes back to the tokens' ranks, which sum the rows per token. Weight
  // expert outputs before combining (as with DeepEP).
  CombineResult combine(const DLTensor& x, const DispatchHandle& handle);

  // Low-latency dispatch (collective; a Buffer made with low_latency_mode):
  // every (token, expert) pair travels, into per-expert receive buffers.
  LowLatencyDispatchResult low_latency_dispatch(const LowLatencyDispatchArgs& args);
  // Low-latency combine (collective): x [local experts, ranks * max_tokens,
  // hidden] in packed_recv_x's layout goes back; each rank returns, per
  // token, sum over k of topk_weights[t][k] * (its row from expert k).
  CombineResult low_latency_combine(const DLTensor& x, const DLTensor& topk_idx,
                                    const DLTensor& topk_weights, const LowLatencyHandle& handle,
                                    const LowLatencyCombineOptions& options = {});

  // Copies `from`, a result of this Buffer's (a DispatchResult's or
  // CombineResult's view), into `to`, the caller's tensor of the same
  // shape and dtype on the Buffer's device, both row-major: enqueued on the
  // Buffer's stream behind the call that made the view, so `to` holds the
  // result in that stream's order, owned by the caller, while the Buffer
  // reuses the view's memory. A graph can capture it. Local. With a GPU
  // plugin older than GPU ABI 1.11 (ep_copy) the copy waits for the
  // Buffer's stream and is done when it returns (and is refused while the
  // stream is being captured into a graph).
  void copy_result(const DLTensor& from, const DLTensor& to);
  // Whether copy_result queues its copy on the stream (GPU ABI 1.11).
  bool can_copy_result() const;

  // Where the Buffer's kernels run (docs/ep.md, "Streams"). From now on
  // every call enqueues them on `stream`, the GPU runtime's own handle (a
  // cudaStream_t or hipStream_t; nullptr is the runtime's default stream),
  // behind the work already queued there: inputs written on that stream
  // need no host synchronization first. Low-latency calls (and their recv
  // hooks) then return once their kernels are queued, as DeepEP's: read
  // their outputs in that stream's order or after synchronize(). A failure
  // their kernels find (a bad expert index, a peer that timed out, a call
  // another rank refused) is thrown by the next call or synchronize(), and
  // the Buffer is unusable after it (docs/ep.md, "Calls that do not wait").
  // High-throughput calls still return once their work ran (the host reads
  // the received counts). gpu-host accepts any stream and ignores it (its
  // kernels run before each call returns). Local (not collective). Throws
  // naming the GPU backend where its plugin predates GPU ABI 1.9.
  void set_stream(void* stream);
  // Back to the Buffer's own stream (the default), after waiting for the
  // calls on the caller's (throwing what they found): calls then wait for
  // their work again, and are ordered after nothing the caller queued, so
  // its inputs must be complete.
  void use_own_stream();
  // Whether set_stream can succeed: a GPU plugin that speaks GPU ABI 1.9.
  bool can_set_stream() const;
  // Waits until the Buffer's calls queued so far ran; throws what those that
  // did not wait found. Local.
  void synchronize();

  // What the Buffer's calls cost the GPU backend, for benchmarks
  // (courier-bench ep): kernels launched and host waits on this Buffer's
  // device so far (every Buffer on the device counts in them), and the GPU
  // time between two stamps on the Buffer's stream (gpu_stamp(0), the calls,
  // gpu_stamp(1), then gpu_elapsed_us() waits for stamp 1). The two stamps
  // are the device's, shared by its Buffers: stamp from one thread. A call
  // that waits on the host leaves its stream idle, so stamps around it time
  // the host too (GPU time needs calls that return once queued: set_stream).
  // Local. Throws naming the GPU backend where its plugin predates GPU ABI
  // 1.12.
  struct GpuCounters {
    uint64_t kernel_launches = 0;
    uint64_t host_waits = 0;
  };
  GpuCounters gpu_counters() const;
  void gpu_stamp(uint32_t slot);
  double gpu_elapsed_us();
  // Whether the three above can succeed: a GPU plugin that speaks GPU ABI 1.12.
  bool can_count() const;
  // Queues on the Buffer's stream a GPU spin of `microseconds` and returns at
  // once. Put before gpu_stamp(0), it keeps the stream busy while the host
  // queues the calls, so the stamps time the GPU alone, not the host's time
  // to launch the first kernel (an idle stream starts the clock at once).
  // gpu-host, whose kernels run before their calls return, does nothing.
  // Not counted in gpu_counters. Local. Throws naming the GPU backend where
  // its plugin predates GPU ABI 1.14.
  void gpu_hold(uint32_t microseconds);
  // Whether gpu_hold can succeed: a GPU plugin that speaks GPU ABI 1.14.
  bool can_hold() const;

  int num_ranks() const;
  int rank() const;
  // How dispatch and combine move rows: "direct" (GPU kernels store into
  // the peers' GPUs of this host) or "proxy" (the NIC backend's proxy
  // threads); see COURIER_EP_TRANSPORT.
  const char* transport() const;
  // Where tensors passed to this Buffer must live (kDLCPU on gpu-host,
  // kDLCUDA or kDLROCM with this rank's GPU index otherwise).
  DLDevice device() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace courier::ep
