// What the FIFO self-test and benchmark kernels run on each device thread
// (the GPU ABI's run_fifo_producers and run_fifo_round_trips). Every GPU
// backend wraps these bodies in its own kernel; the host side that checks
// the commands lives in tools/courier-bench.
//
// Producer p pushes WRITE commands with src_offset = p, dst_offset = its
// running index and a length that is a checksum of both, so the consumer can
// tell a lost, duplicated, reordered or torn (half-old, half-new) command.
#pragma once

#include <cstdint>

#include "courier/device_channel.hpp"
#include "courier/transfer_cmd.hpp"
#include "gpu/fifo_push.hpp"

namespace courier::device {

// A non-zero 24-bit checksum of (producer, index).
COURIER_HOST_DEVICE constexpr uint32_t selftest_length(uint32_t producer, uint32_t index) {
  uint32_t h = producer * 0x9E3779B1u ^ (index + 0x7F4A7C15u) * 0x85EBCA77u;
  h ^= h >> 15;
  h *= 0x2C1B3C6Du;
  h ^= h >> 13;
  return (h & 0xFFFFFFu) | 1u;
}

COURIER_DEVICE_INLINE TransferCmd selftest_command(uint32_t dst_rank, uint32_t producer,
                                                   uint32_t index) {
  WriteCmdArgs args;
  args.dst_rank = dst_rank;
  args.src_offset = producer;
  args.dst_offset = index;
  args.length = selftest_length(producer, index);
  TransferCmd cmd;
  encode_write(args, &cmd);
  return cmd;
}

// Producer `producer` pushes `count` commands. warp_mode: through push_warp
// (the caller's warp reserves together); otherwise push() per command.
COURIER_DEVICE_INLINE PushStatus selftest_produce(const DeviceChannel& ch, uint32_t producer,
                                                  uint64_t count, uint32_t dst_rank,
                                                  bool warp_mode) {
  for (uint64_t i = 0; i < count; ++i) {
    TransferCmd cmd = selftest_command(dst_rank, producer, static_cast<uint32_t>(i));
    PushStatus status = warp_mode ? push_warp(ch, cmd, nullptr) : push(ch, cmd, nullptr);
    if (status != PushStatus::ok) return status;
  }
  return PushStatus::ok;
}

// Pushes cmds[0..count) in order, up to kMaxBatch at a time, then waits
// until the last one completed; channel_failed when the proxy recorded an
// error on the channel (the GPU ABI's run_command_lists).
COURIER_DEVICE_INLINE PushStatus push_command_list(const DeviceChannel& ch, const TransferCmd* cmds,
                                                   uint32_t count) {
  uint64_t end = 0;
  for (uint32_t i = 0; i < count;) {
    uint32_t n = count - i;
    if (n > kMaxBatch) n = kMaxBatch;
    if (n > ch.max_inflight) n = ch.max_inflight;
    uint64_t first = 0;
    PushStatus status = push_batch(ch, cmds + i, n, &first);
    if (status != PushStatus::ok) return status;
    end = first + n;
    i += n;
  }
  if (count == 0) return PushStatus::ok;
  PushStatus status = wait_completed(ch, end);
  if (status != PushStatus::ok) return status;
  return channel_error(ch) != 0 ? PushStatus::channel_failed : PushStatus::ok;
}

// One thread: `iterations` times, push one command and wait until it
// completed; samples[i] = that round trip in ns of the device clock.
COURIER_DEVICE_INLINE PushStatus selftest_command_round_trips(const DeviceChannel& ch,
                                                              uint32_t iterations,
                                                              uint64_t* samples) {
  for (uint32_t i = 0; i < iterations; ++i) {
    TransferCmd cmd = selftest_command(0, 0, i);
    uint64_t start = now_ns();
    uint64_t ticket = 0;
    PushStatus status = push(ch, cmd, &ticket);
    if (status == PushStatus::ok) status = wait_completed(ch, ticket + 1);
    if (status != PushStatus::ok) return status;
    samples[i] = now_ns() - start;
  }
  return PushStatus::ok;
}

// The baseline round trip, no FIFO: store i + 1 into *ping and wait until a
// host thread echoed it into *pong.
COURIER_DEVICE_INLINE PushStatus selftest_flag_round_trips(uint64_t* ping, const uint64_t* pong,
                                                           uint32_t iterations, uint64_t* samples,
                                                           uint64_t timeout_ns) {
  for (uint32_t i = 0; i < iterations; ++i) {
    uint64_t start = now_ns();
    store_release(ping, i + 1);
    while (load_acquire(pong) != i + 1) {
      if (now_ns() - start > timeout_ns) return PushStatus::timed_out;
    }
    samples[i] = now_ns() - start;
  }
  return PushStatus::ok;
}

}  // namespace courier::device
