// A FIFO channel crossing the GPU ABI: courier::DeviceChannel and its C form,
// courier_gpu_channel_v1, field by field (no layout is assumed).
#pragma once

#include "courier/abi/gpu_v1.h"
#include "courier/device_channel.hpp"

namespace courier {

COURIER_DEVICE_INLINE DeviceChannel from_abi(const courier_gpu_channel_v1& c) {
  DeviceChannel ch;
  ch.slots = static_cast<TransferCmd*>(c.slots);
  ch.control = static_cast<FifoControl*>(c.control);
  ch.head = c.head;
  ch.completed_cache = c.completed_cache;
  ch.depth_mask = c.depth_mask;
  ch.max_inflight = c.max_inflight;
  ch.channel_id = c.channel_id;
  ch.timeout_ns = c.timeout_ns;
  return ch;
}

COURIER_DEVICE_INLINE courier_gpu_channel_v1 to_abi(const DeviceChannel& ch) {
  courier_gpu_channel_v1 c{};
  c.slots = ch.slots;
  c.control = ch.control;
  c.head = ch.head;
  c.completed_cache = ch.completed_cache;
  c.depth_mask = ch.depth_mask;
  c.max_inflight = ch.max_inflight;
  c.channel_id = ch.channel_id;
  c.timeout_ns = ch.timeout_ns;
  return c;
}

}  // namespace courier
