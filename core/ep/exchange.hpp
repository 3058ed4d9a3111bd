// The transport steps both EP modes share (docs/ep.md): one registered
// window per Buffer, WRITEs between equal offsets of it, write-then-atomic
// signals, command lists pushed from device threads, and waiting for the
// peers' signals.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/ep/call_admission.hpp"
#include "core/ep/tensor_checks.hpp"
#include "courier/context.hpp"

namespace courier::ep {

// The count word of a refused call: its peers fail instead of waiting.
inline constexpr uint64_t kRefused = ~uint64_t{0};

class Exchange {
 public:
  // Allocates `bytes` of the GPU backend's memory, zeroed, and registers it
  // (collective).
  Exchange(Context& ctx, uint64_t bytes);
  // Collective: gives the window back.
  ~Exchange();
  Exchange(const Exchange&) = delete;
  Exchange& operator=(const Exchange&) = delete;

  Context& context() const { return ctx_; }
  uint32_t rank() const { return rank_; }
  uint32_t ranks() const { return ranks_; }
  std::byte* at(uint64_t offset) const { return static_cast<std::byte*>(memory_.data()) + offset; }

  // WRITEs [src_offset, +bytes) here to dst_offset at rank `dst`, in
  // commands of at most TransferCmd::kMaxLength bytes.
  void add_writes(std::vector<TransferCmd>& list, uint32_t dst, uint64_t src_offset,
                  uint64_t dst_offset, uint64_t bytes) const;
  // The signal of a phase: WRITE `bytes` staged at staging_offset (filled by
  // the caller) to record_offset at `dst`, then ATOMIC-add 1 to the u64 at
  // epoch_offset there. Write-then-atomic: a peer that sees the epoch sees
  // the record and everything written before it.
  void add_signal(std::vector<TransferCmd>& list, uint32_t dst, uint64_t staging_offset,
                  uint64_t record_offset, uint64_t bytes, uint64_t epoch_offset) const;
  // Pushes commands[d] on channel d % channels from device threads, all at
  // once, and waits; throws naming the channel when one failed.
  void run(std::vector<std::vector<TransferCmd>>& commands, const char* what);
  // Waits until each rank's record (ranks() records of record_bytes from
  // first_record, the epoch as u64 at epoch_field within each) reached
  // `epoch`; returns the records. Throws after 60 s naming the missing
  // ranks, or at once when a peer died.
  std::vector<std::byte> wait(uint64_t first_record, uint64_t record_bytes, uint64_t epoch_field,
                              uint64_t epoch, const char* what);
  // Sends `refusals` (each peer's "refused" signal), then throws `why`: the
  // peers waiting for this call fail at once instead of hanging.
  [[noreturn]] void refuse(std::vector<std::vector<TransferCmd>>& refusals, const char* what,
                           const std::string& why);

 private:
  Context& ctx_;
  uint32_t rank_, ranks_;
  DeviceBuffer memory_;
  uint32_t window_ = 0;
};

}  // namespace courier::ep
