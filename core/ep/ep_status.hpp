// How an EP call's kernels report failure (docs/ep.md, "Failure"): a status
// word in device memory that every kernel reads (a kernel that finds it set
// skips its work), the first bad topk index, and a mirror in mapped host
// memory that the last kernel of a call writes, so the host learns the
// outcome without a copy. Shared by the direct and the proxy path.
#pragma once

#include <cstdint>
#include <string>

#include "core/backend_instance.hpp"
#include "courier/context.hpp"

namespace courier::ep {

// What a bad-index error names: the call's topk_idx [tokens][topk]
// (device memory) and its expert count.
struct EpIndices {
  const int64_t* topk_idx = nullptr;
  uint32_t topk = 0, num_experts = 0;
};

class EpStatus {
 public:
  EpStatus(Context& ctx, const GpuBackend& gpu, uint64_t timeout_ns);
  ~EpStatus();
  EpStatus(const EpStatus&) = delete;
  EpStatus& operator=(const EpStatus&) = delete;

  // As the kernels see them.
  uint32_t* device() const { return static_cast<uint32_t*>(status_.data()); }
  uint64_t* bad_index_device() const { return static_cast<uint64_t*>(status_.data()) + 1; }
  uint32_t* mirror_device() const { return static_cast<uint32_t*>(mirror_device_); }
  // A word of the same mapped area where a call's last kernel tells the
  // host that the call is done (GPU ABI 1.18 "Done marks"; PeerWindows::
  // arm_done), as the host and as the kernels see it.
  uint32_t* done_mark_host() const { return static_cast<uint32_t*>(mirror_host_) + kDoneMarkWord; }
  uint32_t* done_mark_device() const {
    return static_cast<uint32_t*>(mirror_device_) + kDoneMarkWord;
  }

  // Whether a call waits on the host for its kernels and raises what they
  // found (the default), or returns once they are queued and leaves their
  // outcome to the next call or synchronize() (docs/ep.md, "Calls that do
  // not wait").
  void set_host_waits(bool waits) { host_waits_ = waits; }
  bool host_waits() const { return host_waits_; }
  // A call that did not wait: its kernels' outcome is found later.
  void defer(const char* what) { pending_ = what; }

  // Before a call: raises what an earlier call that did not wait found (if
  // its kernels told the mirror already), and the failure that broke this
  // status; then clears the status when the last call left it set
  // (`settle` first waits for that call's kernels).
  template <class Settle>
  void clear(Settle&& settle) {
    throw_if_broken();
    // Also a failure an earlier call's kernels reported that the host has
    // not read yet (a recv hook not run). One read: a failure arriving
    // after it is found by the next call.
    const uint32_t seen = mirror();
    if (!dirty_ && seen == 0) return;
    settle();
    // A call that did not wait may have failed meanwhile: raise it rather
    // than clear it.
    if (pending_ != nullptr) raise_deferred();
    zero();
  }
  // Waits for the calls queued so far (`settle`) and raises what the ones
  // that did not wait found.
  template <class Settle>
  void synchronize(Settle&& settle) {
    throw_if_broken();
    settle();
    if (pending_ != nullptr) raise_deferred();
  }
  // A call that did not wait failed, or this rank refused one while its
  // peers do not wait: the ranks no longer agree on which call comes next,
  // so every later call throws `why` too. Throws it now.
  [[noreturn]] void break_with(const std::string& why);
  // Throws the failure that broke this status, if one did.
  void throw_if_broken() const;
  // Marks this rank's call refused by `rank` (itself).
  void set_refused(uint32_t rank);
  // The kernels told whether the calls queued before this one failed (a
  // high-throughput dispatch's route kernel reads the status before it
  // sets any: GPU ABI 1.16): a pending call is then settled, without a
  // wait, and a failure of it breaks the status and is thrown, as the
  // pending call's.
  void settle_pending_as(bool earlier_failed);
  // Once the call's kernels ran: throws, naming the rank or channel, when
  // the mirror says one failed (a refusal, a bad index, a timeout, a lost
  // peer or channel, more rows than the outputs hold).
  void raise_if_failed(const char* what, const EpIndices& indices = {});

 private:
  // The done mark's own 32-byte line of the mirror's 64 bytes.
  static constexpr uint32_t kDoneMarkWord = 8;

  void zero();
  uint64_t bad_index() const;
  uint32_t mirror() const { return *static_cast<const volatile uint32_t*>(mirror_host_); }
  // Raises the failure the mirror holds, if any, as the pending call's.
  void raise_deferred();
  // The same, recorded (the status breaks) instead of thrown.
  void settle_pending();
  static std::string broken_by(const std::string& why);

  Context& ctx_;
  const GpuBackend& gpu_;
  uint64_t timeout_ns_;
  DeviceBuffer status_;          // {u32 status, pad, u64 bad index}
  void* mirror_host_ = nullptr;  // mapped host memory
  void* mirror_device_ = nullptr;
  bool dirty_ = false;  // the status may be non-zero
  bool host_waits_ = true;
  const char* pending_ = nullptr;  // the last call that did not wait, until found out
  std::string broken_;             // why no call can go ahead any more
};

}  // namespace courier::ep
