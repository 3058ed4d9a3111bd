#include "host_ep_kernels.hpp"

#include <algorithm>
#include <cerrno>

#include "gpu/ep/layout.hpp"
#include "host_kernel_launch.hpp"

namespace courier::host_gpu {

namespace {

void layout_kernel(const courier_host_thread_v1* thread, void* arg) {
  const auto& job = *static_cast<const courier_gpu_ep_layout_v1*>(arg);
  for (uint32_t t = thread->block_idx; t < job.num_tokens; t += thread->grid_dim) {
    device::layout_token(job, t);
  }
}

}  // namespace

int run_ep_layout(const courier_gpu_ep_layout_v1* job, std::string* error) {
  if (job == nullptr || job->struct_size < sizeof *job) {
    *error = "run_ep_layout: job is NULL or its struct_size is too small";
    return -EINVAL;
  }
  if (job->num_tokens == 0) return 0;
  courier_host_kernel_launch_v1 launch{};
  launch.struct_size = sizeof launch;
  launch.grid_dim = std::min<uint32_t>(job->num_tokens, 4);  // a few threads, like a small grid
  launch.block_dim = 1;
  launch.fn = layout_kernel;
  launch.arg = const_cast<courier_gpu_ep_layout_v1*>(job);
  return launch_host_kernel(launch, error);
}

}  // namespace courier::host_gpu
