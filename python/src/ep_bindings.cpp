// courier._courier.EpBuffer: courier::ep::Buffer (include/courier/ep.hpp)
// with DLPack tensors in and TensorRef views out (or, asked for, tensors of
// the caller's framework made through DLPack's C exchange API). Calls that wait for other
// ranks run without the GIL.
#include <nanobind/stl/function.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <array>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "courier/context.hpp"
#include "courier/ep.hpp"
#include "courier/error.hpp"
#include "python/src/bindings.hpp"
#include "python/src/dlpack_bridge.hpp"

namespace nb = nanobind;

namespace courier::python {

namespace {

// Owns one ep::Buffer; the Python object keeps its Context alive.
class EpBuffer {
 public:
  EpBuffer(nb::object context, const ep::BufferOptions& options) : context_(std::move(context)) {
    Context& ctx = *nb::inst_ptr<Context>(context_);
    nb::gil_scoped_release released;  // collective: waits for the other ranks
    buffer_ = std::make_unique<ep::Buffer>(ctx, options);
  }

  ep::Buffer& get(const char* call) const {
    if (!buffer_) throw courier::Error(std::string("EpBuffer.") + call + ": the Buffer was closed");
    return *buffer_;
  }
  bool closed() const { return !buffer_; }
  const LiveViews& live() const { return live_; }

  // Collective (gives the Buffer's window back on every rank).
  void close() {
    if (!buffer_) return;
    if (*live_ > 0) {
      throw courier::Error("EpBuffer.close: " + std::to_string(live_->load()) +
                           " result view(s) still point into the Buffer's memory; drop them "
                           "(or copy them) first");
    }
    std::unique_ptr<ep::Buffer> buffer = std::move(buffer_);
    {
      nb::gil_scoped_release released;
      buffer.reset();
    }
    for (auto& bound : ll_bound_) bound.reset();  // their producers need the GIL
  }

  // Low-latency dispatch outputs imported once and kept (with the tensors
  // they come from) for the calls that name their slot: importing five
  // tensors per call cost microseconds of host time each.
  static constexpr int kBoundSlots = 4;
  struct BoundOutputs {
    ImportedTensor x, scales, count, src, range;
  };
  void bind_ll_outputs(int slot, BoundOutputs outputs) {
    get("bind_low_latency_outputs");
    ll_bound_.at(checked_slot(slot, "bind_low_latency_outputs")) =
        std::make_shared<const BoundOutputs>(std::move(outputs));
  }
  // The set bound to `slot`, shared with the call that uses it: a rebinding
  // from another thread while that call runs without the GIL leaves it alone.
  std::shared_ptr<const BoundOutputs> ll_outputs(int slot) const {
    std::shared_ptr<const BoundOutputs> b =
        ll_bound_.at(checked_slot(slot, "low_latency_dispatch"));
    if (!b || b->x.get() == nullptr) {
      throw courier::Error("low_latency_dispatch: outputs slot " + std::to_string(slot) +
                           " has no tensors bound (bind_low_latency_outputs)");
    }
    return b;
  }

 private:
  static size_t checked_slot(int slot, const char* call) {
    if (slot < 0 || slot >= kBoundSlots) {
      throw courier::Error(std::string(call) + ": outputs slot " + std::to_string(slot) +
                           " is not in 0.." + std::to_string(kBoundSlots - 1));
    }
    return static_cast<size_t>(slot);
  }

  nb::object context_;
  // Before buffer_: destroyed after it, once its kernels stopped writing.
  std::array<std::shared_ptr<const BoundOutputs>, kBoundSlots> ll_bound_;
  std::unique_ptr<ep::Buffer> buffer_;
  LiveViews live_ = std::make_shared<std::atomic<int>>(0);
};

struct DispatchOutput {
  nb::object recv_x = nb::none(), recv_x_scales = nb::none(), recv_topk_idx = nb::none(),
             recv_topk_weights = nb::none();
  std::vector<int32_t> num_recv_tokens_per_expert;
  ep::DispatchHandle handle;
};

struct LowLatencyOutput {
  // None when the call wrote into the caller's tensors.
  nb::object packed_recv_x = nb::none(), packed_recv_x_scales = nb::none(),
             packed_recv_count = nb::none(), packed_recv_src_info = nb::none(),
             packed_recv_layout_range = nb::none();
  ep::LowLatencyHandle handle;
  nb::object buffer;                // the EpBuffer, for recv_hook
  std::function<void()> recv_hook;  // empty once called, or when not asked for

  void receive() {
    if (!recv_hook) {
      throw courier::Error(
          "recv_hook: nothing to receive (the dispatch was made without return_recv_hook, or "
          "the hook was already called)");
    }
    nb::inst_ptr<EpBuffer>(buffer)->get("recv_hook");
    std::function<void()> hook = std::move(recv_hook);
    recv_hook = nullptr;
    nb::gil_scoped_release released;
    hook();
  }
};

EpBuffer& self_of(nb::handle self) { return *nb::inst_ptr<EpBuffer>(self); }

// Courier writes into `t`: its producer must not have flagged it read-only
// or a copy.
void require_writable(const ImportedTensor& t, const std::string& name) {
  if (t.get() != nullptr && !t.writable()) {
    throw courier::Error(name +
                         ": the tensor is read-only or a copy (DLPack flags); Courier "
                         "writes its results into it");
  }
}

// follow_stream: the Buffer's kernels go on the stream current for x's
// device, as the C exchange API x came through says (no Python call:
// torch's current stream from Python costs microseconds).
// The C exchange API x came through; throws naming `call` and `what`
// needs it when x came another way.
const dlpack_exchange::Api& exchange_api_of(const ImportedTensor& x, const char* call,
                                            const char* what) {
  if (x.exchange_api() == nullptr || x.get() == nullptr) {
    throw courier::Error(std::string(call) + ": " + what +
                         " needs x of a type that publishes DLPack's C exchange API (torch "
                         "2.10 or later)");
  }
  return *x.exchange_api();
}

void follow_current_stream(ep::Buffer& buffer, const ImportedTensor& x, const char* call) {
  const dlpack_exchange::Api& api = exchange_api_of(x, call, "follow_stream");
  const DLTensor* imported = x.get();
  void* stream = nullptr;
  if (api.current_work_stream(imported->device.device_type, imported->device.device_id, &stream) !=
      0) {
    throw_exchange_failure(std::string(call) + ": the current stream cannot be read");
  }
  buffer.set_stream(stream);
}

// With `api` (owned results): a tensor of x's framework the view is
// copied into on the Buffer's stream, which the caller owns (as DeepEP's
// results), else the view itself (a TensorRef into the Buffer). None for
// a result the call did not produce.
nb::object result_of(nb::handle self, EpBuffer& owner, ep::Buffer& buffer,
                     const dlpack_exchange::Api* api, const ep::TensorView& view,
                     const char* name) {
  const DLTensor& t = view.tensor();
  if (api == nullptr || (t.ndim == 0 && t.data == nullptr)) {
    return make_tensor_ref(view, self, owner.live());
  }
  AllocatedTensor out(*api, t, name);
  {
    nb::gil_scoped_release released;  // a plugin before GPU ABI 1.11 waits here
    buffer.copy_result(t, out.get());
  }
  return out.to_python();
}

// owned: the framework's C exchange API x came through (its results are
// allocated there); throws when x did not come through one.
const dlpack_exchange::Api* owning_api(const ImportedTensor& x, bool owned, const char* call) {
  return owned ? &exchange_api_of(x, call, "owned=True") : nullptr;
}

void get_dispatch_layout(nb::handle self, nb::handle topk_idx, int num_experts,
                         nb::handle num_tokens_per_rank, nb::handle num_tokens_per_expert,
                         nb::handle is_token_in_rank) {
  ep::Buffer& buffer = self_of(self).get("get_dispatch_layout");
  ImportedTensor idx(topk_idx, "get_dispatch_layout: topk_idx");
  ImportedTensor per_rank(num_tokens_per_rank, "get_dispatch_layout: num_tokens_per_rank");
  ImportedTensor per_expert(num_tokens_per_expert, "get_dispatch_layout: num_tokens_per_expert");
  ImportedTensor in_rank(is_token_in_rank, "get_dispatch_layout: is_token_in_rank");
  if (idx.get() == nullptr) throw courier::Error("get_dispatch_layout: topk_idx is missing");
  ep::DispatchLayout out{const_cast<DLTensor*>(per_rank.get()),
                         const_cast<DLTensor*>(per_expert.get()),
                         const_cast<DLTensor*>(in_rank.get())};
  nb::gil_scoped_release released;
  buffer.get_dispatch_layout(*idx.get(), num_experts, out);
}

DispatchOutput* dispatch(nb::handle self, nb::handle x, nb::handle x_scales, nb::handle topk_idx,
                         nb::handle topk_weights, nb::handle is_token_in_rank, int num_experts,
                         const ep::DispatchHandle* cached_handle, int num_worst_tokens, bool owned,
                         bool follow_stream) {
  EpBuffer& owner = self_of(self);
  ep::Buffer& buffer = owner.get("dispatch");
  ImportedTensor tx(x, "dispatch: x"), ts(x_scales, "dispatch: x_scales"),
      ti(topk_idx, "dispatch: topk_idx"), tw(topk_weights, "dispatch: topk_weights"),
      tr(is_token_in_rank, "dispatch: is_token_in_rank");
  const dlpack_exchange::Api* api = owning_api(tx, owned, "dispatch");
  if (follow_stream) follow_current_stream(buffer, tx, "dispatch");
  ep::DispatchArgs args;
  args.x = tx.get();
  args.x_scales = ts.get();
  args.topk_idx = ti.get();
  args.topk_weights = tw.get();
  args.is_token_in_rank = tr.get();
  args.num_experts = num_experts;
  args.cached_handle = cached_handle;
  args.num_worst_tokens = num_worst_tokens;
  ep::DispatchResult result;
  {
    nb::gil_scoped_release released;
    result = buffer.dispatch(args);
  }
  auto out = std::make_unique<DispatchOutput>();
  out->recv_x = result_of(self, owner, buffer, api, result.recv_x, "dispatch: recv_x");
  out->recv_x_scales =
      result_of(self, owner, buffer, api, result.recv_x_scales, "dispatch: recv_x_scales");
  // Without topk_idx (and in cached mode) no top-k columns came: nothing to
  // allocate for them.
  if (api == nullptr || ti.get() != nullptr) {
    out->recv_topk_idx =
        result_of(self, owner, buffer, api, result.recv_topk_idx, "dispatch: recv_topk_idx");
    out->recv_topk_weights = result_of(self, owner, buffer, api, result.recv_topk_weights,
                                       "dispatch: recv_topk_weights");
  }
  out->num_recv_tokens_per_expert = std::move(result.num_recv_tokens_per_expert);
  out->handle = std::move(result.handle);
  return out.release();
}

nb::object combine(nb::handle self, nb::handle x, const ep::DispatchHandle& handle, bool owned,
                   bool follow_stream) {
  EpBuffer& owner = self_of(self);
  ep::Buffer& buffer = owner.get("combine");
  ImportedTensor tx(x, "combine: x");
  if (tx.get() == nullptr) throw courier::Error("combine: x is missing");
  const dlpack_exchange::Api* api = owning_api(tx, owned, "combine");
  if (follow_stream) follow_current_stream(buffer, tx, "combine");
  ep::CombineResult result;
  {
    nb::gil_scoped_release released;
    result = buffer.combine(*tx.get(), handle);
  }
  return result_of(self, owner, buffer, api, result.combined_x, "combine: combined_x");
}

ep::ScalesLayout scales_layout_of(const std::string& name) {
  if (name == "row_major") return ep::ScalesLayout::row_major;
  if (name == "column_major") return ep::ScalesLayout::column_major;
  if (name == "ue8m0") return ep::ScalesLayout::ue8m0;
  throw courier::Error("low_latency_dispatch: scales_layout '" + name +
                       "' is not one of row_major, column_major, ue8m0");
}

LowLatencyOutput* low_latency_dispatch(nb::handle self, nb::handle x, nb::handle topk_idx,
                                       bool use_fp8, bool return_recv_hook, bool round_scale,
                                       nb::handle wait_cost_stats, const std::string& scales_layout,
                                       nb::handle out_x, nb::handle out_x_scales,
                                       nb::handle out_count, nb::handle out_src_info,
                                       nb::handle out_layout_range, int outputs,
                                       bool follow_stream) {
  EpBuffer& owner = self_of(self);
  ep::Buffer& buffer = owner.get("low_latency_dispatch");
  ImportedTensor tx(x, "low_latency_dispatch: x"), ti(topk_idx, "low_latency_dispatch: topk_idx"),
      tc(wait_cost_stats, "low_latency_dispatch: wait_cost_stats"),
      ox(out_x, "low_latency_dispatch: out_x"),
      os(out_x_scales, "low_latency_dispatch: out_x_scales"),
      oc(out_count, "low_latency_dispatch: out_count"),
      oi(out_src_info, "low_latency_dispatch: out_src_info"),
      orange(out_layout_range, "low_latency_dispatch: out_layout_range");
  ep::LowLatencyDispatchArgs args;
  args.x = tx.get();
  args.topk_idx = ti.get();
  args.wait_cost_stats = tc.get();
  args.use_fp8 = use_fp8;
  args.round_scale = round_scale;
  args.return_recv_hook = return_recv_hook;
  args.scales_layout = scales_layout_of(scales_layout);
  args.out = {ox.get(), os.get(), oc.get(), oi.get(), orange.get()};
  for (const ImportedTensor* t : {&ox, &os, &oc, &oi, &orange}) require_writable(*t, "out_*");
  std::shared_ptr<const EpBuffer::BoundOutputs> bound;  // held until the call returns
  if (outputs >= 0) {
    if (args.out.x != nullptr || args.out.x_scales != nullptr || args.out.count != nullptr ||
        args.out.src_info != nullptr || args.out.layout_range != nullptr) {
      throw courier::Error("low_latency_dispatch: pass out_* tensors or an outputs slot, not both");
    }
    bound = owner.ll_outputs(outputs);
    args.out = {bound->x.get(), bound->scales.get(), bound->count.get(), bound->src.get(),
                bound->range.get()};
  }
  if (follow_stream) follow_current_stream(buffer, tx, "low_latency_dispatch");
  ep::LowLatencyDispatchResult result;
  {
    nb::gil_scoped_release released;
    result = buffer.low_latency_dispatch(args);
  }
  auto* out = new LowLatencyOutput;
  // No views with a bound set: the caller holds those tensors.
  if (outputs < 0) {
    out->packed_recv_x = make_tensor_ref(result.packed_recv_x, self, owner.live());
    out->packed_recv_x_scales = make_tensor_ref(result.packed_recv_x_scales, self, owner.live());
    out->packed_recv_count = make_tensor_ref(result.packed_recv_count, self, owner.live());
    out->packed_recv_src_info = make_tensor_ref(result.packed_recv_src_info, self, owner.live());
    out->packed_recv_layout_range =
        make_tensor_ref(result.packed_recv_layout_range, self, owner.live());
  }
  out->handle = std::move(result.handle);
  out->buffer = nb::borrow(self);
  out->recv_hook = std::move(result.recv_hook);
  return out;
}

nb::object low_latency_combine(nb::handle self, nb::handle x, nb::handle topk_idx,
                               nb::handle topk_weights, const ep::LowLatencyHandle& handle,
                               bool use_logfmt, nb::handle wait_cost_stats, nb::handle out,
                               bool follow_stream, bool owned) {
  EpBuffer& owner = self_of(self);
  ep::Buffer& buffer = owner.get("low_latency_combine");
  ImportedTensor tx(x, "low_latency_combine: x"), ti(topk_idx, "low_latency_combine: topk_idx"),
      tw(topk_weights, "low_latency_combine: topk_weights"),
      tc(wait_cost_stats, "low_latency_combine: wait_cost_stats"),
      to(out, "low_latency_combine: out");
  if (tx.get() == nullptr || ti.get() == nullptr || tw.get() == nullptr) {
    throw courier::Error("low_latency_combine: x, topk_idx and topk_weights are required");
  }
  require_writable(to, "low_latency_combine: out");
  // owned without out: the result [tokens, hidden] of x's dtype, allocated
  // through x's framework and summed into by the kernels.
  std::optional<AllocatedTensor> made;
  if (owned && to.get() == nullptr) {
    const DLTensor& t = *tx.get();
    std::array<int64_t, 2> shape{ti.get()->ndim > 0 ? ti.get()->shape[0] : 0,
                                 t.ndim > 0 ? t.shape[t.ndim - 1] : 0};
    DLTensor like{};
    like.device = t.device;
    like.dtype = t.dtype;
    like.ndim = 2;
    like.shape = shape.data();
    made.emplace(*owning_api(tx, true, "low_latency_combine"), like,
                 "low_latency_combine: combined_x");
  }
  if (follow_stream) follow_current_stream(buffer, tx, "low_latency_combine");
  ep::CombineResult result;
  {
    nb::gil_scoped_release released;
    ep::LowLatencyCombineOptions options;
    options.use_logfmt = use_logfmt;
    options.wait_cost_stats = tc.get();
    options.out = made ? &made->get() : to.get();
    result = buffer.low_latency_combine(*tx.get(), *ti.get(), *tw.get(), handle, options);
  }
  if (made) return made->to_python();
  return make_tensor_ref(result.combined_x, self, owner.live());
}

}  // namespace

void bind_ep(nb::module_& m) {
  nb::class_<ep::DispatchHandle>(m, "DispatchHandle",
                                 "What combine needs to bring a high-throughput dispatch back.")
      .def_ro("num_tokens", &ep::DispatchHandle::num_tokens, "This rank's dispatched tokens.")
      .def_ro("recv_counts", &ep::DispatchHandle::recv_counts, "Rows received from each rank.")
      .def_ro("hidden", &ep::DispatchHandle::hidden, "The hidden size of the rows.")
      .def_ro("num_worst_tokens", &ep::DispatchHandle::num_worst_tokens,
              "Rows of the padded receive tensors (0: not padded).")
      .def_ro("counts_on_device", &ep::DispatchHandle::counts_on_device,
              "The dispatch did not wait: its counts stay on the device (recv_counts is empty).");

  nb::class_<ep::LowLatencyHandle>(m, "LowLatencyHandle",
                                   "What low_latency_combine needs to bring a dispatch back.")
      .def_ro("num_tokens", &ep::LowLatencyHandle::num_tokens, "This rank's dispatched tokens.")
      .def_ro("topk", &ep::LowLatencyHandle::topk, "Experts per token.")
      .def_ro("call", &ep::LowLatencyHandle::call, "Which low-latency dispatch (0, 1, ...).")
      .def_ro("hidden", &ep::LowLatencyHandle::hidden, "The hidden size of the rows.");

  nb::class_<DispatchOutput>(m, "DispatchOutput",
                             "The results of EpBuffer.dispatch (views; with owned, tensors of "
                             "x's framework, the top-k ones None without topk_idx).")
      .def_ro("recv_x", &DispatchOutput::recv_x, "[received, hidden] rows, by source rank.")
      .def_ro("recv_x_scales", &DispatchOutput::recv_x_scales,
              "FP8 dispatch: [received, hidden / 128] float32 scales; else None.")
      .def_ro("recv_topk_idx", &DispatchOutput::recv_topk_idx,
              "[received, topk] int64 local expert ids, -1 where the expert is elsewhere.")
      .def_ro("recv_topk_weights", &DispatchOutput::recv_topk_weights,
              "[received, topk] float32 weights.")
      .def_ro("num_recv_tokens_per_expert", &DispatchOutput::num_recv_tokens_per_expert,
              "Rows received per local expert.")
      .def_prop_ro(
          "handle", [](const DispatchOutput& o) { return o.handle; },
          "For combine and cached dispatches (a copy: it does not keep the views alive).")
      .def(
          "as_tuple",
          [](const DispatchOutput& o) {
            return nb::make_tuple(o.recv_x, o.recv_x_scales, o.recv_topk_idx, o.recv_topk_weights,
                                  o.num_recv_tokens_per_expert, o.handle);
          },
          "(recv_x, recv_x_scales, recv_topk_idx, recv_topk_weights, "
          "num_recv_tokens_per_expert, handle) in one call (a hot path's: each attribute read "
          "crosses into C++ once).");

  nb::class_<LowLatencyOutput>(m, "LowLatencyOutput",
                               "The results of EpBuffer.low_latency_dispatch (views).")
      .def_ro("packed_recv_x", &LowLatencyOutput::packed_recv_x,
              "[local experts, ranks * max_tokens, hidden] rows per expert.")
      .def_ro("packed_recv_x_scales", &LowLatencyOutput::packed_recv_x_scales,
              "use_fp8: [local experts, ranks * max_tokens, hidden / 128] float32; else None.")
      .def_ro("packed_recv_count", &LowLatencyOutput::packed_recv_count,
              "[local experts] int32 rows per expert.")
      .def_ro("packed_recv_src_info", &LowLatencyOutput::packed_recv_src_info,
              "[local experts, ranks * max_tokens] int32 source token of each row.")
      .def_ro("packed_recv_layout_range", &LowLatencyOutput::packed_recv_layout_range,
              "[local experts, ranks] int64: (begin << 32) | count per source rank.")
      .def_prop_ro(
          "handle", [](const LowLatencyOutput& o) { return o.handle; },
          "For low_latency_combine (a copy: it does not keep the views alive).")
      .def_prop_ro(
          "has_recv_hook", [](const LowLatencyOutput& o) { return static_cast<bool>(o.recv_hook); },
          "Whether recv_hook() still has to be called before reading the outputs.")
      .def("recv_hook", &LowLatencyOutput::receive,
           "Wait for the rows (return_recv_hook) and fill the outputs. Call once.");

  nb::class_<EpBuffer>(m, "EpBuffer",
                       "courier::ep::Buffer: expert-parallel dispatch and combine. Creating and "
                       "closing it are collective.")
      .def(
          "__init__",
          [](EpBuffer* self, nb::object context, size_t num_nvl_bytes, size_t num_rdma_bytes,
             bool low_latency_mode, uint32_t max_tokens_per_rank, uint32_t hidden,
             uint32_t element_bytes, uint32_t max_topk, uint32_t num_experts) {
            if (!nb::isinstance<Context>(context)) {
              throw courier::Error("EpBuffer: context must be a courier Context");
            }
            ep::BufferOptions options;
            options.num_nvl_bytes = num_nvl_bytes;
            options.num_rdma_bytes = num_rdma_bytes;
            options.low_latency_mode = low_latency_mode;
            options.max_tokens_per_rank = max_tokens_per_rank;
            options.hidden = hidden;
            options.element_bytes = element_bytes;
            options.max_topk = max_topk;
            options.num_experts = num_experts;
            new (self) EpBuffer(std::move(context), options);
          },
          nb::arg("context"), nb::kw_only(), nb::arg("num_nvl_bytes") = 0,
          nb::arg("num_rdma_bytes") = 0, nb::arg("low_latency_mode") = false,
          nb::arg("max_tokens_per_rank") = 0, nb::arg("hidden") = 0, nb::arg("element_bytes") = 2,
          nb::arg("max_topk") = 8, nb::arg("num_experts") = 0,
          "Collective. Sized for max_tokens_per_rank tokens of `hidden` elements of "
          "element_bytes (2: bfloat16, 4: float32) with up to max_topk experts each; "
          "low_latency_mode also needs num_experts. Zero tokens: layouts only.")
      .def("close", &EpBuffer::close,
           "Collective: give the Buffer's memory back now (refused while result views live).")
      .def_prop_ro("closed", &EpBuffer::closed, "Whether close() was called.")
      .def_prop_ro(
          "num_ranks", [](const EpBuffer& b) { return b.get("num_ranks").num_ranks(); },
          "The number of ranks.")
      .def_prop_ro(
          "rank", [](const EpBuffer& b) { return b.get("rank").rank(); }, "This rank.")
      .def_prop_ro(
          "transport",
          [](const EpBuffer& b) { return std::string(b.get("transport").transport()); },
          "'direct' (GPU stores between GPUs of one host) or 'proxy' (the NIC backend).")
      .def_prop_ro(
          "device",
          [](const EpBuffer& b) {
            const DLDevice d = b.get("device").device();
            return std::make_tuple(static_cast<int>(d.device_type), static_cast<int>(d.device_id));
          },
          "Where tensors must live, as (DLPack device type, device id): (1, 0) is the CPU.")
      .def(
          "set_stream",
          [](EpBuffer& b, uintptr_t stream) {
            b.get("set_stream").set_stream(reinterpret_cast<void*>(stream));
          },
          nb::arg("stream"),
          "Run the Buffer's kernels on the GPU runtime's stream with this handle "
          "(torch.cuda.Stream.cuda_stream; 0 is the default stream) from now on, behind the "
          "work queued there. Low-latency calls then return once their kernels are queued; what "
          "those find is raised by the next call or synchronize(), and breaks the Buffer.")
      .def_prop_ro(
          "can_copy_result",
          [](const EpBuffer& b) { return b.get("can_copy_result").can_copy_result(); },
          "Whether owned results are copied on the stream (a GPU plugin of GPU ABI 1.11 or "
          "later); else the copy waits for the stream on the host and cannot be captured.")
      .def(
          "use_own_stream", [](EpBuffer& b) { b.get("use_own_stream").use_own_stream(); },
          "Back to the Buffer's own stream (the default), after waiting for the calls on the "
          "caller's; calls wait for their work again.")
      .def(
          "synchronize", [](EpBuffer& b) { b.get("synchronize").synchronize(); },
          "Wait until the calls queued so far ran; raise what those that did not wait found.")
      .def_prop_ro(
          "can_set_stream",
          [](const EpBuffer& b) { return b.get("can_set_stream").can_set_stream(); },
          "Whether set_stream can succeed (a GPU plugin of GPU ABI 1.9 or later; gpu-host "
          "accepts any stream and runs its kernels before each call returns).")
      .def("get_dispatch_layout", &get_dispatch_layout, nb::arg("topk_idx"), nb::arg("num_experts"),
           nb::arg("num_tokens_per_rank"), nb::arg("num_tokens_per_expert"),
           nb::arg("is_token_in_rank"),
           "Fill the caller's num_tokens_per_rank [ranks] int32, num_tokens_per_expert "
           "[experts] int32 and is_token_in_rank [tokens, ranks] bool from topk_idx.")
      .def("dispatch", &dispatch, nb::arg("x"), nb::arg("x_scales") = nb::none(),
           nb::arg("topk_idx") = nb::none(), nb::arg("topk_weights") = nb::none(),
           nb::arg("is_token_in_rank") = nb::none(), nb::arg("num_experts") = 0,
           nb::arg("cached_handle") = nb::none(), nb::arg("num_worst_tokens") = 0,
           nb::arg("owned") = false, nb::arg("follow_stream") = false,
           nb::rv_policy::take_ownership,
           "Collective high-throughput dispatch; the result's tensors are views valid until "
           "the dispatch after next, or with owned tensors of x's framework the caller owns "
           "(allocated through x's DLPack C exchange API, copied into on the Buffer's stream); "
           "follow_stream: as low_latency_dispatch's.")
      .def("combine", &combine, nb::arg("x"), nb::arg("handle"), nb::arg("owned") = false,
           nb::arg("follow_stream") = false,
           "Collective high-throughput combine: per token, the sum of the rows sent back "
           "(owned, follow_stream: as dispatch's).")
      .def("low_latency_dispatch", &low_latency_dispatch, nb::arg("x"), nb::arg("topk_idx"),
           nb::arg("use_fp8") = false, nb::arg("return_recv_hook") = false,
           nb::arg("round_scale") = false, nb::arg("wait_cost_stats") = nb::none(),
           nb::arg("scales_layout") = "row_major", nb::arg("out_x") = nb::none(),
           nb::arg("out_x_scales") = nb::none(), nb::arg("out_count") = nb::none(),
           nb::arg("out_src_info") = nb::none(), nb::arg("out_layout_range") = nb::none(),
           nb::arg("outputs") = -1, nb::arg("follow_stream") = false, nb::rv_policy::take_ownership,
           "Collective low-latency dispatch into per-expert rows (round_scale: power-of-two "
           "FP8 scales; wait_cost_stats: [ranks] int64 that gains the nanoseconds waited for "
           "each rank, proxy path only; scales_layout: row_major, column_major or ue8m0 "
           "(GPU ABI 1.10); out_*: the caller's tensors to receive into, all or none "
           "(out_x_scales in its storage layout, ep.hpp LowLatencyOutputs); outputs: the slot "
           "of tensors bound with bind_low_latency_outputs instead of out_*; follow_stream: "
           "first set_stream to the stream current for x's device, read through x's DLPack C "
           "exchange API). With an outputs slot the result's views are None.")
      .def(
          "bind_low_latency_outputs",
          [](EpBuffer& b, int slot, nb::handle out_x, nb::handle out_x_scales, nb::handle out_count,
             nb::handle out_src_info, nb::handle out_layout_range) {
            const char* n = "bind_low_latency_outputs: ";
            EpBuffer::BoundOutputs bound{
                ImportedTensor(out_x, (std::string(n) + "out_x").c_str()),
                ImportedTensor(out_x_scales, (std::string(n) + "out_x_scales").c_str()),
                ImportedTensor(out_count, (std::string(n) + "out_count").c_str()),
                ImportedTensor(out_src_info, (std::string(n) + "out_src_info").c_str()),
                ImportedTensor(out_layout_range, (std::string(n) + "out_layout_range").c_str())};
            for (const ImportedTensor* t :
                 {&bound.x, &bound.scales, &bound.count, &bound.src, &bound.range}) {
              require_writable(*t, "bind_low_latency_outputs");
            }
            b.bind_ll_outputs(slot, std::move(bound));
          },
          nb::arg("slot"), nb::arg("out_x").none(), nb::arg("out_x_scales").none(),
          nb::arg("out_count").none(), nb::arg("out_src_info").none(),
          nb::arg("out_layout_range").none(),
          "Import low-latency dispatch outputs once, for the calls that pass outputs=slot "
          "(0..3); the tensors stay referenced until they are rebound or the Buffer closes. "
          "Checked at each call, as out_* are.")
      .def("low_latency_combine", &low_latency_combine, nb::arg("x"), nb::arg("topk_idx"),
           nb::arg("topk_weights"), nb::arg("handle"), nb::arg("use_logfmt") = false,
           nb::arg("wait_cost_stats") = nb::none(), nb::arg("out") = nb::none(),
           nb::arg("follow_stream") = false, nb::arg("owned") = false,
           "Collective low-latency combine: per token, sum over k of weight * row "
           "(use_logfmt: the rows travel in LogFMT, 10 bits per value where a 128-channel block "
           "is below 1; needs the ep_logfmt capability; out: the caller's [tokens, hidden] to sum "
           "into; follow_stream: as low_latency_dispatch's; owned without out: the result is a "
           "tensor of x's framework, allocated through x's DLPack C exchange API).");
}

}  // namespace courier::python
