#include <hip/hip_runtime.h>

#include <cerrno>
#include <string>

#include "gpu/ep/layout.hpp"
#include "hip_ep_kernels.hpp"
#include "hip_status.hpp"

namespace courier::hip_gpu {

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
  hipError_t rc = hipSetDevice(job->device);
  if (rc != hipSuccess) return fail(rc, "hipSetDevice(" + std::to_string(job->device) + ")");
  if (job->num_tokens == 0) return 0;
  hipStream_t stream = nullptr;
  rc = hipStreamCreateWithFlags(&stream, hipStreamNonBlocking);
  if (rc != hipSuccess) return fail(rc, "hipStreamCreate");
  const uint32_t threads = 256;
  const uint32_t blocks = (job->num_tokens + threads - 1) / threads;
  hipLaunchKernelGGL(layout_kernel, dim3(blocks < 1024 ? blocks : 1024), dim3(threads), 0, stream,
                     *job);
  rc = hipGetLastError();
  if (rc == hipSuccess) rc = hipStreamSynchronize(stream);
  (void)hipStreamDestroy(stream);  // the kernel's status matters more
  return rc == hipSuccess ? 0 : fail(rc, "running the EP layout kernel");
}

}  // namespace courier::hip_gpu
