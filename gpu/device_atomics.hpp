// The few memory operations the FIFO producer needs, for each compiler that
// builds gpu/: the host compiler (gpu-host backend: GPU threads are CPU
// threads) and nvcc/hipcc (system-scope atomics on mapped host memory).
//
// Everything that differs between a CPU thread, a CUDA thread and a HIP
// thread is here, so fifo_push.hpp is written once.
#pragma once

#include <cstdint>

#include "courier/platform.hpp"

#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
#define COURIER_GPU_DEVICE_PASS 1
#if defined(__CUDA_ARCH__)
#include <cuda/atomic>
#endif
#else
#include <atomic>
#include <chrono>
#include <thread>
#if defined(__x86_64__)
#include <immintrin.h>
#endif
#endif

namespace courier::device {

#if defined(COURIER_GPU_DEVICE_PASS) && defined(__CUDA_ARCH__)

template <class T>
using sys_atomic_ref = cuda::atomic_ref<T, cuda::thread_scope_system>;

__device__ __forceinline__ uint64_t fetch_add_relaxed(uint64_t* p, uint64_t n) {
  return sys_atomic_ref<uint64_t>(*p).fetch_add(n, cuda::memory_order_relaxed);
}
__device__ __forceinline__ uint64_t load_acquire(const uint64_t* p) {
  return sys_atomic_ref<uint64_t>(*const_cast<uint64_t*>(p)).load(cuda::memory_order_acquire);
}
__device__ __forceinline__ uint64_t load_relaxed(const uint64_t* p) {
  return sys_atomic_ref<uint64_t>(*const_cast<uint64_t*>(p)).load(cuda::memory_order_relaxed);
}
__device__ __forceinline__ void store_release(uint64_t* p, uint64_t v) {
  sys_atomic_ref<uint64_t>(*p).store(v, cuda::memory_order_release);
}
__device__ __forceinline__ void store_relaxed(uint64_t* p, uint64_t v) {
  sys_atomic_ref<uint64_t>(*p).store(v, cuda::memory_order_relaxed);
}
// Publishing a batch of slots: one system-scope fence orders every word1
// before the word0 stores that follow, which can then be plain stores (a
// release store per command would carry its own fence, ~1.7 us each).
__device__ __forceinline__ void publish_fence() {
  cuda::atomic_thread_fence(cuda::memory_order_release, cuda::thread_scope_system);
}
__device__ __forceinline__ void publish_store(uint64_t* p, uint64_t v) { store_relaxed(p, v); }
__device__ __forceinline__ bool compare_exchange(uint64_t* p, uint64_t expected, uint64_t v) {
  return sys_atomic_ref<uint64_t>(*p).compare_exchange_strong(expected, v,
                                                              cuda::memory_order_relaxed);
}
__device__ __forceinline__ uint64_t now_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
// Exponential __nanosleep back-off.
struct Backoff {
  uint32_t ns = 32;
  __device__ __forceinline__ void pause() {
    __nanosleep(ns);
    if (ns < 4096) ns *= 2;
  }
};

#elif defined(COURIER_GPU_DEVICE_PASS)
#error "gpu/device_atomics.hpp: the HIP device pass is provided by the gpu-hip backend work"
#else

inline uint64_t fetch_add_relaxed(uint64_t* p, uint64_t n) {
  return std::atomic_ref<uint64_t>(*p).fetch_add(n, std::memory_order_relaxed);
}
inline uint64_t load_acquire(const uint64_t* p) {
  return std::atomic_ref<uint64_t>(*const_cast<uint64_t*>(p)).load(std::memory_order_acquire);
}
inline uint64_t load_relaxed(const uint64_t* p) {
  return std::atomic_ref<uint64_t>(*const_cast<uint64_t*>(p)).load(std::memory_order_relaxed);
}
inline void store_release(uint64_t* p, uint64_t v) {
  std::atomic_ref<uint64_t>(*p).store(v, std::memory_order_release);
}
inline void store_relaxed(uint64_t* p, uint64_t v) {
  std::atomic_ref<uint64_t>(*p).store(v, std::memory_order_relaxed);
}
// Publishing a batch of slots on a CPU: a release store per command costs
// nothing extra on x86 (and is what ThreadSanitizer understands), so the
// batch fence is not needed.
inline void publish_fence() {}
inline void publish_store(uint64_t* p, uint64_t v) { store_release(p, v); }
inline bool compare_exchange(uint64_t* p, uint64_t expected, uint64_t v) {
  return std::atomic_ref<uint64_t>(*p).compare_exchange_strong(expected, v,
                                                               std::memory_order_relaxed);
}
inline uint64_t now_ns() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}
// CPU threads share few cores with the proxies: spin briefly, then yield,
// then sleep, so a waiting producer never starves the thread it waits for.
struct Backoff {
  uint32_t rounds = 0;
  void pause() {
    ++rounds;
    if (rounds < 16) {
#if defined(__x86_64__)
      _mm_pause();
#endif
    } else if (rounds < 64) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(rounds < 1024 ? 5 : 50));
    }
  }
};

#endif

}  // namespace courier::device
