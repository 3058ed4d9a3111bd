// DeviceChannel: what a kernel holds to push commands into one FIFO channel.
//
// A plain struct of device-visible pointers, passed to kernels by value. The
// ring slots and the control block live in host-pinned memory mapped into
// the device; the reservation counter lives in device memory, because only
// producers touch it (the proxy learns about new commands from the slots),
// and so does the producers' cached copy of the proxy's completion count,
// so that a producer with room in the window never reads across PCIe.
#pragma once

#include <cstdint>

#include "courier/transfer_cmd.hpp"

namespace courier {

// Written by the proxy, read by producers. One cache line per field so that
// producers polling `completed` do not share a line with anything else.
struct alignas(64) FifoControl {
  // Every ticket below this value has completed (writes visible remotely).
  alignas(64) uint64_t completed;
  // First error met on this channel (0 = none); see ChannelErrorCode.
  alignas(64) uint64_t error;
  // Lowest `completed` value a blocked CPU producer waits for (0 = nobody):
  // the proxy wakes the waiters once it publishes that value.
  alignas(64) uint64_t wake_at;
};

// Why a channel's error word (FifoControl::error) was set: the low 8 bits
// hold the code, the rest ticket + 1 of the command concerned. Codes with
// bit 7 set are fatal: the channel will make no more progress, and waits on
// it fail at once instead of timing out.
enum class ChannelErrorCode : uint8_t {
  none = 0,
  post_failed = 1,            // the transport refused a command
  completion_failed = 2,      // the transport reported an error completion
  unsupported = 3,            // an op this proxy does not carry out (yet)
  bad_command = 4,            // unknown op
  proxy_failed = 0x81,        // the proxy thread serving the channel stopped
  producer_timed_out = 0x82,  // a producer gave up with tickets reserved
  // Another rank of the job died (the bootstrap saw its connection close
  // without a goodbye); here the upper bits hold that rank + 1, not a ticket.
  peer_failed = 0x83,
};

// Short text of a code, for logs and diagnostics.
constexpr const char* to_string(ChannelErrorCode code) {
  switch (code) {
    case ChannelErrorCode::none:
      return "none";
    case ChannelErrorCode::post_failed:
      return "the transport refused a command";
    case ChannelErrorCode::completion_failed:
      return "the transport reported an error completion";
    case ChannelErrorCode::unsupported:
      return "an operation the proxy does not carry out";
    case ChannelErrorCode::bad_command:
      return "not a valid command";
    case ChannelErrorCode::proxy_failed:
      return "the proxy thread serving the channel stopped";
    case ChannelErrorCode::producer_timed_out:
      return "a producer timed out with tickets reserved";
    case ChannelErrorCode::peer_failed:
      return "another rank of the job died";
  }
  return "unknown channel error";
}

COURIER_HOST_DEVICE constexpr uint64_t encode_channel_error(uint64_t ticket,
                                                            ChannelErrorCode code) {
  return ((ticket + 1) << 8) | static_cast<uint64_t>(code);
}
COURIER_HOST_DEVICE constexpr bool is_fatal_channel_error(uint64_t word) {
  return (word & 0x80) != 0;
}

// Producer-side failures, reported by the push/wait functions.
enum class PushStatus : uint8_t {
  ok = 0,
  batch_too_large,   // more than kMaxBatch commands, or more than max_inflight
  timed_out,         // no progress for COURIER_TIMEOUT_S: the proxy is stuck or gone
  channel_failed,    // the proxy recorded an error on this channel
  invalid_argument,  // a command could not be encoded (e.g. an unknown BARRIER scope)
};

struct DeviceChannel {
  TransferCmd* slots = nullptr;    // depth slots, host-pinned
  FifoControl* control = nullptr;  // host-pinned
  uint64_t* head = nullptr;        // next ticket to reserve, device memory
  // Some recent value of control->completed (never ahead of it), device
  // memory; producers raise it whenever they read the real one.
  uint64_t* completed_cache = nullptr;
  uint32_t depth_mask = 0;    // depth - 1 (depth is a power of two)
  uint32_t max_inflight = 0;  // reserved-but-incomplete commands allowed
  uint32_t channel_id = 0;
  uint32_t reserved = 0;
  uint64_t timeout_ns = 0;  // give up waiting after this long
};

inline constexpr uint32_t kMaxBatch = 8;  // commands per push_batch

}  // namespace courier
