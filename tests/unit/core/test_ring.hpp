// A FIFO ring in plain host memory, as the gpu-host backend provides it.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "courier/device_channel.hpp"

namespace courier::testing {

struct TestRing {
  TestRing(uint32_t depth, uint32_t max_inflight, uint64_t timeout_ns = 30'000'000'000ull)
      : slots(depth), control(std::make_unique<FifoControl>()) {
    ch.slots = slots.data();
    ch.control = control.get();
    ch.head = &head;
    ch.completed_cache = &completed_cache;
    ch.depth_mask = depth - 1;
    ch.max_inflight = max_inflight;
    ch.timeout_ns = timeout_ns;
  }
  std::vector<TransferCmd> slots;
  std::unique_ptr<FifoControl> control;
  alignas(64) uint64_t head = 0;
  alignas(64) uint64_t completed_cache = 0;
  DeviceChannel ch;
};

inline TransferCmd write_cmd(uint32_t rank, uint32_t dst_offset, uint32_t length) {
  WriteCmdArgs a;
  a.dst_rank = rank;
  a.dst_offset = dst_offset;
  a.length = length;
  TransferCmd cmd;
  encode_write(a, &cmd);
  return cmd;
}

}  // namespace courier::testing
