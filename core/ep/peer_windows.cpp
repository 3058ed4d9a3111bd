#include "core/ep/peer_windows.hpp"

#include <fmt/format.h>

#include <chrono>
#include <cstring>
#include <span>
#include <thread>

#include "core/bootstrap/bootstrap.hpp"
#include "core/check.hpp"
#include "core/context_internals.hpp"

namespace courier::ep {

namespace {

std::string why_not_direct(const Context& ctx) {
  const GpuBackend& gpu = ContextInternals::gpu(ctx);
  if (!gpu.supports(GpuFeature::ep_direct) || !gpu.supports(GpuFeature::ipc)) {
    return fmt::format(
        "GPU backend '{}' cannot store into peers' memory (capabilities ep_direct "
        "and ipc)",
        gpu.plugin().name);
  }
  if (ctx.world_size() > COURIER_GPU_EP_MAX_RANKS) {
    return fmt::format("{} ranks, more than the direct path's {}", ctx.world_size(),
                       COURIER_GPU_EP_MAX_RANKS);
  }
  if (ContextInternals::hosts(ctx) != 1) {
    return fmt::format("the job spans {} hosts; the direct path reaches GPUs of one host",
                       ContextInternals::hosts(ctx));
  }
  return {};
}

}  // namespace

std::string direct_misfit(const BufferOptions& options) {
  if (options.hidden % 8 != 0) {
    return fmt::format("hidden {} is not a multiple of 8", options.hidden);
  }
  if (options.max_topk > 32) {
    return fmt::format("max_topk {} is more than 32 experts per token", options.max_topk);
  }
  return {};
}

bool PeerWindows::usable(const Context& ctx, const std::string& misfit) {
  const EpTransport choice = ContextInternals::config(ctx).ep_transport;
  if (choice == EpTransport::proxy) return false;
  const std::string why = misfit.empty() ? why_not_direct(ctx) : misfit;
  if (why.empty()) return true;
  if (choice == EpTransport::direct) {
    fail("COURIER_EP_TRANSPORT=direct cannot be honoured: {}", why);
  }
  return false;
}

PeerWindows::PeerWindows(Context& ctx, uint64_t bytes)
    : ctx_(ctx),
      gpu_(ContextInternals::gpu(ctx)),
      device_(ContextInternals::device(ctx)),
      rank_(static_cast<uint32_t>(ctx.rank())),
      ranks_(static_cast<uint32_t>(ctx.world_size())),
      timeout_ns_(uint64_t{ContextInternals::config(ctx).timeout_s} * 1000000000ull),
      status_(ctx, gpu_, timeout_ns_) {
  local_ = ctx.alloc(bytes);  // zeroed by the backend
  courier_gpu_ipc_handle_v1 mine{};
  check(gpu_.runtime().ipc_export(backend(), local_.data(), &mine), "exporting the EP window");
  std::vector<std::byte> all = ctx.bootstrap().allgather(
      std::as_bytes(std::span<const courier_gpu_ipc_handle_v1, 1>(&mine, 1)));
  for (uint32_t r = 0; r < ranks_; ++r) {
    if (r == rank_) {
      peers_.window[r] = local_.data();
      continue;
    }
    courier_gpu_ipc_handle_v1 theirs;
    std::memcpy(&theirs, all.data() + r * sizeof theirs, sizeof theirs);
    void* mapped = nullptr;
    const int rc = gpu_.runtime().ipc_import(backend(), device_, &theirs, &mapped);
    if (rc != 0) {
      const std::string reason = gpu_.last_error();
      for (void* p : imported_) gpu_.runtime().ipc_close(backend(), p);
      fail("ep::Buffer: mapping rank {}'s EP window on GPU {}: {}", r, device_, reason);
    }
    imported_.push_back(mapped);
    peers_.window[r] = mapped;
  }
  // Nobody stores into a peer before every peer mapped every window.
  ctx.bootstrap().barrier();
}

PeerWindows::~PeerWindows() {
  try {
    ctx_.bootstrap().barrier();  // no peer still stores into this window
  } catch (const Error&) {
    // A rank that is gone cannot store any more either.
  }
  for (void* p : imported_) gpu_.runtime().ipc_close(backend(), p);
}

void PeerWindows::wait_stream(const char* what) {
  check(ep().ep_sync(backend(), device_), what);
  ++waits_;
}

void PeerWindows::set_refused() {
  // Kernels of an earlier call (a recv hook's) may still run: they must not
  // see this call's refusal.
  wait_stream("finishing the previous call");
  status_.set_refused(rank_);
}

void PeerWindows::clear_status() {
  status_.clear([this] { wait_stream("finishing the previous call"); });
}

void PeerWindows::copy(void* dst, const void* src, uint64_t bytes, const char* what) {
  if (bytes == 0) return;
  if (!gpu_.supports(GpuFeature::ep_copy)) {
    // The synchronous copy does not follow the EP stream: the kernels
    // queued there may still write `src` or read `dst`.
    wait_stream(what);
    ctx_.copy(dst, src, bytes);
    return;
  }
  check(ep().ep_copy(backend(), device_, dst, src, bytes), what);
}

void PeerWindows::mark(uint32_t* word, const char* what) {
  if (!gpu_.supports(GpuFeature::ep_copy)) fail("ep::Buffer: {}: mark() needs ep_copy", what);
  arm_mark(word);
  check(ep().ep_copy(backend(), device_, word, status_device(), sizeof *word), what);
}

void PeerWindows::wait_marked(const uint32_t* word, const char* what, const uint32_t* earlier) {
  // Acquire loads: what the copies before the mark wrote is read after it
  // (an aarch64 host orders loads only so).
  auto load = [word] { return __atomic_load_n(word, __ATOMIC_ACQUIRE); };
  // The kernels before the mark give up after the timeout: the copy lands
  // by then, unless the GPU itself stopped.
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::nanoseconds(timeout_ns_) +
                       std::chrono::seconds(2);
  uint32_t status = load();
  for (uint32_t spins = 1; status == kMarkPending; ++spins, status = load()) {
    if (spins % 1024 == 0) {
      if (std::chrono::steady_clock::now() > give_up) {
        // The kernels may still store into the readback area, under a
        // later call's mark: this Buffer cannot be trusted again.
        status_.break_with(fmt::format(
            "ep::Buffer::{}: the EP stream did not reach the host's wait within {} s (the GPU "
            "is stuck or gone, or the stream is busy with other work)",
            what, timeout_ns_ / 1000000000ull + 2));
      }
      std::this_thread::yield();
    }
  }
  ++waits_;
  ++marked_waits_;
  // A call before this one that did not wait: whether it failed is told
  // apart from this call's failure (the status word carries both).
  // A bad index there is this call's own (a block that checks indices can
  // set it before the first block reads the word): the calls that find
  // one are dispatches, and those wait at their mark, so no earlier call
  // leaves it behind.
  if (earlier != nullptr) {
    const uint32_t before = __atomic_load_n(earlier, __ATOMIC_ACQUIRE);
    status_.settle_pending_as(before != 0 && before != COURIER_GPU_EP_STATUS_BAD_INDEX);
  }
  if (status != 0) {
    wait_stream(what);
    status_.raise_if_failed(what);
    fail("ep::Buffer::{}: a kernel reported status {:#x}", what, status);
  }
}

namespace {

courier_gpu_ep_signal_v1 signal_job(int device, uint32_t rank, uint32_t ranks, const void* src,
                                    uint64_t bytes, uint64_t record_off, uint64_t flag_off,
                                    uint64_t epoch) {
  courier_gpu_ep_signal_v1 job{};
  job.struct_size = sizeof job;
  job.device = device;
  job.rank = rank;
  job.num_ranks = ranks;
  job.src = src;
  job.bytes = bytes;
  job.record_off = record_off;
  job.flag_off = flag_off;
  job.epoch = epoch;
  return job;
}

}  // namespace

courier_gpu_ep_wait_v1 PeerWindows::wait_job(uint64_t first_flag, uint64_t epoch,
                                             const uint64_t* epoch_word) const {
  courier_gpu_ep_wait_v1 job{};
  job.struct_size = sizeof job;
  job.device = device_;
  job.num_ranks = ranks_;
  job.flags = reinterpret_cast<const uint64_t*>(at(first_flag));
  job.epoch = epoch;
  job.timeout_ns = timeout_ns_;
  job.status = status_device();
  job.status_host = status_.mirror_device();
  job.epoch_word = epoch_word;
  return job;
}

void PeerWindows::signal(const void* src, uint64_t bytes, uint64_t record_off, uint64_t flag_off,
                         uint64_t epoch, const uint64_t* epoch_word) const {
  courier_gpu_ep_signal_v1 job =
      signal_job(device_, rank_, ranks_, src, bytes, record_off, flag_off, epoch);
  job.status = status_device();
  job.peers = peers_;
  job.epoch_word = epoch_word;
  check(ep().ep_signal(backend(), &job), "signalling the peers");
}

courier_gpu_ep_signal_v1 PeerWindows::signal_and_wait_job(const void* src, uint64_t bytes,
                                                          uint64_t record_off, uint64_t flag_off,
                                                          uint64_t first_flag, uint64_t epoch,
                                                          const uint64_t* epoch_word) const {
  courier_gpu_ep_signal_v1 job =
      signal_job(device_, rank_, ranks_, src, bytes, record_off, flag_off, epoch);
  job.status = status_device();
  job.peers = peers_;
  job.epoch_word = epoch_word;
  job.wait = wait_job(first_flag, epoch, epoch_word);
  return job;
}

void PeerWindows::signal_and_wait(const void* src, uint64_t bytes, uint64_t record_off,
                                  uint64_t flag_off, uint64_t first_flag, uint64_t epoch,
                                  const uint64_t* epoch_word) const {
  const courier_gpu_ep_signal_v1 job =
      signal_and_wait_job(src, bytes, record_off, flag_off, first_flag, epoch, epoch_word);
  check(ep().ep_signal(backend(), &job), "signalling and waiting for the peers");
}

void PeerWindows::combine(courier_gpu_ep_combine_send_v1& send,
                          const courier_gpu_ep_reduce_v1& reduce, uint64_t flag_off,
                          uint64_t first_flag, uint64_t epoch, const uint64_t* epoch_word) const {
  send.reduce = combine_fused() ? &reduce : nullptr;
  check(ep().ep_combine_send(backend(), &send), "sending rows back");
  if (!fuses()) signal_and_wait(nullptr, 0, 0, flag_off, first_flag, epoch, epoch_word);
  if (send.reduce == nullptr) check(ep().ep_reduce(backend(), &reduce), "summing the rows");
}

void PeerWindows::wait(uint64_t first_flag, uint64_t epoch, const uint64_t* epoch_word) const {
  const courier_gpu_ep_wait_v1 job = wait_job(first_flag, epoch, epoch_word);
  check(ep().ep_wait(backend(), &job), "waiting for the peers");
}

bool PeerWindows::fuses() const { return gpu_.supports(GpuFeature::ep_fused); }
bool PeerWindows::local_rows() const { return gpu_.supports(GpuFeature::ep_local_rows); }
bool PeerWindows::combine_fused() const {
  return gpu_.supports(GpuFeature::ep_combine_fused) && gpu_.supports(GpuFeature::ep_fused);
}
bool PeerWindows::ht_fused() const {
  return gpu_.supports(GpuFeature::ep_ht_fused) && gpu_.supports(GpuFeature::ep_fused);
}

void PeerWindows::check(int rc, const char* what) const {
  if (rc != 0) fail("ep::Buffer: {}: {}", what, gpu_.last_error());
}

DoneMark PeerWindows::arm_done(bool waits) const {
  if (!waits || !fuses() || !gpu_.supports(GpuFeature::ep_done_mark)) return {};
  arm_mark(status_.done_mark_host());
  return {status_.done_mark_host(), status_.done_mark_device()};
}

void PeerWindows::sync(const char* what, DoneMark done) {
  if (!status_.host_waits()) {
    status_.defer(what);
    return;
  }
  sync_now(what, done);
}

void PeerWindows::sync_now(const char* what, DoneMark done) {
  // The mark lands once the call's last kernel did its work: the stream's
  // own completion would tell the host microseconds later. (A failed call
  // is waited for on the stream too, by wait_marked.)
  if (done.host != nullptr) {
    wait_marked(done.host, what);
  } else {
    wait_stream(what);
  }
  status_.raise_if_failed(what);
}

void PeerWindows::synchronize() {
  status_.synchronize([this] { wait_stream("synchronizing"); });
}

}  // namespace courier::ep
