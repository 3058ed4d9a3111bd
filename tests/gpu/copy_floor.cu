// How fast this GPU moves a high-throughput phase's rows (4096 rows of
// hidden 7168 bfloat16, 58.7 MB read and as much written: what the EP1
// combine's reduce must do at least), by the shape of the copy: the
// runtime's copy, grid-stride copy kernels by threads, blocks per SM and
// loads in flight per thread, and row gathers (a row's index read first,
// as the reduce reads its slots) with a block or a warp per row, with and
// without a barrier per row. Prints one line per shape: median us of 50
// and TB/s (read plus written). Run by `FLOOR=1 tests/gpu/ep_steps.sh`
// (docs/performance.md); standalone:
//   nvcc -O3 -std=c++17 -arch=native tests/gpu/copy_floor.cu -o copy_floor && ./copy_floor
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

constexpr uint32_t kRows = 4096, kHidden = 7168;
constexpr uint32_t kPieces = kHidden / 8;  // 16-byte pieces per row
constexpr uint64_t kBytes = uint64_t{kRows} * kHidden * 2;

void check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  std::fprintf(stderr, "copy_floor: %s: %s\n", what, cudaGetErrorString(e));
  std::exit(1);
}

// Grid-stride over the pieces, kIlp loads issued before any store.
template <int kIlp>
__global__ void grid_copy(const uint4* __restrict__ in, uint4* __restrict__ out, uint32_t n) {
  const uint32_t stride = gridDim.x * blockDim.x;
  for (uint32_t i0 = blockIdx.x * blockDim.x + threadIdx.x; i0 < n; i0 += kIlp * stride) {
    uint4 v[kIlp];
#pragma unroll
    for (int k = 0; k < kIlp; ++k) {
      const uint32_t i = i0 + k * stride;
      if (i < n) v[k] = in[i];
    }
#pragma unroll
    for (int k = 0; k < kIlp; ++k) {
      const uint32_t i = i0 + k * stride;
      if (i < n) out[i] = v[k];
    }
  }
}

// A block per row at a time (persistent), the row's index read by one
// thread into shared memory: the reduce's shape. kBarrier: a barrier per row.
template <bool kBarrier>
__global__ void block_gather(const uint4* __restrict__ in, uint4* __restrict__ out,
                             const int32_t* __restrict__ index) {
  __shared__ int32_t row;
  for (uint32_t r = blockIdx.x; r < kRows; r += gridDim.x) {
    if (kBarrier) {
      if (threadIdx.x == 0) row = index[r];
      __syncthreads();
    }
    const int32_t src = kBarrier ? row : index[r];
    uint4 v[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const uint32_t p = threadIdx.x + k * blockDim.x;
      if (p < kPieces) v[k] = in[uint64_t(src) * kPieces + p];
    }
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const uint32_t p = threadIdx.x + k * blockDim.x;
      if (p < kPieces) out[uint64_t{r} * kPieces + p] = v[k];
    }
    if (kBarrier) __syncthreads();
  }
}

// A warp per row at a time (persistent), 28 pieces per lane in kIlp batches.
template <int kIlp>
__global__ void warp_gather(const uint4* __restrict__ in, uint4* __restrict__ out,
                            const int32_t* __restrict__ index) {
  const uint32_t lane = threadIdx.x % 32;
  const uint32_t warps = gridDim.x * (blockDim.x / 32);
  for (uint32_t r = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32; r < kRows; r += warps) {
    const int32_t src = index[r];
    for (uint32_t p0 = lane; p0 < kPieces; p0 += 32 * kIlp) {
      uint4 v[kIlp];
#pragma unroll
      for (int k = 0; k < kIlp; ++k) {
        const uint32_t p = p0 + 32 * k;
        if (p < kPieces) v[k] = in[uint64_t(src) * kPieces + p];
      }
#pragma unroll
      for (int k = 0; k < kIlp; ++k) {
        const uint32_t p = p0 + 32 * k;
        if (p < kPieces) out[uint64_t{r} * kPieces + p] = v[k];
      }
    }
  }
}

template <typename Launch>
double median_us(Launch launch) {
  cudaEvent_t a, b;
  check(cudaEventCreate(&a), "event");
  check(cudaEventCreate(&b), "event");
  for (int i = 0; i < 5; ++i) launch();
  std::vector<double> t;
  for (int i = 0; i < 50; ++i) {
    check(cudaEventRecord(a), "record");
    launch();
    check(cudaEventRecord(b), "record");
    check(cudaEventSynchronize(b), "synchronize");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, a, b), "elapsed");
    t.push_back(ms * 1000.0);
  }
  check(cudaGetLastError(), "a launch");
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

void report(const char* shape, double us) {
  std::printf("%-44s %8.1f us %6.2f TB/s\n", shape, us, 2.0 * kBytes / us / 1e6);
}

}  // namespace

int main() {
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "properties");
  const int sms = prop.multiProcessorCount;
  std::printf("%s, %d SMs: %u rows of %u bfloat16 (%.1f MB each way)\n", prop.name, sms, kRows,
              kHidden, kBytes / 1e6);
  uint4 *in = nullptr, *out = nullptr;
  int32_t* index = nullptr;
  check(cudaMalloc(&in, kBytes), "cudaMalloc");
  check(cudaMalloc(&out, kBytes), "cudaMalloc");
  check(cudaMalloc(&index, kRows * 4), "cudaMalloc");
  check(cudaMemset(in, 1, kBytes), "memset");
  std::vector<int32_t> identity(kRows);
  for (uint32_t r = 0; r < kRows; ++r) identity[r] = static_cast<int32_t>(r);
  check(cudaMemcpy(index, identity.data(), kRows * 4, cudaMemcpyHostToDevice), "index");
  const uint32_t n = static_cast<uint32_t>(kBytes / 16);
  char shape[96];

  report("cudaMemcpyAsync",
         median_us([&] { cudaMemcpyAsync(out, in, kBytes, cudaMemcpyDefault); }));
  for (int threads : {256, 512, 1024}) {
    for (int per_sm : {1, 2, 3, 4, 8}) {
      if (threads * per_sm > prop.maxThreadsPerMultiProcessor) continue;
      const int blocks = sms * per_sm;
      std::snprintf(shape, sizeof shape, "grid copy %4d threads x %d/SM, 1 load", threads, per_sm);
      report(shape, median_us([&] { grid_copy<1><<<blocks, threads>>>(in, out, n); }));
      std::snprintf(shape, sizeof shape, "grid copy %4d threads x %d/SM, 4 loads", threads, per_sm);
      report(shape, median_us([&] { grid_copy<4><<<blocks, threads>>>(in, out, n); }));
    }
  }
  report("grid copy 256 threads, a block per 256 pieces",
         median_us([&] { grid_copy<1><<<(n + 255) / 256, 256>>>(in, out, n); }));
  for (int per_sm : {2, 3, 4, 8}) {
    const int blocks = sms * per_sm;
    std::snprintf(shape, sizeof shape, "block per row, 256 x %d/SM, barrier", per_sm);
    report(shape, median_us([&] { block_gather<true><<<blocks, 256>>>(in, out, index); }));
    std::snprintf(shape, sizeof shape, "block per row, 256 x %d/SM, no barrier", per_sm);
    report(shape, median_us([&] { block_gather<false><<<blocks, 256>>>(in, out, index); }));
  }
  for (int threads : {256, 512}) {
    for (int per_sm : {1, 2, 3, 4}) {
      if (threads * per_sm > prop.maxThreadsPerMultiProcessor) continue;
      const int blocks = sms * per_sm;
      std::snprintf(shape, sizeof shape, "warp per row, %d x %d/SM, 4 loads", threads, per_sm);
      report(shape, median_us([&] { warp_gather<4><<<blocks, threads>>>(in, out, index); }));
      std::snprintf(shape, sizeof shape, "warp per row, %d x %d/SM, 7 loads", threads, per_sm);
      report(shape, median_us([&] { warp_gather<7><<<blocks, threads>>>(in, out, index); }));
    }
  }
  cudaFree(in);
  cudaFree(out);
  cudaFree(index);
  return 0;
}
