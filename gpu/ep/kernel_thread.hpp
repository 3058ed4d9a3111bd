// Where a thread of an EP proxy kernel stands, and the few block-level
// operations the kernels need, for each compiler that builds gpu/: nvcc and
// hipcc (a block of GPU threads, __syncthreads, lanes of a warp copying a
// row together) and the host compiler (gpu-host: a block is a CPU thread, or
// several meeting at the launcher's barrier). The kernel bodies in
// proxy_kernels.hpp are written once against this.
#pragma once

#include <cstddef>
#include <cstdint>

#include "courier/abi/gpu_v1.h"
#include "gpu/device_atomics.hpp"

#if !defined(COURIER_GPU_DEVICE_PASS)
#include <chrono>
#include <cmath>
#include <cstring>
#include <thread>
#endif

namespace courier::device::ep {

// Lanes that copy one row together: a warp on CUDA, half a wavefront on
// AMD (shuffles of width 32), one CPU thread on gpu-host.
#if defined(COURIER_GPU_DEVICE_PASS)
inline constexpr uint32_t kLanes = 32;
#else
inline constexpr uint32_t kLanes = 1;
#endif

struct KernelThread {
  uint32_t block = 0, thread = 0, block_dim = 1, grid_dim = 1;
  const courier_host_thread_v1* host = nullptr;  // gpu-host: the launcher's thread
  uint64_t* waited_ns = nullptr;  // gpu-host's timeline: this block's time in waits (WaitClock)

  COURIER_DEVICE_INLINE void sync() const {
#if defined(COURIER_GPU_DEVICE_PASS)
    __syncthreads();
#else
    if (block_dim > 1) host->sync_block(host);
#endif
  }
  COURIER_DEVICE_INLINE uint32_t lane() const { return thread % kLanes; }
  // The lane group (warp) of this thread within the block, and how many.
  COURIER_DEVICE_INLINE uint32_t group() const { return thread / kLanes; }
  COURIER_DEVICE_INLINE uint32_t groups() const {
    return block_dim / kLanes > 0 ? block_dim / kLanes : 1;
  }
};

// Adds the time a wait took to the block's total where gpu-host keeps its
// timeline (COURIER_HOST_EP_TIMELINE); on a GPU, nothing.
struct WaitClock {
#if defined(COURIER_GPU_DEVICE_PASS)
  COURIER_DEVICE_INLINE explicit WaitClock(const KernelThread&) {}
#else
  explicit WaitClock(const KernelThread& th)
      : total(th.waited_ns), start(total != nullptr ? now_ns() : 0) {}
  ~WaitClock() {
    if (total != nullptr) *total += now_ns() - start;
  }
  WaitClock(const WaitClock&) = delete;
  WaitClock& operator=(const WaitClock&) = delete;
  uint64_t* total;
  uint64_t start;
#endif
};

#if defined(__CUDACC__) || defined(__HIPCC__)
__device__ __forceinline__ KernelThread this_thread() {
  KernelThread t;
  t.block = blockIdx.x;
  t.thread = threadIdx.x;
  t.block_dim = blockDim.x;
  t.grid_dim = gridDim.x;
  return t;
}
#endif

COURIER_DEVICE_INLINE uint32_t load_u32(const uint32_t* p) {
  return *const_cast<const volatile uint32_t*>(p);
}

// The first failure's code stays: two failures at once do not overwrite
// each other (a compare-and-swap from 0; only failures call it).
COURIER_DEVICE_INLINE void set_status(uint32_t* status, uint32_t code) {
  device::compare_exchange_u32(status, 0u, code);
}

// The largest of `v` over the kLanes lanes of a group.
COURIER_DEVICE_INLINE float lanes_max(float v) {
#if defined(COURIER_GPU_DEVICE_PASS) && defined(__CUDA_ARCH__)
  for (int mask = kLanes / 2; mask > 0; mask /= 2) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, mask));
  }
#elif defined(COURIER_GPU_DEVICE_PASS)
  for (int mask = kLanes / 2; mask > 0; mask /= 2) v = fmaxf(v, __shfl_xor(v, mask, kLanes));
#endif
  return v;
}

// Copies n bytes with the `lanes` lanes of a group: 16 bytes per lane and
// step where alignment allows, eight loads in flight per lane before their
// stores (a row copy is bound by memory latency, not by instructions: four
// in flight left an H200 at a third of its bandwidth); memcpy on a CPU
// thread.
COURIER_DEVICE_INLINE void lanes_copy(void* dst, const void* src, uint64_t n, uint32_t lane,
                                      uint32_t lanes) {
#if defined(COURIER_GPU_DEVICE_PASS)
  const auto d = reinterpret_cast<uintptr_t>(dst), s = reinterpret_cast<uintptr_t>(src);
  if (((d | s | n) & 15u) == 0) {
    constexpr uint32_t kInFlight = 8;
    auto* out = static_cast<int4*>(dst);
    const auto* in = static_cast<const int4*>(src);
    const uint64_t vectors = n / 16;
    uint64_t i = lane;
    for (; i + (kInFlight - 1) * lanes < vectors; i += kInFlight * lanes) {
      int4 v[kInFlight];
#pragma unroll
      for (uint32_t j = 0; j < kInFlight; ++j) v[j] = in[i + j * lanes];
#pragma unroll
      for (uint32_t j = 0; j < kInFlight; ++j) out[i + j * lanes] = v[j];
    }
    for (; i < vectors; i += lanes) out[i] = in[i];
  } else if (((d | s | n) & 3u) == 0) {
    for (uint64_t i = lane; i < n / 4; i += lanes)
      static_cast<uint32_t*>(dst)[i] = static_cast<const uint32_t*>(src)[i];
  } else {
    for (uint64_t i = lane; i < n; i += lanes)
      static_cast<uint8_t*>(dst)[i] = static_cast<const uint8_t*>(src)[i];
  }
#else
  if (lanes == 1) {
    std::memcpy(dst, src, n);
    return;
  }
  const uint64_t part = (n + lanes - 1) / lanes, begin = part * lane;
  if (begin < n) {
    std::memcpy(static_cast<std::byte*>(dst) + begin, static_cast<const std::byte*>(src) + begin,
                begin + part < n ? part : n - begin);
  }
#endif
}

// Copies n contiguous bytes with every thread of the block (a run of rows
// that is contiguous at both ends): the block's threads as one lane group.
COURIER_DEVICE_INLINE void block_copy(const KernelThread& th, void* dst, const void* src,
                                      uint64_t n) {
  lanes_copy(dst, src, n, th.thread, th.block_dim);
}

COURIER_DEVICE_INLINE void lanes_zero(void* dst, uint64_t n, uint32_t lane, uint32_t lanes) {
  for (uint64_t i = lane; i < n; i += lanes) static_cast<uint8_t*>(dst)[i] = 0;
}

// Between polls of a word another agent raises: GPU threads spin (a nap
// after a while). CPU threads share the cores with the proxies they wait
// for: after a short spin they yield, then sleep, longer the longer the
// wait (up to 100 us), so that a waiting rank leaves the cores to the
// proxies that move its data.
struct PollPause {
  uint32_t rounds = 0;
#if !defined(COURIER_GPU_DEVICE_PASS)
  uint32_t sleep_us = 5;
#endif
  COURIER_DEVICE_INLINE void pause() {
    ++rounds;
#if defined(COURIER_GPU_DEVICE_PASS) && defined(__CUDA_ARCH__)
    if (rounds > 64) __nanosleep(128);
#elif defined(COURIER_GPU_DEVICE_PASS)
    if (rounds > 64) __builtin_amdgcn_s_sleep(2);
#else
    if (rounds < 16) return;
    if (rounds < 64) {
      std::this_thread::yield();
      return;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(sleep_us));
    if (sleep_us < 100) sleep_us *= 2;
#endif
  }
};

// Exclusive prefix sum of `value` over the block's threads, with `scratch`
// (block_dim words of the block's shared memory); *total gets the sum.
// Every thread of the block calls it.
COURIER_DEVICE_INLINE uint32_t block_exclusive_scan(const KernelThread& th, uint32_t* scratch,
                                                    uint32_t value, uint32_t* total) {
  if (th.block_dim == 1) {
    *total = value;
    return 0;
  }
  scratch[th.thread] = value;
  th.sync();
  for (uint32_t step = 1; step < th.block_dim; step *= 2) {
    const uint32_t add = th.thread >= step ? scratch[th.thread - step] : 0;
    th.sync();
    scratch[th.thread] += add;
    th.sync();
  }
  const uint32_t inclusive = scratch[th.thread];
  *total = scratch[th.block_dim - 1];
  th.sync();
  return inclusive - value;
}

}  // namespace courier::device::ep
