// What a device's EP launches are shaped by (gpu/ep/direct_launch.hpp),
// asked of the GPU runtime once per device, when its EP stream is made,
// rather than at every launch: the occupancy query is a runtime call that
// would otherwise sit in every high-throughput combine's host time before
// its launch. Plain C++: the backends' host code holds one per device.
#pragma once

#include <cstdint>

namespace courier::device::ep {

struct LaunchShape {
  uint32_t sms = 1;              // multiprocessors
  uint32_t reduce_resident = 1;  // narrow reduce blocks resident per multiprocessor
  uint32_t fused_resident = 1;   // narrow fused combine blocks resident per multiprocessor
};

}  // namespace courier::device::ep
