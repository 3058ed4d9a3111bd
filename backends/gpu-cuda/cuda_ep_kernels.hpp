// The expert-parallel kernels of gpu/ep/ compiled for NVIDIA GPUs.
#pragma once

#include "courier/abi/gpu_v1.h"

namespace courier::cuda_gpu {

// Returns 0 or a negative status with the reason in last_error().
int run_ep_layout(const courier_gpu_ep_layout_v1* job);

}  // namespace courier::cuda_gpu
