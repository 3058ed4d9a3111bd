#include "core/ep/proxy_window.hpp"

#include <cstring>
#include <span>
#include <utility>
#include <vector>

#include "core/bootstrap/bootstrap.hpp"
#include "core/check.hpp"
#include "core/context_internals.hpp"
#include "gpu/channel_descriptor.hpp"

namespace courier::ep {

namespace {

const GpuBackend& proxy_capable(const Context& ctx) {
  const GpuBackend& gpu = ContextInternals::gpu(ctx);
  if (!gpu.supports(GpuFeature::ep_proxy)) {
    fail(
        "ep::Buffer: GPU backend '{}' has no EP proxy kernels (capability ep_proxy, GPU ABI "
        "1.3), and the proxy path needs them",
        gpu.plugin().name);
  }
  // Minor 7 changed what the high-throughput jobs mean (counts first): an
  // older plugin would take the larger jobs and do the old thing.
  if (!gpu.supports(GpuFeature::ep_counts_first)) {
    fail(
        "ep::Buffer: GPU backend '{}' ({}) speaks GPU ABI 1.{}; the proxy path needs 1.7 or "
        "later (rebuild the plugin against this Courier)",
        gpu.plugin().name, gpu.plugin().path, gpu.plugin().abi_minor);
  }
  return gpu;
}

}  // namespace

ProxyWindow::ProxyWindow(Context& ctx, uint64_t bytes, uint64_t control_bytes,
                         uint32_t record_words, uint64_t readback_bytes)
    : ctx_(ctx),
      gpu_(proxy_capable(ctx)),
      device_(ContextInternals::device(ctx)),
      rank_(static_cast<uint32_t>(ctx.rank())),
      ranks_(static_cast<uint32_t>(ctx.world_size())),
      record_words_(record_words),
      loopback_(ContextInternals::config(ctx).ep_loopback),
      // Its waits are on what the proxies deliver: their diagnosis first.
      timeout_ns_(ContextInternals::proxy_wait_ns(ctx)),
      num_channels_(ctx.num_channels()),
      status_(ctx, gpu_, timeout_ns_) {
  if (ranks_ > COURIER_GPU_EP_PROXY_MAX_RANKS) {
    fail("ep::Buffer: {} ranks, more than the proxy path's {}", ranks_,
         COURIER_GPU_EP_PROXY_MAX_RANKS);
  }
  if (bytes > TransferCmd::kMaxOffset || control_bytes > TransferCmd::kMaxOffset) {
    fail(
        "ep::Buffer: its window would need {} bytes, more than the 4 GiB a window can address; "
        "lower max_tokens_per_rank (or num_experts)",
        bytes);
  }
  if (loopback_ && (ContextInternals::nic(ctx).props().caps & COURIER_NIC_CAP_LOOPBACK) == 0) {
    fail(
        "COURIER_EP_LOOPBACK=1 cannot be honoured: NIC backend '{}' cannot write to its own rank "
        "(no loopback capability)",
        ctx.nic_backend());
  }
  // Every rank computes the same layout from the same BufferOptions; a rank
  // whose differ would have its signals land at the wrong places.
  const uint64_t mine[3] = {bytes, control_bytes, record_words};
  const std::vector<std::byte> all = ctx.bootstrap().allgather(std::as_bytes(std::span(mine)));
  for (uint32_t r = 0; r < ranks_; ++r) {
    uint64_t theirs[3];
    std::memcpy(theirs, all.data() + r * sizeof mine, sizeof mine);
    if (std::memcmp(theirs, mine, sizeof mine) != 0) {
      fail(
          "ep::Buffer: rank {} sized its Buffer differently ({} + {} bytes, {} record words) from "
          "rank {} ({} + {}, {}): every rank must pass the same BufferOptions",
          r, theirs[0], theirs[1], theirs[2], rank_, bytes, control_bytes, record_words);
    }
  }
  memory_ = ctx.alloc(bytes);
  // Emulated atomics are applied by the receiving proxy with the CPU: on a
  // GPU backend its signal words must then be memory the CPU can write and
  // the kernels can poll, mapped host memory (docs/ep.md, "Signals").
  const bool cpu_applies_atomics = ctx.atomic_stats().add_u64 != "hw";
  if (cpu_applies_atomics && gpu_.props().mem_kind != COURIER_MEM_HOST) {
    control_mapped_ = MappedHostMemory(gpu_, control_bytes, "mapping the control window");
    std::memset(control_mapped_.host(), 0, control_bytes);
    control_host_ = control_mapped_.host();
    control_device_ = control_mapped_.device();
  } else {
    control_memory_ = ctx.alloc(control_bytes);
    std::vector<std::byte> zeros(control_bytes);
    ctx.copy(control_memory_.data(), zeros.data(), zeros.size());
    control_host_ = control_device_ = control_memory_.data();
  }
  if (readback_bytes > 0)
    readback_ = MappedHostMemory(gpu_, readback_bytes, "mapping the readback area");
  std::vector<courier_gpu_channel_v1> channels(num_channels_);
  for (uint32_t c = 0; c < num_channels_; ++c) channels[c] = to_abi(ctx.channel(c));
  const uint64_t channel_bytes = channels.size() * sizeof(courier_gpu_channel_v1);
  shared_ = ctx.alloc(channel_bytes + 16 + 8ull * num_channels_);
  std::vector<std::byte> shared(shared_.size());
  std::memcpy(shared.data(), channels.data(), channel_bytes);
  ctx.copy(shared_.data(), shared.data(), shared.size());
  window_ = ctx.register_window(memory_.data(), memory_.size());
  control_window_ = ctx.register_window(control_host_, control_bytes);
}

void ProxyWindow::settle_sends() {
  check(ep().ep_sync(backend(), device_), "finishing the last call");
  std::vector<DeviceCommandList> drains(num_channels_);
  for (uint32_t c = 0; c < num_channels_; ++c) {
    drains[c].channel = c;
    TransferCmd drain;
    encode_drain(&drain);
    drains[c].commands.push_back(drain);
  }
  ctx_.run_device_commands(drains);
}

ProxyWindow::~ProxyWindow() {
  try {
    // Every command the kernels pushed (the last signals, releases) has
    // completed before the collective deregistration: none may land at a
    // peer after it gave the window up.
    settle_sends();
  } catch (const Error&) {
    // A failed channel completes nothing more; deregister anyway.
  }
  for (uint32_t window : {control_window_, window_}) {
    try {
      ctx_.deregister_window(window);
    } catch (const Error&) {
      // A rank that is gone cannot take part; the memory is freed anyway.
    }
  }
}

courier_gpu_ep_proxy_v1 ProxyWindow::fifo() const {
  auto* shared = static_cast<std::byte*>(shared_.data());
  const uint64_t channel_bytes = uint64_t{num_channels_} * sizeof(courier_gpu_channel_v1);
  courier_gpu_ep_proxy_v1 f{};
  f.channels = reinterpret_cast<const courier_gpu_channel_v1*>(shared);
  f.num_channels = num_channels_;
  f.window = window_;
  f.rank = rank_;
  f.num_ranks = ranks_;
  f.loopback = loopback_ ? 1 : 0;
  f.record_words = record_words_;
  f.base = memory_.data();
  f.control = control_device_;
  f.control_window = control_window_;
  f.status = status_.device();
  f.bad_index = status_.bad_index_device();
  f.status_host = status_.mirror_device();
  f.done = reinterpret_cast<uint32_t*>(shared + channel_bytes);
  f.reuse_fence = reinterpret_cast<uint64_t*>(shared + channel_bytes + 16);
  f.timeout_ns = timeout_ns_;
  return f;
}

void ProxyWindow::clear_status() {
  status_.clear([this] { check(ep().ep_sync(backend(), device_), "finishing the last call"); });
}

void ProxyWindow::set_refused() {
  // Kernels of an earlier call (a recv hook's) may still run: they must not
  // see this call's refusal.
  check(ep().ep_sync(backend(), device_), "finishing the last call");
  status_.set_refused(rank_);
}

void ProxyWindow::check(int rc, const char* what) const {
  if (rc != 0) fail("ep::Buffer: {}: {}", what, gpu_.last_error());
}

void ProxyWindow::sync(const char* what, const EpIndices& indices, bool may_defer) {
  if (may_defer && !status_.host_waits()) {
    status_.defer(what);
    return;
  }
  check(ep().ep_sync(backend(), device_), what);
  status_.raise_if_failed(what, indices);
}

void ProxyWindow::synchronize() {
  status_.synchronize([this] { check(ep().ep_sync(backend(), device_), "synchronizing"); });
}

}  // namespace courier::ep
