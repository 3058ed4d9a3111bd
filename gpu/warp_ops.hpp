// The lanes that step together, for each compiler that builds gpu/: a CUDA
// warp (32 lanes), a HIP wavefront (64 lanes) and a CPU thread of the
// gpu-host backend (a "warp" of one). The FIFO producer uses them to let the
// active lanes reserve their slots with one atomic and publish them behind
// one fence (gpu/fifo_push.hpp, push_warp).
#pragma once

#include <cstdint>

#include "gpu/device_atomics.hpp"

namespace courier::device {

// The lanes active at the call, and where the calling lane stands among them.
struct ActiveLanes {
  uint32_t count = 1;   // active lanes
  uint32_t rank = 0;    // how many active lanes have a lower lane id
  uint32_t leader = 0;  // lane id of the lowest active lane
#if defined(COURIER_GPU_DEVICE_PASS) && defined(__CUDA_ARCH__)
  uint32_t mask = 0;
#elif defined(COURIER_GPU_DEVICE_PASS)
  uint64_t mask = 0;
#endif
};

#if defined(COURIER_GPU_DEVICE_PASS) && defined(__CUDA_ARCH__)

inline constexpr uint32_t kWarpLanes = 32;

__device__ __forceinline__ ActiveLanes active_lanes() {
  ActiveLanes lanes;
  lanes.mask = __activemask();
  uint32_t lane;
  asm("mov.u32 %0, %%laneid;" : "=r"(lane));
  lanes.count = __popc(lanes.mask);
  lanes.rank = __popc(lanes.mask & ((1u << lane) - 1));
  lanes.leader = __ffs(lanes.mask) - 1;
  return lanes;
}
// The leader's `value`, in every active lane (also a point where the lanes
// meet: none goes on before the leader got there).
__device__ __forceinline__ uint64_t from_leader(const ActiveLanes& lanes, uint64_t value) {
  return __shfl_sync(lanes.mask, value, lanes.leader);
}

#elif defined(COURIER_GPU_DEVICE_PASS)

// 64 on CDNA (gfx9: MI100, MI200, MI300); RDNA (gfx10+) compiles for 32
// by default. The ballot mask is 64 bits either way (upper half 0 on wave32).
inline constexpr uint32_t kWarpLanes = __AMDGCN_WAVEFRONT_SIZE;

__device__ __forceinline__ ActiveLanes active_lanes() {
  ActiveLanes lanes;
  lanes.mask = __ballot(1);
  const uint32_t lane = __lane_id();
  lanes.count = __popcll(lanes.mask);
  lanes.rank = __popcll(lanes.mask & ((uint64_t{1} << lane) - 1));
  lanes.leader = __ffsll(static_cast<unsigned long long>(lanes.mask)) - 1;
  return lanes;
}
// HIP has no masked shuffle; the inactive lanes simply do not take part.
// Width: the whole wavefront, whatever its size.
__device__ __forceinline__ uint64_t from_leader(const ActiveLanes& lanes, uint64_t value) {
  return __shfl(static_cast<unsigned long long>(value), static_cast<int>(lanes.leader),
                static_cast<int>(kWarpLanes));
}

#else

inline constexpr uint32_t kWarpLanes = 1;

inline ActiveLanes active_lanes() { return ActiveLanes{}; }
inline uint64_t from_leader(const ActiveLanes&, uint64_t value) { return value; }

#endif

}  // namespace courier::device
