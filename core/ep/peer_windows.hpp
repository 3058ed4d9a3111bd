// The EP direct path's memory (docs/ep.md, "Direct path"): one window of
// device memory per rank, the same layout on every rank, mapped into every
// other rank's GPU through the GPU backend's IPC, plus the status the
// kernels use to fail a call on every rank instead of hanging (EpStatus).
// Also the calls into the backend's ep_* entry points, each checked and
// named.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/backend_instance.hpp"
#include "core/ep/ep_status.hpp"
#include "courier/abi/gpu_v1.h"
#include "courier/context.hpp"
#include "courier/ep.hpp"

namespace courier::ep {

// Why the direct path's kernels cannot take a Buffer's sizes ("" when they
// can): hidden a multiple of 8 (vector loads) and at most 32 experts per
// token (a lane each).
std::string direct_misfit(const BufferOptions& options);

// Where a call's last kernel tells the host the call is done (GPU ABI 1.18
// "Done marks"): the word in mapped host memory as each side sees it, or
// both NULL (the host waits for the stream instead).
struct DoneMark {
  uint32_t* host = nullptr;
  uint32_t* device = nullptr;
};

class PeerWindows {
 public:
  // Whether this job can take the direct path: the GPU backend has the
  // ep_direct and ipc capabilities, every rank is on this host, the
  // Buffer's sizes fit the kernels (`misfit`: why not, "" when they do), and
  // COURIER_EP_TRANSPORT allows it. Every rank decides alike. With
  // COURIER_EP_TRANSPORT=direct an impossible direct path is an error
  // saying why.
  static bool usable(const Context& ctx, const std::string& misfit = "");

  // Collective: allocates `bytes` of device memory (zeroed), exchanges IPC
  // handles through the bootstrap and maps every peer's window.
  PeerWindows(Context& ctx, uint64_t bytes);
  ~PeerWindows();
  PeerWindows(const PeerWindows&) = delete;
  PeerWindows& operator=(const PeerWindows&) = delete;

  std::byte* at(uint64_t offset) const { return static_cast<std::byte*>(local_.data()) + offset; }
  const courier_gpu_ep_peers_v1& peers() const { return peers_; }
  int device() const { return device_; }
  // The GPU backend's EP entries (what the direct path launches).
  const courier_gpu_ep_part_v1& ep() const { return gpu_.ep(); }
  void* backend() const { return gpu_.handle(); }
  uint64_t timeout_ns() const { return timeout_ns_; }
  // Whether the GPU backend fuses launches (COURIER_GPU_CAP_EP_FUSED, GPU ABI 1.13).
  bool fuses() const;
  // Whether a low-latency combine may leave this rank's own rows in place
  // (COURIER_GPU_CAP_EP_LOCAL_ROWS, GPU ABI 1.14).
  bool local_rows() const;
  // Whether a high-throughput dispatch takes two launches and leaves what
  // the host reads in mapped memory (COURIER_GPU_CAP_EP_HT_FUSED, GPU ABI 1.16).
  bool ht_fused() const;
  // Whether a combine's send and reduce are one launch
  // (COURIER_GPU_CAP_EP_COMBINE_FUSED, GPU ABI 1.17).
  bool combine_fused() const;

  // Before a call's last launch, one of the jobs of "Done marks" with its
  // wait: when the call will wait for it (`waits`) and the backend has
  // COURIER_GPU_CAP_EP_DONE_MARK with fused launches, arms the word (the
  // job takes `device`, sync() and sync_now() then spin on `host`);
  // otherwise none.
  DoneMark arm_done(bool waits) const;

  // The status word and the first bad topk index, as the kernels see them.
  uint32_t* status_device() const { return status_.device(); }
  uint64_t* bad_index_device() const { return status_.bad_index_device(); }
  // Before a call: clears the status when the last call left it set.
  void clear_status();
  // Marks this rank's call refused: its signal kernels raise refused flags.
  void set_refused();

  // Enqueues ep_signal: `bytes` at local `src` to record_off of every
  // window, then every window's flag at flag_off raised to `epoch` (with
  // `epoch_word`, device memory: to *epoch_word + 1 instead, GPU ABI 1.10).
  void signal(const void* src, uint64_t bytes, uint64_t record_off, uint64_t flag_off,
              uint64_t epoch, const uint64_t* epoch_word = nullptr) const;
  // The same, and in the same launch the wait for the ranks' flags at
  // local offset first_flag to reach `epoch` (wait below).
  void signal_and_wait(const void* src, uint64_t bytes, uint64_t record_off, uint64_t flag_off,
                       uint64_t first_flag, uint64_t epoch,
                       const uint64_t* epoch_word = nullptr) const;
  // Enqueues ep_wait for the ranks' flags at local offset first_flag (one
  // u64 per rank) to reach `epoch` (or *epoch_word + 1).
  void wait(uint64_t first_flag, uint64_t epoch, const uint64_t* epoch_word = nullptr) const;
  // The job of that wait (for the kernels that wait themselves, GPU ABI 1.13).
  courier_gpu_ep_wait_v1 wait_job(uint64_t first_flag, uint64_t epoch,
                                  const uint64_t* epoch_word) const;
  // A combine's kernels, both modes: with fused launches of GPU ABI 1.17
  // one (the send carries the reduce), else the send, (without fused
  // launches) a signal and wait for the combine flags at local offsets
  // flag_off (this rank's) and first_flag, and the reduce.
  void combine(courier_gpu_ep_combine_send_v1& send, const courier_gpu_ep_reduce_v1& reduce,
               uint64_t flag_off, uint64_t first_flag, uint64_t epoch,
               const uint64_t* epoch_word = nullptr) const;
  // The job of signal_and_wait (for the kernels that signal and wait
  // themselves, GPU ABI 1.16).
  courier_gpu_ep_signal_v1 signal_and_wait_job(const void* src, uint64_t bytes, uint64_t record_off,
                                               uint64_t flag_off, uint64_t first_flag,
                                               uint64_t epoch,
                                               const uint64_t* epoch_word = nullptr) const;

  // Enqueues a copy of `bytes` on the EP stream (GPU ABI 1.11 ep_copy; with
  // a plugin of an older minor, a synchronous copy after a wait for it).
  void copy(void* dst, const void* src, uint64_t bytes, const char* what);
  // How many times the host waited for the EP stream through this (what
  // was queued before such a wait is done).
  uint64_t host_waits_made() const { return waits_; }
  // A point on the EP stream that the host can wait for while the work
  // queued after it runs: mark() writes kMarkPending into `word` (mapped
  // host memory), then enqueues a copy of the EP status word over it;
  // wait_marked() spins until the copy lands (counted in
  // host_waits_made() and marked_waits(): what was queued before the
  // mark is done), then, when the status copied says a kernel failed,
  // waits for the stream and throws as sync() does. Needs ep_copy.
  static constexpr uint32_t kMarkPending = 0xFFFFFFFFu;
  void mark(uint32_t* word, const char* what);
  // Only the first half of mark(), for a kernel that stores the status into
  // `word` itself (ep_route's host_mark, GPU ABI 1.16).
  static void arm_mark(uint32_t* word) { *static_cast<volatile uint32_t*>(word) = kMarkPending; }
  // `earlier`: not NULL, where the kernels stored the status as the
  // calls before this one left it (read once the mark landed), which
  // settles a call that did not wait before this call's outcome is raised.
  void wait_marked(const uint32_t* word, const char* what, const uint32_t* earlier = nullptr);
  uint64_t marked_waits() const { return marked_waits_; }

  // Throws "<what>: <backend's reason>" when rc is not 0.
  void check(int rc, const char* what) const;
  // The end of a call: waits for the EP stream (with `done`, armed for the
  // call's last launch: for its mark) and throws naming the rank when a
  // kernel reported a refusal, a timeout or a bad index (seen by the last
  // ep_wait); or, where calls do not wait (set_host_waits(false)), leaves
  // that to the next call or synchronize().
  void sync(const char* what, DoneMark done = {});
  // The same, waiting also where calls do not wait (the host needs what the
  // kernels left: a dispatch's counts).
  void sync_now(const char* what, DoneMark done = {});
  // Waits for the calls queued so far; throws what those that did not wait
  // found.
  void synchronize();
  void set_host_waits(bool waits) { status_.set_host_waits(waits); }
  bool host_waits() const { return status_.host_waits(); }
  // This rank refused a call while its peers do not wait (EpStatus::break_with).
  [[noreturn]] void break_with(const std::string& why) { status_.break_with(why); }
  void throw_if_broken() const { status_.throw_if_broken(); }

 private:
  // ep_sync, counted (host_waits_made).
  void wait_stream(const char* what);

  Context& ctx_;
  const GpuBackend& gpu_;
  int device_;
  uint32_t rank_, ranks_;
  uint64_t timeout_ns_;
  DeviceBuffer local_;
  courier_gpu_ep_peers_v1 peers_{};
  std::vector<void*> imported_;
  EpStatus status_;
  uint64_t waits_ = 0;
  uint64_t marked_waits_ = 0;
};

}  // namespace courier::ep
