// courier::ep::Buffer (include/courier/ep.hpp, docs/ep.md): argument
// checks, the layout kernel through the GPU backend.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "core/check.hpp"
#include "core/context_internals.hpp"
#include "core/ep/high_throughput.hpp"
#include "core/ep/low_latency.hpp"
#include "core/ep/peer_windows.hpp"
#include "core/ep/tensor_checks.hpp"
#include "courier/ep.hpp"

namespace courier::ep {

struct Buffer::Impl {
  Impl(Context& context, const BufferOptions& opts)
      : ctx(context),
        gpu(ContextInternals::gpu(context)),
        device(ContextInternals::device(context)),
        device_type(device_type_of(gpu.props().mem_kind)),
        options(opts),
        scratch(context.alloc(64)) {
    if (!gpu.supports(GpuFeature::ep_layout)) {
      fail("GPU backend '{}' has no expert-parallel kernels (capability ep_kernels)",
           gpu.plugin().name);
    }
    const DLDevice dl{device_type, device_type == kDLCPU ? 0 : device};
    if (opts.max_tokens_per_rank > 0 && opts.low_latency_mode) {
      low_latency = std::make_unique<LowLatency>(context, opts, dl);
      transport = low_latency->direct() ? "direct" : "proxy";
    } else if (opts.max_tokens_per_rank > 0) {
      high_throughput = std::make_unique<HighThroughput>(context, opts, dl);
      transport = high_throughput->direct() ? "direct" : "proxy";
    } else {  // a layout-only Buffer: what one with tokens would use
      transport = PeerWindows::usable(context) ? "direct" : "proxy";
    }
  }

  // The caller's stream may go once the Buffer does, before the windows'
  // teardown syncs: back to the backend's own (every call has finished).
  ~Impl() {
    if (caller_stream && gpu.supports(GpuFeature::ep_set_stream))
      (void)gpu.ep().ep_set_stream(gpu.handle(), device, 0, nullptr);
  }
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;

  LowLatency& ll(const char* call) const {
    if (!low_latency) {
      fail(
          "ep::Buffer::{}: the Buffer was not made in low-latency mode (low_latency_mode, "
          "max_tokens_per_rank > 0)",
          call);
    }
    return *low_latency;
  }

  HighThroughput& ht(const char* call) const {
    if (!high_throughput) {
      fail(
          "ep::Buffer::{}: the Buffer was not made in high-throughput mode (max_tokens_per_rank "
          "> 0 and not low_latency_mode)",
          call);
    }
    return *high_throughput;
  }

  // Before a call's kernels: the device's EP stream is this Buffer's choice
  // (another Buffer on the device may have chosen another since).
  void select_stream() const {
    if (!gpu.supports(GpuFeature::ep_set_stream)) return;  // only the backend's own stream
    if (gpu.ep().ep_set_stream(gpu.handle(), device, caller_stream ? 1 : 0, stream) != 0) {
      fail("ep::Buffer: GPU backend '{}' cannot run EP kernels on {}: {}", gpu.plugin().name,
           caller_stream ? "the caller's stream" : "its own stream", gpu.last_error());
    }
  }

  // Throws, naming `call` and why, when the Buffer's stream is being
  // captured into a graph and the call cannot be (`why`: what it does on
  // the host between its kernels). After select_stream.
  void refuse_capture(const char* call, const char* why) const {
    if (!gpu.supports(GpuFeature::ep_capture_query)) return;  // an older plugin cannot say
    int capturing = 0;
    if (gpu.ep().ep_stream_capturing(gpu.handle(), device, &capturing) != 0) {
      fail("ep::Buffer::{}: GPU backend '{}' cannot say whether its stream is being captured: {}",
           call, gpu.plugin().name, gpu.last_error());
    }
    if (capturing != 0) {
      fail(
          "ep::Buffer::{}: the stream is being captured into a graph, but this call {}, which a "
          "graph cannot hold; make the call outside the capture",
          call, why);
    }
  }

  // Zeroes `bytes` of device memory at `ptr`.
  void clear(void* ptr, size_t bytes) const {
    std::vector<std::byte> zeros(bytes);
    ctx.copy(ptr, zeros.data(), bytes);
  }

  Context& ctx;
  const GpuBackend& gpu;
  int device;
  DLDeviceType device_type;
  BufferOptions options;
  DeviceBuffer scratch;  // first_invalid of the layout kernel
  const char* transport = "proxy";
  bool caller_stream = false;  // set_stream: the kernels go to `stream`
  void* stream = nullptr;
  std::unique_ptr<HighThroughput> high_throughput;
  std::unique_ptr<LowLatency> low_latency;
};

TensorView::TensorView(void* data, DLDevice device, DLDataType dtype,
                       std::initializer_list<int64_t> shape,
                       std::initializer_list<int64_t> strides) {
  if (shape.size() > shape_.size()) fail("TensorView: {} dimensions, at most 4", shape.size());
  if (strides.size() != 0 && strides.size() != shape.size()) {
    fail("TensorView: {} strides for {} dimensions", strides.size(), shape.size());
  }
  std::copy(shape.begin(), shape.end(), shape_.begin());
  std::copy(strides.begin(), strides.end(), strides_.begin());
  tensor_.data = data;
  tensor_.device = device;
  tensor_.ndim = static_cast<int>(shape.size());
  tensor_.dtype = dtype;
  tensor_.shape = shape_.data();
  tensor_.strides = strides.size() == 0 ? nullptr : strides_.data();
  tensor_.byte_offset = 0;
}

TensorView& TensorView::operator=(const TensorView& other) {
  shape_ = other.shape_;
  strides_ = other.strides_;
  tensor_ = other.tensor_;
  tensor_.shape = shape_.data();
  if (other.tensor_.strides != nullptr) tensor_.strides = strides_.data();
  return *this;
}

// What keeps calls out of a graph (refuse_capture).
constexpr const char* kHostWaits =
    "waits on the host for its kernels (a high-throughput call reads the received counts there "
    "unless it has num_worst_tokens, runs on the caller's stream over the proxy path, and, for a "
    "combine, has such a dispatch's handle)";

DispatchResult Buffer::dispatch(const DispatchArgs& args) {
  HighThroughput& ht = impl_->ht("dispatch");
  impl_->select_stream();
  if (!ht.defers(args)) impl_->refuse_capture("dispatch", kHostWaits);
  return ht.dispatch(args);
}

CombineResult Buffer::combine(const DLTensor& x, const DispatchHandle& handle) {
  HighThroughput& ht = impl_->ht("combine");
  impl_->select_stream();
  if (!ht.defers(handle)) impl_->refuse_capture("combine", kHostWaits);
  return ht.combine(x, handle);
}

LowLatencyDispatchResult Buffer::low_latency_dispatch(const LowLatencyDispatchArgs& args) {
  LowLatency& ll = impl_->ll("low_latency_dispatch");
  impl_->select_stream();
  LowLatencyDispatchResult result = ll.dispatch(args);
  if (result.recv_hook) {  // its kernels go where this Buffer's go when it runs
    result.recv_hook = [impl = impl_.get(), hook = std::move(result.recv_hook)] {
      impl->select_stream();
      hook();
    };
  }
  return result;
}

CombineResult Buffer::low_latency_combine(const DLTensor& x, const DLTensor& topk_idx,
                                          const DLTensor& topk_weights,
                                          const LowLatencyHandle& handle,
                                          const LowLatencyCombineOptions& options) {
  LowLatency& ll = impl_->ll("low_latency_combine");
  impl_->select_stream();
  return ll.combine(x, topk_idx, topk_weights, handle, options);
}

namespace {

// Elements of a row-major tensor, or -1 when `t` has other strides (an
// empty one has no layout to check).
int64_t row_major_elements(const DLTensor& t) {
  int64_t elements = 1;
  for (int d = 0; d < t.ndim; ++d) elements *= t.shape[d];
  if (elements == 0 || t.strides == nullptr) return elements;
  int64_t stride = 1;
  for (int d = t.ndim - 1; d >= 0; --d) {
    if (t.shape[d] > 1 && t.strides[d] != stride) return -1;
    stride *= t.shape[d];
  }
  return elements;
}

std::string shape_of(const DLTensor& t) {
  std::string text = "[";
  for (int d = 0; d < t.ndim; ++d) text += (d > 0 ? ", " : "") + std::to_string(t.shape[d]);
  return text + "]";
}

}  // namespace

void Buffer::copy_result(const DLTensor& from, const DLTensor& to) {
  Impl& s = *impl_;
  const DLDevice device = this->device();
  for (const auto& [t, name] : {std::pair{&from, "from"}, std::pair{&to, "to"}}) {
    if (t->device.device_type != device.device_type || t->device.device_id != device.device_id) {
      fail("ep::Buffer::copy_result: {} is on device ({}, {}), the Buffer on ({}, {})", name,
           static_cast<int>(t->device.device_type), t->device.device_id,
           static_cast<int>(device.device_type), device.device_id);
    }
    if (row_major_elements(*t) < 0) fail("ep::Buffer::copy_result: {} is not row-major", name);
  }
  const bool same_shape =
      from.ndim == to.ndim && std::equal(from.shape, from.shape + from.ndim, to.shape);
  if (!same_shape || from.dtype.code != to.dtype.code || from.dtype.bits != to.dtype.bits ||
      from.dtype.lanes != to.dtype.lanes) {
    fail(
        "ep::Buffer::copy_result: to has shape {} and dtype (code {}, {} bits), from {} and "
        "(code {}, {} bits): they must match",
        shape_of(to), to.dtype.code, to.dtype.bits, shape_of(from), from.dtype.code,
        from.dtype.bits);
  }
  const size_t bytes = static_cast<size_t>(row_major_elements(from)) *
                       ((from.dtype.bits * from.dtype.lanes + 7) / 8);
  if (bytes == 0) return;
  void* dst = static_cast<std::byte*>(to.data) + to.byte_offset;
  const void* src = static_cast<const std::byte*>(from.data) + from.byte_offset;
  s.select_stream();
  if (s.gpu.supports(GpuFeature::ep_copy)) {
    if (s.gpu.ep().ep_copy(s.gpu.handle(), s.device, dst, src, bytes) != 0) {
      fail("ep::Buffer::copy_result: GPU backend '{}' cannot copy {} bytes: {}",
           s.gpu.plugin().name, bytes, s.gpu.last_error());
    }
    return;
  }
  // An older plugin: behind the Buffer's calls, on the host.
  s.refuse_capture("copy_result",
                   "waits for the stream on the host (a GPU plugin older than GPU ABI 1.11 has no "
                   "ep_copy)");
  synchronize();
  if (s.gpu.runtime().memcpy_sync(s.gpu.handle(), dst, src, bytes) != 0) {
    fail("ep::Buffer::copy_result: GPU backend '{}' cannot copy {} bytes: {}", s.gpu.plugin().name,
         bytes, s.gpu.last_error());
  }
}

bool Buffer::can_copy_result() const { return impl_->gpu.supports(GpuFeature::ep_copy); }

void Buffer::set_stream(void* stream) {
  Impl& s = *impl_;
  if (!s.gpu.supports(GpuFeature::ep_set_stream)) {
    const GpuPlugin& p = s.gpu.plugin();
    if (!s.gpu.predates(GpuFeature::ep_set_stream)) {
      fail(
          "ep::Buffer::set_stream: GPU backend '{}' ({}) speaks GPU ABI 1.{} but does not set "
          "ep_set_stream (or an entry of an earlier minor): its EP kernels run on its own stream "
          "only",
          p.name, p.path, p.abi_minor);
    }
    fail(
        "ep::Buffer::set_stream: GPU backend '{}' ({}) speaks GPU ABI 1.{}, older than "
        "ep_set_stream (1.{}): its EP kernels run on its own stream only",
        p.name, p.path, p.abi_minor, gpu_feature_minor(GpuFeature::ep_set_stream));
  }
  const bool was = s.caller_stream;
  void* const before = s.stream;
  s.caller_stream = true;
  s.stream = stream;
  try {
    s.select_stream();  // says now, on this rank, when the backend cannot
  } catch (const Error&) {
    s.caller_stream = was;
    s.stream = before;
    throw;
  }
  // The caller orders its work after the calls on its stream: low-latency
  // calls need not wait on the host (as DeepEP's), nor high-throughput ones
  // with num_worst_tokens.
  if (s.low_latency) s.low_latency->set_host_waits(false);
  if (s.high_throughput) s.high_throughput->set_host_waits(false);
}

bool Buffer::can_set_stream() const { return impl_->gpu.supports(GpuFeature::ep_set_stream); }

namespace {

// The counters and stamps (benchmarks' figures), or a clear refusal.
void require_counters(const GpuBackend& gpu, const char* call) {
  if (gpu.supports(GpuFeature::ep_counters)) return;
  if (!gpu.predates(GpuFeature::ep_counters)) {
    fail(
        "ep::Buffer::{}: GPU backend '{}' ({}) speaks GPU ABI 1.{} but does not set "
        "ep_counters, ep_stamp and ep_stamp_elapsed",
        call, gpu.plugin().name, gpu.plugin().path, gpu.plugin().abi_minor);
  }
  fail("ep::Buffer::{}: GPU backend '{}' ({}) speaks GPU ABI 1.{}, older than ep_counters (1.{})",
       call, gpu.plugin().name, gpu.plugin().path, gpu.plugin().abi_minor,
       gpu_feature_minor(GpuFeature::ep_counters));
}

}  // namespace

Buffer::GpuCounters Buffer::gpu_counters() const {
  const Impl& s = *impl_;
  require_counters(s.gpu, "gpu_counters");
  courier_gpu_ep_counters_v1 counters{};
  counters.struct_size = sizeof counters;
  if (s.gpu.ep().ep_counters(s.gpu.handle(), s.device, &counters) != 0) {
    fail("ep::Buffer::gpu_counters: GPU backend '{}': {}", s.gpu.plugin().name, s.gpu.last_error());
  }
  // The host's waits: the backend's stream syncs and the core's own waits
  // on marks of the stream (a high-throughput dispatch's counts, a call's
  // done mark).
  const uint64_t marked = (s.high_throughput ? s.high_throughput->marked_waits() : 0) +
                          (s.low_latency ? s.low_latency->marked_waits() : 0);
  return {counters.kernel_launches, counters.host_waits + marked};
}

void Buffer::gpu_stamp(uint32_t slot) {
  Impl& s = *impl_;
  require_counters(s.gpu, "gpu_stamp");
  if (slot > 1) fail("ep::Buffer::gpu_stamp: slot {} is not 0 or 1", slot);
  s.select_stream();  // this Buffer's stream, as its calls use
  if (s.gpu.ep().ep_stamp(s.gpu.handle(), s.device, slot) != 0) {
    fail("ep::Buffer::gpu_stamp: GPU backend '{}': {}", s.gpu.plugin().name, s.gpu.last_error());
  }
}

double Buffer::gpu_elapsed_us() {
  Impl& s = *impl_;
  require_counters(s.gpu, "gpu_elapsed_us");
  uint64_t ns = 0;
  if (s.gpu.ep().ep_stamp_elapsed(s.gpu.handle(), s.device, &ns) != 0) {
    fail("ep::Buffer::gpu_elapsed_us: GPU backend '{}': {}", s.gpu.plugin().name,
         s.gpu.last_error());
  }
  return static_cast<double>(ns) / 1e3;
}

bool Buffer::can_count() const { return impl_->gpu.supports(GpuFeature::ep_counters); }

void Buffer::gpu_hold(uint32_t microseconds) {
  Impl& s = *impl_;
  if (!s.gpu.supports(GpuFeature::ep_hold)) {
    const GpuPlugin& p = s.gpu.plugin();
    if (!s.gpu.predates(GpuFeature::ep_hold)) {
      fail(
          "ep::Buffer::gpu_hold: GPU backend '{}' ({}) speaks GPU ABI 1.{} but does not set "
          "ep_hold (or an entry of an earlier minor)",
          p.name, p.path, p.abi_minor);
    }
    fail(
        "ep::Buffer::gpu_hold: GPU backend '{}' ({}) speaks GPU ABI 1.{}, older than ep_hold "
        "(1.{})",
        p.name, p.path, p.abi_minor, gpu_feature_minor(GpuFeature::ep_hold));
  }
  s.select_stream();  // this Buffer's stream, as its calls use
  if (s.gpu.ep().ep_hold(s.gpu.handle(), s.device, microseconds) != 0) {
    fail("ep::Buffer::gpu_hold: GPU backend '{}': {}", s.gpu.plugin().name, s.gpu.last_error());
  }
}

bool Buffer::can_hold() const { return impl_->gpu.supports(GpuFeature::ep_hold); }

void Buffer::use_own_stream() {
  Impl& s = *impl_;
  // Calls wait again; what earlier calls on the caller's stream found
  // surfaces here rather than at a later call that waits.
  if (s.low_latency) {
    s.low_latency->synchronize();
    s.low_latency->set_host_waits(true);
  }
  if (s.high_throughput) {
    s.high_throughput->synchronize();
    s.high_throughput->set_host_waits(true);
  }
  s.caller_stream = false;
  s.stream = nullptr;
  s.select_stream();
}

void Buffer::synchronize() {
  Impl& s = *impl_;
  s.select_stream();
  if (s.low_latency) {
    s.low_latency->synchronize();
  } else if (s.high_throughput) {
    s.high_throughput->synchronize();
  } else if (s.gpu.ep().ep_sync != nullptr && s.gpu.ep().ep_sync(s.gpu.handle(), s.device) != 0) {
    fail("ep::Buffer::synchronize: GPU backend '{}': {}", s.gpu.plugin().name, s.gpu.last_error());
  }
}

Buffer::Buffer(Context& context, const BufferOptions& options)
    : impl_(std::make_unique<Impl>(context, options)) {}

Buffer::~Buffer() = default;

int Buffer::num_ranks() const { return impl_->ctx.world_size(); }
int Buffer::rank() const { return impl_->ctx.rank(); }
const char* Buffer::transport() const { return impl_->transport; }

DLDevice Buffer::device() const {
  return DLDevice{impl_->device_type, impl_->device_type == kDLCPU ? 0 : impl_->device};
}

void Buffer::get_dispatch_layout(const DLTensor& topk_idx, int num_experts,
                                 const DispatchLayout& out) {
  Impl& s = *impl_;
  const int ranks = num_ranks();
  if (num_experts <= 0 || num_experts % ranks != 0) {
    fail("get_dispatch_layout: num_experts {} is not a positive multiple of the {} ranks",
         num_experts, ranks);
  }
  auto* idx = static_cast<const int64_t*>(check_tensor(&topk_idx, "get_dispatch_layout: topk_idx",
                                                       DType::int64, {-1, -1}, s.device_type));
  const int64_t tokens = topk_idx.shape[0];
  const int64_t topk = topk_idx.shape[1];
  if (tokens > INT32_MAX || topk == 0 || topk > 1024) {
    fail(
        "get_dispatch_layout: topk_idx has shape [{}, {}]; at most 2^31-1 tokens and 1..1024 "
        "experts per token",
        tokens, topk);
  }
  auto* per_rank = static_cast<int32_t*>(check_tensor(out.num_tokens_per_rank,
                                                      "get_dispatch_layout: num_tokens_per_rank",
                                                      DType::int32, {ranks}, s.device_type));
  auto* per_expert = static_cast<int32_t*>(
      check_tensor(out.num_tokens_per_expert, "get_dispatch_layout: num_tokens_per_expert",
                   DType::int32, {num_experts}, s.device_type));
  auto* in_rank = static_cast<uint8_t*>(
      check_tensor(out.is_token_in_rank, "get_dispatch_layout: is_token_in_rank", DType::boolean,
                   {tokens, ranks}, s.device_type));
  s.clear(per_rank, sizeof(int32_t) * ranks);
  s.clear(per_expert, sizeof(int32_t) * num_experts);
  s.clear(s.scratch.data(), sizeof(uint64_t));

  courier_gpu_ep_layout_v1 job{};
  job.struct_size = sizeof job;
  job.device = s.device;
  job.topk_idx = idx;
  job.num_tokens = static_cast<uint32_t>(tokens);
  job.topk = static_cast<uint32_t>(topk);
  job.num_experts = static_cast<uint32_t>(num_experts);
  job.num_ranks = static_cast<uint32_t>(ranks);
  job.num_tokens_per_rank = per_rank;
  job.num_tokens_per_expert = per_expert;
  job.is_token_in_rank = in_rank;
  job.first_invalid = static_cast<uint64_t*>(s.scratch.data());
  if (s.gpu.ep().run_ep_layout(s.gpu.handle(), &job) != 0) {
    fail("get_dispatch_layout: GPU backend '{}' failed: {}", s.gpu.plugin().name,
         s.gpu.last_error());
  }
  uint64_t invalid = 0;
  s.ctx.copy(&invalid, s.scratch.data(), sizeof invalid);
  if (invalid != 0) {
    const uint64_t token = (invalid >> 32) - 1;
    const uint64_t k = invalid & 0xFFFFFFFFu;
    int64_t value = 0;
    s.ctx.copy(&value, idx + token * topk + k, sizeof value);
    fail("get_dispatch_layout: topk_idx[{}][{}] = {} is outside [-1, {}) (num_experts)", token, k,
         value, num_experts);
  }
}

}  // namespace courier::ep
