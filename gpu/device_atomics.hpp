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
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <climits>
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
// Counters only this GPU's threads update (EP layout): device scope.
__device__ __forceinline__ void add_relaxed_gpu(int32_t* p, int32_t n) {
  cuda::atomic_ref<int32_t, cuda::thread_scope_device>(*p).fetch_add(n, cuda::memory_order_relaxed);
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
__device__ __forceinline__ bool compare_exchange_u32(uint32_t* p, uint32_t expected, uint32_t v) {
  return sys_atomic_ref<uint32_t>(*p).compare_exchange_strong(expected, v,
                                                              cuda::memory_order_relaxed);
}
// Device-scope pair for values only GPU threads share (the producers'
// cached completion count): no PCIe traffic, still a release/acquire chain.
__device__ __forceinline__ uint64_t load_acquire_gpu(const uint64_t* p) {
  return cuda::atomic_ref<uint64_t, cuda::thread_scope_device>(*const_cast<uint64_t*>(p))
      .load(cuda::memory_order_acquire);
}
__device__ __forceinline__ void raise_release_gpu(uint64_t* p, uint64_t v) {
  cuda::atomic_ref<uint64_t, cuda::thread_scope_device>(*p).fetch_max(v,
                                                                      cuda::memory_order_release);
}
// The EP proxy kernels: a block's stores before its push or its "done",
// seen by the NIC, the proxy and the other blocks (system scope).
__device__ __forceinline__ void release_fence_system() {
  cuda::atomic_thread_fence(cuda::memory_order_release, cuda::thread_scope_system);
}
// Before the barrier after which one thread of the block releases what all
// its threads stored (a flag, a mark, the arrival at a counter): nothing on
// CUDA, where bar.sync carries the other threads' stores into that later
// release (the PTX memory model).
__device__ __forceinline__ void fence_before_block_release() {}
__device__ __forceinline__ uint32_t fetch_add_acq_rel(uint32_t* p, uint32_t n) {
  return cuda::atomic_ref<uint32_t, cuda::thread_scope_device>(*p).fetch_add(
      n, cuda::memory_order_acq_rel);
}
__device__ __forceinline__ void add_release(uint64_t* p, uint64_t n) {
  sys_atomic_ref<uint64_t>(*p).fetch_add(n, cuda::memory_order_release);
}
// Counters in a block's shared memory.
__device__ __forceinline__ void add_block(uint32_t* p, uint32_t n) { atomicAdd_block(p, n); }
__device__ __forceinline__ uint64_t now_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
// Waits a little for *counter to reach `target`. A GPU thread cannot block
// in the kernel. The first polls go back to back (each is a read across
// PCIe, about a microsecond, so a waiting DRAIN sees its completion within
// one read); after that it naps with exponential __nanosleep, capped so a
// long wait still notices completion within ~2 us. `wake_at` (see the CPU
// version) is not used.
struct Backoff {
  uint32_t rounds = 0;
  uint32_t ns = 64;
  __device__ __forceinline__ void pause(const uint64_t*, uint64_t*, uint64_t) {
    if (++rounds < 16) return;
    __nanosleep(ns);
    if (ns < 2048) ns *= 2;
  }
};

#elif defined(COURIER_GPU_DEVICE_PASS)

// HIP (clang's AMDGPU target). The __hip_atomic_* builtins take the scope
// explicitly: system scope for the FIFO words in mapped host memory (the
// proxy on the CPU reads and writes them), agent scope for what only this
// GPU's threads share. Mapped host memory must be fine-grained (coherent)
// for system scope to reach the CPU; gpu-hip allocates it that way.
#define COURIER_HIP_SYS __HIP_MEMORY_SCOPE_SYSTEM
#define COURIER_HIP_GPU __HIP_MEMORY_SCOPE_AGENT

__device__ __forceinline__ uint64_t fetch_add_relaxed(uint64_t* p, uint64_t n) {
  return __hip_atomic_fetch_add(p, n, __ATOMIC_RELAXED, COURIER_HIP_SYS);
}
__device__ __forceinline__ void add_relaxed_gpu(int32_t* p, int32_t n) {
  __hip_atomic_fetch_add(p, n, __ATOMIC_RELAXED, COURIER_HIP_GPU);
}
__device__ __forceinline__ uint64_t load_acquire(const uint64_t* p) {
  return __hip_atomic_load(const_cast<uint64_t*>(p), __ATOMIC_ACQUIRE, COURIER_HIP_SYS);
}
__device__ __forceinline__ uint64_t load_relaxed(const uint64_t* p) {
  return __hip_atomic_load(const_cast<uint64_t*>(p), __ATOMIC_RELAXED, COURIER_HIP_SYS);
}
__device__ __forceinline__ void store_release(uint64_t* p, uint64_t v) {
  __hip_atomic_store(p, v, __ATOMIC_RELEASE, COURIER_HIP_SYS);
}
__device__ __forceinline__ void store_relaxed(uint64_t* p, uint64_t v) {
  __hip_atomic_store(p, v, __ATOMIC_RELAXED, COURIER_HIP_SYS);
}
// One system-scope release fence per batch (an empty scope string means
// system), so the word0 stores after it can be relaxed: a release store per
// command would write back the cache for every command.
__device__ __forceinline__ void publish_fence() { __builtin_amdgcn_fence(__ATOMIC_RELEASE, ""); }
__device__ __forceinline__ void publish_store(uint64_t* p, uint64_t v) { store_relaxed(p, v); }
__device__ __forceinline__ bool compare_exchange(uint64_t* p, uint64_t expected, uint64_t v) {
  return __hip_atomic_compare_exchange_strong(p, &expected, v, __ATOMIC_RELAXED, __ATOMIC_RELAXED,
                                              COURIER_HIP_SYS);
}
__device__ __forceinline__ bool compare_exchange_u32(uint32_t* p, uint32_t expected, uint32_t v) {
  return __hip_atomic_compare_exchange_strong(p, &expected, v, __ATOMIC_RELAXED, __ATOMIC_RELAXED,
                                              COURIER_HIP_SYS);
}
// Agent scope: the producers' cached completion count lives in device
// memory and only this GPU's threads touch it; no PCIe traffic.
__device__ __forceinline__ uint64_t load_acquire_gpu(const uint64_t* p) {
  return __hip_atomic_load(const_cast<uint64_t*>(p), __ATOMIC_ACQUIRE, COURIER_HIP_GPU);
}
__device__ __forceinline__ void raise_release_gpu(uint64_t* p, uint64_t v) {
  __hip_atomic_fetch_max(p, v, __ATOMIC_RELEASE, COURIER_HIP_GPU);
}
// The EP proxy kernels (see the CUDA versions).
__device__ __forceinline__ void release_fence_system() {
  __builtin_amdgcn_fence(__ATOMIC_RELEASE, "");
}
// (See the CUDA version.) On AMD a wave's stores can still be in flight
// when the barrier lets another wave release, so each thread fences.
__device__ __forceinline__ void fence_before_block_release() { __threadfence_system(); }
__device__ __forceinline__ uint32_t fetch_add_acq_rel(uint32_t* p, uint32_t n) {
  return __hip_atomic_fetch_add(p, n, __ATOMIC_ACQ_REL, COURIER_HIP_GPU);
}
__device__ __forceinline__ void add_release(uint64_t* p, uint64_t n) {
  __hip_atomic_fetch_add(p, n, __ATOMIC_RELEASE, COURIER_HIP_SYS);
}
__device__ __forceinline__ void add_block(uint32_t* p, uint32_t n) {
  __hip_atomic_fetch_add(p, n, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_WORKGROUP);
}
// s_memrealtime reads the GPU's constant-rate "real time" counter (what
// HIP's wall_clock64() returns), not the shader clock, which changes with
// the core frequency. It ticks at 100 MHz on gfx9 (MI100, MI200, MI300) and
// gfx10.3; a tick is 10 ns. gfx11 has no s_memrealtime.
#if !__has_builtin(__builtin_amdgcn_s_memrealtime)
#error "gpu/device_atomics.hpp: this AMD GPU target has no s_memrealtime (gfx11?); now_ns needs it"
#endif
__device__ __forceinline__ uint64_t now_ns() { return __builtin_amdgcn_s_memrealtime() * 10; }
// Waits a little for *counter to reach `target`: the first polls back to
// back (each is a read across PCIe), then naps that double up to ~2 us so a
// long wait still sees completion soon. s_sleep takes only an immediate
// (64 x N cycles), so a nap is `naps` sleeps of 8 x 64 cycles (~0.3 us at
// 1.7 GHz). `wake_at` (see the CPU version) is not used.
struct Backoff {
  uint32_t rounds = 0;
  uint32_t naps = 1;
  __device__ __forceinline__ void pause(const uint64_t*, uint64_t*, uint64_t) {
    if (++rounds < 16) return;
    for (uint32_t i = 0; i < naps; ++i) __builtin_amdgcn_s_sleep(8);
    if (naps < 8) naps *= 2;
  }
};

#undef COURIER_HIP_SYS
#undef COURIER_HIP_GPU

#else

inline uint64_t fetch_add_relaxed(uint64_t* p, uint64_t n) {
  return std::atomic_ref<uint64_t>(*p).fetch_add(n, std::memory_order_relaxed);
}
inline void add_relaxed_gpu(int32_t* p, int32_t n) {
  std::atomic_ref<int32_t>(*p).fetch_add(n, std::memory_order_relaxed);
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
inline bool compare_exchange_u32(uint32_t* p, uint32_t expected, uint32_t v) {
  return std::atomic_ref<uint32_t>(*p).compare_exchange_strong(expected, v,
                                                               std::memory_order_relaxed);
}
inline uint64_t load_acquire_gpu(const uint64_t* p) { return load_acquire(p); }
inline void raise_release_gpu(uint64_t* p, uint64_t v) {
  std::atomic_ref<uint64_t> ref(*p);
  uint64_t seen = ref.load(std::memory_order_relaxed);
  while (seen < v && !ref.compare_exchange_weak(seen, v, std::memory_order_release)) {
  }
}
// CPU threads need no fence here: every use in the EP kernels is followed by
// a release operation (an RMW, a published slot) or a block barrier, which
// order the thread's earlier stores; and ThreadSanitizer cannot model fences.
inline void release_fence_system() {}
inline void fence_before_block_release() {}
inline uint32_t fetch_add_acq_rel(uint32_t* p, uint32_t n) {
  return std::atomic_ref<uint32_t>(*p).fetch_add(n, std::memory_order_acq_rel);
}
inline void add_release(uint64_t* p, uint64_t n) {
  std::atomic_ref<uint64_t>(*p).fetch_add(n, std::memory_order_release);
}
inline void add_block(uint32_t* p, uint32_t n) {
  std::atomic_ref<uint32_t>(*p).fetch_add(n, std::memory_order_relaxed);
}
// Blocks while the low 32 bits of *counter still equal those of `seen`, at
// most timeout_ns; little-endian, so the low half sits at the counter's
// address.
inline void futex_wait_low_half(const uint64_t* counter, uint64_t seen, uint64_t timeout_ns) {
  timespec timeout{static_cast<time_t>(timeout_ns / 1'000'000'000),
                   static_cast<long>(timeout_ns % 1'000'000'000)};
  syscall(SYS_futex, reinterpret_cast<const uint32_t*>(counter), FUTEX_WAIT_PRIVATE,
          static_cast<uint32_t>(seen), &timeout, nullptr, 0);
}
// Wakes every thread blocked in futex_wait_low_half on *counter.
inline void futex_wake_all(const uint64_t* counter) {
  syscall(SYS_futex, reinterpret_cast<const uint32_t*>(counter), FUTEX_WAKE_PRIVATE, INT_MAX,
          nullptr, nullptr, 0);
}
inline uint64_t now_ns() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}
// Waits a little for *counter to reach `target`. CPU threads share few
// cores with the proxies, so after a short spin a waiting producer blocks in
// the kernel (futex on the low half of the counter) until the proxy, which
// publishes the counter, sees it reach the lowest target registered in
// *wake_at and wakes the waiters: one wake-up per wait instead of naps that
// keep preempting the threads it waits for. The counter store and the wake_at
// load on the proxy's side, and the wake_at update and counter load here,
// are sequentially consistent, so a wake-up cannot be lost; the 1 ms bound
// lets the caller re-check errors and deadlines anyway.
struct Backoff {
  uint32_t rounds = 0;
  void pause(const uint64_t* counter, uint64_t* wake_at, uint64_t target) {
    ++rounds;
    if (rounds < 16) {
#if defined(__x86_64__)
      _mm_pause();
#endif
      return;
    }
    if (rounds < 32) {
      std::this_thread::yield();
      return;
    }
    std::atomic_ref<uint64_t> wake(*wake_at);
    uint64_t registered = wake.load();
    while ((registered == 0 || registered > target) &&
           !wake.compare_exchange_weak(registered, target)) {
    }
    uint64_t now = std::atomic_ref<uint64_t>(*const_cast<uint64_t*>(counter)).load();
    if (now >= target) return;
    futex_wait_low_half(counter, now, 1'000'000);
  }
};

#endif

}  // namespace courier::device
