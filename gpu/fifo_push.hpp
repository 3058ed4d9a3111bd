// The producer side of a FIFO channel: what GPU threads call to hand
// TransferCmds to the proxy. Compiled unchanged by every GPU backend.
//
// Protocol (docs/fifo-and-proxy.md):
//  1. reserve n consecutive tickets with one atomic add on the channel's head;
//  2. wait until those tickets fit under the in-flight limit
//     (ticket + n - completed <= max_inflight); because max_inflight <= depth
//     this also guarantees the slots were consumed and cleared;
//  3. write every slot's word1, then publish each slot by storing its word0
//     (the non-zero op and the ticket's sequence number), ordered after all
//     word1 stores by one fence per batch on GPUs.
// The consumer reads slots in ticket order and clears word0 after reading.
// Completion is tracked as a prefix: ticket t is complete once
// control->completed > t, which also means every earlier ticket completed.
// Producers keep a copy of `completed` in device memory (completed_cache)
// and read the real one across PCIe only when the copy says "no room" or
// "not complete yet".
#pragma once

#include <cstdint>

#include "courier/device_channel.hpp"
#include "gpu/device_atomics.hpp"
#include "gpu/warp_ops.hpp"

namespace courier::device {

// control->completed, read across PCIe; the cached copy is raised to it.
COURIER_DEVICE_INLINE uint64_t refresh_completed(const DeviceChannel& ch) {
  uint64_t completed = load_acquire(&ch.control->completed);
  if (ch.completed_cache != nullptr) raise_release_gpu(ch.completed_cache, completed);
  return completed;
}

// A value `completed` had at some point (possibly stale, never ahead).
COURIER_DEVICE_INLINE uint64_t cached_completed(const DeviceChannel& ch) {
  return ch.completed_cache != nullptr ? load_acquire_gpu(ch.completed_cache) : 0;
}

// Non-blocking: has `ticket` completed?
COURIER_DEVICE_INLINE bool is_complete(const DeviceChannel& ch, uint64_t ticket) {
  return cached_completed(ch) > ticket || refresh_completed(ch) > ticket;
}

// The first error the proxy recorded on this channel (0 = none).
COURIER_DEVICE_INLINE uint64_t channel_error(const DeviceChannel& ch) {
  return load_relaxed(&ch.control->error);
}

// Records a fatal error on the channel, replacing an earlier non-fatal one
// (a fatal error must be seen by every waiter; the first fatal one stays).
COURIER_DEVICE_INLINE void mark_channel_fatal(FifoControl* control, uint64_t ticket,
                                              ChannelErrorCode code) {
  uint64_t seen = load_relaxed(&control->error);
  while (!is_fatal_channel_error(seen)) {
    if (compare_exchange(&control->error, seen, encode_channel_error(ticket, code))) return;
    seen = load_relaxed(&control->error);
  }
}

// Waits until control->completed >= target. Returns channel_failed as soon
// as the channel is marked fatally failed, and timed_out when the proxy made
// no progress for ch.timeout_ns.
COURIER_DEVICE_INLINE PushStatus wait_completed(const DeviceChannel& ch, uint64_t target) {
  uint64_t seen = load_acquire(&ch.control->completed);
  if (seen >= target) return PushStatus::ok;
  Backoff backoff;
  uint64_t since = now_ns();
  for (;;) {
    backoff.pause(&ch.control->completed, &ch.control->wake_at, target);
    uint64_t now_completed = load_acquire(&ch.control->completed);
    if (now_completed >= target) {
      if (ch.completed_cache != nullptr) raise_release_gpu(ch.completed_cache, now_completed);
      return PushStatus::ok;
    }
    if (is_fatal_channel_error(channel_error(ch))) return PushStatus::channel_failed;
    if (now_completed != seen) {  // progress resets the deadline
      seen = now_completed;
      since = now_ns();
    } else if (now_ns() - since > ch.timeout_ns) {
      return PushStatus::timed_out;
    }
  }
}

// Waits until tickets [ticket, ticket + n) fit under the in-flight limit
// (which also means their slots were consumed and cleared). Usually decided
// by the cached count alone.
COURIER_DEVICE_INLINE PushStatus wait_for_room(const DeviceChannel& ch, uint64_t ticket,
                                               uint32_t n) {
  const uint64_t needed = ticket + n > ch.max_inflight ? ticket + n - ch.max_inflight : 0;
  if (cached_completed(ch) >= needed || refresh_completed(ch) >= needed) return PushStatus::ok;
  // Hysteresis: once blocked, wait until half the limit is free again, so
  // a waiting producer wakes once per many completions, not once per
  // completion; the half still in flight keeps the transport busy.
  // Never beyond `ticket`: the tickets this producer holds are published
  // only after the wait, so waiting for them would never end.
  uint64_t resume_at = needed + ch.max_inflight / 2;
  if (resume_at > ticket) resume_at = ticket;
  PushStatus status = wait_completed(ch, resume_at);
  if (status != PushStatus::ok) {
    // These tickets will never be published, and the proxy reads slots in
    // ticket order: the channel cannot progress any more. Say so, so that
    // every other wait on it fails at once instead of timing out.
    mark_channel_fatal(ch.control, ticket, ChannelErrorCode::producer_timed_out);
  }
  return status;
}

// Pushes cmds[0..n) (n <= kMaxBatch) as consecutive tickets; *first_ticket
// receives the first one. Blocks while the channel is at its in-flight limit.
COURIER_DEVICE_INLINE PushStatus push_batch(const DeviceChannel& ch, const TransferCmd* cmds,
                                            uint32_t n, uint64_t* first_ticket) {
  if (n == 0 || n > kMaxBatch || n > ch.max_inflight) return PushStatus::batch_too_large;
  uint64_t ticket = fetch_add_relaxed(ch.head, n);
  PushStatus status = wait_for_room(ch, ticket, n);
  if (status != PushStatus::ok) return status;
  TransferCmd* slots[kMaxBatch];
  for (uint32_t i = 0; i < n; ++i) {
    slots[i] = &ch.slots[(ticket + i) & ch.depth_mask];
    store_relaxed(&slots[i]->word1, cmds[i].word1);
  }
  // Every word1 must be visible before any word0 (the publishing half):
  // one fence for the whole batch on GPUs (see device_atomics.hpp).
  publish_fence();
  for (uint32_t i = 0; i < n; ++i) {
    TransferCmd cmd = cmds[i];
    cmd.set_seq(ticket + i);
    publish_store(&slots[i]->word0, cmd.word0);
  }
  if (first_ticket != nullptr) *first_ticket = ticket;
  return PushStatus::ok;
}

// Every active lane of the warp (wavefront) pushes its own `cmd`: the
// leader reserves consecutive tickets for all of them with one atomic and
// waits for room, and each lane publishes its slot behind one fence that the
// warp executes once. Lane order decides ticket order. Call it from all
// lanes that push; *ticket receives this lane's ticket.
COURIER_DEVICE_INLINE PushStatus push_warp(const DeviceChannel& ch, const TransferCmd& cmd,
                                           uint64_t* ticket) {
  const ActiveLanes lanes = active_lanes();
  if (lanes.count > ch.max_inflight) return PushStatus::batch_too_large;
  uint64_t first = 0;
  uint64_t status = 0;
  if (lanes.rank == 0) {
    first = fetch_add_relaxed(ch.head, lanes.count);
    status = static_cast<uint64_t>(wait_for_room(ch, first, lanes.count));
  }
  first = from_leader(lanes, first);
  status = from_leader(lanes, status);
  if (status != 0) return static_cast<PushStatus>(status);
  const uint64_t mine = first + lanes.rank;
  TransferCmd* slot = &ch.slots[mine & ch.depth_mask];
  store_relaxed(&slot->word1, cmd.word1);
  publish_fence();
  TransferCmd published = cmd;
  published.set_seq(mine);
  publish_store(&slot->word0, published.word0);
  if (ticket != nullptr) *ticket = mine;
  return PushStatus::ok;
}

COURIER_DEVICE_INLINE PushStatus push(const DeviceChannel& ch, const TransferCmd& cmd,
                                      uint64_t* ticket) {
  return push_batch(ch, &cmd, 1, ticket);
}

// Pushes `cmd` and waits until it completed; channel_failed when the proxy
// recorded an error on the channel meanwhile (or before).
COURIER_DEVICE_INLINE PushStatus push_and_wait(const DeviceChannel& ch, const TransferCmd& cmd) {
  uint64_t ticket = 0;
  PushStatus status = push(ch, cmd, &ticket);
  if (status != PushStatus::ok) return status;
  status = wait_completed(ch, ticket + 1);
  if (status != PushStatus::ok) return status;
  return channel_error(ch) != 0 ? PushStatus::channel_failed : PushStatus::ok;
}

// BARRIER: returns once every rank of the scope (kBarrierWorld or
// kBarrierRail) pushed its BARRIER with the same epoch on this channel
// index and finished the channel's earlier commands.
COURIER_DEVICE_INLINE PushStatus barrier(const DeviceChannel& ch, uint64_t epoch,
                                         uint8_t scope = kBarrierWorld) {
  TransferCmd cmd;
  if (encode_barrier(epoch, &cmd, scope) != CmdStatus::ok) return PushStatus::invalid_argument;
  return push_and_wait(ch, cmd);
}

// DRAIN: returns once every command pushed to this channel before it has
// completed. Reports channel_failed when the proxy recorded an error.
COURIER_DEVICE_INLINE PushStatus drain(const DeviceChannel& ch) {
  TransferCmd cmd;
  encode_drain(&cmd);
  return push_and_wait(ch, cmd);
}

}  // namespace courier::device
