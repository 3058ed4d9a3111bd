// The floor under an EP call's wall time on this host: one launch of a
// kernel that waits a fixed time (0 and 16 us, about the low-latency
// dispatch's), then a stream synchronization, on an idle stream, by kind of
// stream. Prints per kind the host time of the launch, the wall time until
// the synchronization returned and what the wall time adds to the kernel's
// own. Run by `FLOOR=1 tests/gpu/ep_steps.sh` (docs/performance.md).
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

namespace {

struct Params {  // about an EP job's size (the launch copies it)
  unsigned char bytes[1024];
};

__global__ void wait_kernel(Params p, unsigned long long ns) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  unsigned long long start = 0, now = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < ns);
  if (p.bytes[5] == 77) printf("unreachable\n");
}

double now_us() {
  return std::chrono::duration<double, std::micro>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void measure(const char* kind, cudaStream_t stream, unsigned long long ns) {
  Params p{};
  std::vector<double> launch, wall;
  for (int i = 0; i < 2000; ++i) {
    cudaStreamSynchronize(stream);
    const double t0 = now_us();
    wait_kernel<<<132, 512, 0, stream>>>(p, ns);  // the EP kernels' launch shape
    const double t1 = now_us();
    cudaStreamSynchronize(stream);
    const double t2 = now_us();
    launch.push_back(t1 - t0);
    wall.push_back(t2 - t0);
  }
  const double kernel_us = static_cast<double>(ns) / 1000.0;
  std::printf("%-28s kernel %5.1f us: launch %.2f us, wall %.2f us, wall - kernel %.2f us\n", kind,
              kernel_us, median(launch), median(wall), median(wall) - kernel_us);
}

}  // namespace

int main() {
  if (cudaSetDevice(0) != cudaSuccess || cudaFree(nullptr) != cudaSuccess) {
    std::fprintf(stderr, "launch_floor: no CUDA device\n");
    return 1;
  }
  cudaStream_t created = nullptr;
  cudaStreamCreateWithFlags(&created, cudaStreamNonBlocking);
  for (const unsigned long long ns : {0ull, 16000ull}) {
    measure("default (legacy) stream", nullptr, ns);
    measure("created non-blocking stream", created, ns);
  }
  cudaStreamDestroy(created);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
