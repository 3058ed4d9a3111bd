// DeviceChannel: what a kernel holds to push commands into one FIFO channel.
//
// A plain struct of device-visible pointers, passed to kernels by value. The
// ring slots and the control block live in host-pinned memory mapped into
// the device; the reservation counter lives in device memory, because only
// producers touch it (the proxy learns about new commands from the slots).
#pragma once

#include <cstdint>

#include "courier/transfer_cmd.hpp"

namespace courier {

// Written by the proxy, read by producers. One cache line per field so that
// producers polling `completed` do not share a line with anything else.
struct alignas(64) FifoControl {
  // Every ticket below this value has completed (writes visible remotely).
  alignas(64) uint64_t completed;
  // First error the proxy met on this channel (0 = none); see ChannelError.
  alignas(64) uint64_t error;
};

// Producer-side failures, reported by the push/wait functions.
enum class PushStatus : uint8_t {
  ok = 0,
  batch_too_large,  // more than kMaxBatch commands, or more than max_inflight
  timed_out,        // no progress for COURIER_TIMEOUT_S: the proxy is stuck or gone
  channel_failed,   // the proxy recorded an error on this channel
};

struct DeviceChannel {
  TransferCmd* slots = nullptr;    // depth slots, host-pinned
  FifoControl* control = nullptr;  // host-pinned
  uint64_t* head = nullptr;        // next ticket to reserve, device memory
  uint32_t depth_mask = 0;         // depth - 1 (depth is a power of two)
  uint32_t max_inflight = 0;       // reserved-but-incomplete commands allowed
  uint32_t channel_id = 0;
  uint32_t reserved = 0;
  uint64_t timeout_ns = 0;  // give up waiting after this long
};

inline constexpr uint32_t kMaxBatch = 8;  // commands per push_batch

}  // namespace courier
