// What the low-latency dispatch kernel's synchronization costs by itself on
// this GPU, without Courier: one launch of 132 blocks of 512 threads with
// the kernel's skeleton (every block stores, the last block to arrive at a
// counter releases a flag, every block waits for that flag, the last block
// to arrive at a second counter releases another), timed with events
// around it after a 200 us hold on the stream, as `courier-bench ep` times
// `gpu us`. Variants drop pieces, so the differences price each: the
// counters and flags, the wait, the scope of the releases, the stores.
//
//   nvcc -O2 -std=c++17 -arch=sm_90 tests/gpu/sync_skeleton.cu -o /tmp/sync_skeleton
//   /tmp/sync_skeleton
//
// tests/gpu/ep_steps.sh runs it with SKELETON=1; docs/performance.md has
// its figures.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cuda/atomic>

namespace {

constexpr unsigned kBlocks = 132, kThreads = 512, kRuns = 200;

// Each block adds 1 at *done; the block that makes it gridDim.x resets it.
__device__ bool last_block(uint32_t* done) {
  __shared__ bool last;
  __syncthreads();
  if (threadIdx.x == 0) {
    last = cuda::atomic_ref<uint32_t, cuda::thread_scope_device>(*done).fetch_add(
               1u, cuda::memory_order_acq_rel) == gridDim.x - 1;
    if (last) *done = 0;
  }
  __syncthreads();
  return last;
}

__device__ void release(uint64_t* flag, uint64_t value, bool system) {
  if (system) {
    cuda::atomic_ref<uint64_t, cuda::thread_scope_system>(*flag).store(value,
                                                                       cuda::memory_order_release);
  } else {
    cuda::atomic_ref<uint64_t, cuda::thread_scope_device>(*flag).store(value,
                                                                       cuda::memory_order_release);
  }
}

__device__ void wait_flag(uint64_t* flag, uint64_t value) {
  if (threadIdx.x == 0) {
    cuda::atomic_ref<uint64_t, cuda::thread_scope_system> f(*flag);
    while (f.load(cuda::memory_order_acquire) < value) {
    }
  }
  __syncthreads();
}

struct Skeleton {
  uint4* out;      // kBlocks * stores * kThreads vectors
  uint32_t* done;  // two counters
  uint64_t* flag;  // two flags
  uint64_t epoch;  // this launch's flag value
  int stores;      // 16-byte stores per thread (7: 56 KB a block, a token to 8 experts)
  int stages;      // 0: stores only; 1: + counter and flag; 2: + wait, second counter and flag
  bool system;     // releases at system scope (else device)
};

__global__ void __launch_bounds__(kThreads) skeleton(Skeleton s) {
  __shared__ int pad[8000];  // about the dispatch kernel's shared memory
  pad[threadIdx.x] = static_cast<int>(threadIdx.x);
  for (int i = 0; i < s.stores; ++i) {
    s.out[(uint64_t{blockIdx.x} * s.stores + i) * blockDim.x + threadIdx.x] =
        make_uint4(i, pad[threadIdx.x], 0, 0);
  }
  if (s.stages == 0) return;
  if (last_block(s.done) && threadIdx.x == 0) release(s.flag, s.epoch, s.system);
  if (s.stages == 1) return;
  wait_flag(s.flag, s.epoch);
  if (last_block(s.done + 1) && threadIdx.x == 0) release(s.flag + 1, s.epoch, s.system);
}

__global__ void hold(uint64_t ns) {
  uint64_t t0 = 0, t = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  } while (t - t0 < ns);
}

bool ok(cudaError_t rc, const char* what) {
  if (rc == cudaSuccess) return true;
  std::fprintf(stderr, "sync_skeleton: %s: %s\n", what, cudaGetErrorString(rc));
  return false;
}

}  // namespace

int main() {
  cudaStream_t stream = nullptr;
  Skeleton s{};
  cudaEvent_t before = nullptr, after = nullptr;
  if (!ok(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate") ||
      !ok(cudaMalloc(&s.out, size_t{kBlocks} * kThreads * 16 * 8), "cudaMalloc") ||
      !ok(cudaMalloc(&s.done, 64), "cudaMalloc") || !ok(cudaMalloc(&s.flag, 64), "cudaMalloc") ||
      !ok(cudaMemset(s.done, 0, 64), "cudaMemset") ||
      !ok(cudaMemset(s.flag, 0, 64), "cudaMemset") ||
      !ok(cudaEventCreate(&before), "cudaEventCreate") ||
      !ok(cudaEventCreate(&after), "cudaEventCreate")) {
    return 1;
  }
  std::printf("%-52s %10s %10s\n", "one launch, 132 x 512 threads", "median us", "min us");
  auto time = [&](const char* what, int stores, int stages, bool system) {
    float us[kRuns];
    for (unsigned i = 0; i < kRuns; ++i) {
      s.epoch += 1;
      s.stores = stores;
      s.stages = stages;
      s.system = system;
      hold<<<1, 1, 0, stream>>>(200000);
      cudaEventRecord(before, stream);
      skeleton<<<kBlocks, kThreads, 0, stream>>>(s);
      cudaEventRecord(after, stream);
      if (!ok(cudaEventSynchronize(after), what)) return false;
      cudaEventElapsedTime(&us[i], before, after);
      us[i] *= 1000.0f;
    }
    std::sort(us, us + kRuns);
    std::printf("%-52s %10.2f %10.2f\n", what, us[kRuns / 2], us[0]);
    return ok(cudaGetLastError(), what);
  };
  const bool all = time("nothing (the events' floor)", 0, 0, true) &&
                   time("last block releases a flag", 0, 1, true) &&
                   time("+ every block waits, second counter and flag", 0, 2, true) &&
                   time("  the same, device-scope releases", 0, 2, false) &&
                   time("56 KB stored per block", 7, 0, true) &&
                   time("56 KB, last block releases a flag", 7, 1, true) &&
                   time("56 KB, + wait, second counter and flag", 7, 2, true) &&
                   time("  the same, device-scope releases", 7, 2, false);
  return all ? 0 : 1;
}
