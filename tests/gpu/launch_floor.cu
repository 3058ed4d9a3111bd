// The floor under an EP call's wall time on this host: one launch of a
// kernel that waits a fixed time (0 and 16 us, about the low-latency
// dispatch's), then a stream synchronization, on an idle stream, by kind of
// stream. Prints per kind the host time of the launch, the wall time until
// the synchronization returned and what the wall time adds to the kernel's
// own. Then the launch's host time by the bytes of kernel parameters it
// copies (an EP launch passes its jobs by value: the low-latency dispatch
// about 1.5 KiB, two tables of peer windows among them).
// Then where the wall time's part above the kernel goes: the kernel's last
// thread stores to a word in host-pinned memory, the host spins on it and
// then synchronizes the stream, so the wall splits into the time until the
// host saw the kernel end and what the synchronization adds after it; and
// the same with cudaStreamQuery or an event's query spun on instead.
// Run by `FLOOR=1 tests/gpu/ep_steps.sh` (docs/performance.md).
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

namespace {

template <int kBytes>
struct Bytes {  // kernel parameters of this size (the launch copies them)
  unsigned char bytes[kBytes];
};
using Params = Bytes<1024>;  // about an EP job's size

// Thread 0 of block 0 waits `ns` by the GPU's clock; true for that thread.
template <int kBytes>
__device__ bool wait_ns(const Bytes<kBytes>& p, unsigned long long ns) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return false;
  unsigned long long start = 0, now = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < ns);
  if (p.bytes[5] == 77) printf("unreachable\n");
  return true;
}

template <int kBytes>
__global__ void wait_kernel(Bytes<kBytes> p, unsigned long long ns) {
  wait_ns(p, ns);
}

// wait_kernel, then a store of `seq` to host-pinned `done` (system scope).
__global__ void wait_then_flag(Params p, unsigned long long ns, volatile unsigned* done,
                               unsigned seq) {
  if (!wait_ns(p, ns)) return;
  __threadfence_system();
  *done = seq;
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

// The wall time split at the moment the host sees the kernel's flag.
void measure_flag(cudaStream_t stream, unsigned long long ns) {
  unsigned* done = nullptr;
  if (cudaHostAlloc(&done, sizeof *done, cudaHostAllocMapped) != cudaSuccess) return;
  unsigned* done_dev = nullptr;
  cudaHostGetDevicePointer(reinterpret_cast<void**>(&done_dev), done, 0);
  *done = 0;
  Params p{};
  std::vector<double> seen, wall, query, event;
  cudaEvent_t ev = nullptr;
  cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
  for (unsigned i = 1; i <= 2000; ++i) {
    cudaStreamSynchronize(stream);
    const double t0 = now_us();
    wait_then_flag<<<132, 512, 0, stream>>>(p, ns, done_dev, i);
    while (*reinterpret_cast<volatile unsigned*>(done) != i) {
    }
    const double t1 = now_us();
    cudaStreamSynchronize(stream);
    const double t2 = now_us();
    seen.push_back(t1 - t0);
    wall.push_back(t2 - t0);
  }
  for (int i = 0; i < 2000; ++i) {
    cudaStreamSynchronize(stream);
    const double t0 = now_us();
    wait_kernel<<<132, 512, 0, stream>>>(p, ns);
    while (cudaStreamQuery(stream) == cudaErrorNotReady) {
    }
    query.push_back(now_us() - t0);
  }
  for (int i = 0; i < 2000; ++i) {
    cudaStreamSynchronize(stream);
    const double t0 = now_us();
    wait_kernel<<<132, 512, 0, stream>>>(p, ns);
    cudaEventRecord(ev, stream);
    while (cudaEventQuery(ev) == cudaErrorNotReady) {
    }
    event.push_back(now_us() - t0);
  }
  const double kernel_us = static_cast<double>(ns) / 1000.0;
  std::printf(
      "kernel %5.1f us: flag seen at %.2f (kernel + %.2f), synchronized at %.2f (+%.2f); "
      "cudaStreamQuery spun %.2f, event query spun %.2f\n",
      kernel_us, median(seen), median(seen) - kernel_us, median(wall), median(wall) - median(seen),
      median(query), median(event));
  cudaEventDestroy(ev);
  cudaFreeHost(done);
}

// The launch's host time alone (median of 4000, the stream idle before
// each) with kBytes of parameters.
template <int kBytes>
void measure_bytes(cudaStream_t stream) {
  Bytes<kBytes> p{};
  std::vector<double> launch;
  for (int i = 0; i < 4000; ++i) {
    cudaStreamSynchronize(stream);
    const double t0 = now_us();
    wait_kernel<kBytes><<<132, 512, 0, stream>>>(p, 0);
    launch.push_back(now_us() - t0);
  }
  cudaStreamSynchronize(stream);
  std::printf("parameters %5d bytes: launch %.2f us\n", kBytes, median(launch));
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
  measure_flag(created, 0);
  measure_flag(created, 16000);
  measure_bytes<16>(created);
  measure_bytes<256>(created);
  measure_bytes<512>(created);
  measure_bytes<1024>(created);
  measure_bytes<1536>(created);
  measure_bytes<2048>(created);
  measure_bytes<4000>(created);
  measure_bytes<16>(created);  // again: the first may pay for warming up
  cudaStreamDestroy(created);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
