#include <cuda_runtime.h>

#include <cerrno>
#include <string>

#include "cuda_ep_kernels.hpp"
#include "cuda_status.hpp"
#include "gpu/ep/layout.hpp"

namespace courier::cuda_gpu {

namespace {

__global__ void layout_kernel(courier_gpu_ep_layout_v1 job) {
  for (uint32_t t = blockIdx.x * blockDim.x + threadIdx.x; t < job.num_tokens;
       t += gridDim.x * blockDim.x) {
    device::layout_token(job, t);
  }
}

}  // namespace

int run_ep_layout(const courier_gpu_ep_layout_v1* job) {
  if (job == nullptr || job->struct_size < sizeof *job) {
    return fail(-EINVAL, "run_ep_layout: job is NULL or its struct_size is too small");
  }
  cudaError_t rc = cudaSetDevice(job->device);
  if (rc != cudaSuccess) return fail(rc, "cudaSetDevice(" + std::to_string(job->device) + ")");
  if (job->num_tokens == 0) return 0;
  cudaStream_t stream = nullptr;
  rc = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  if (rc != cudaSuccess) return fail(rc, "cudaStreamCreate");
  const uint32_t threads = 256;
  const uint32_t needed = (job->num_tokens + threads - 1) / threads;
  const uint32_t blocks = needed < 1024 ? needed : 1024;
  layout_kernel<<<blocks, threads, 0, stream>>>(*job);
  rc = cudaGetLastError();
  if (rc == cudaSuccess) rc = cudaStreamSynchronize(stream);
  cudaStreamDestroy(stream);
  return rc == cudaSuccess ? 0 : fail(rc, "running the EP layout kernel");
}

}  // namespace courier::cuda_gpu
