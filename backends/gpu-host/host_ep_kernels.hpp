// The expert-parallel kernels of gpu/ep/ on CPU threads (gpu-host).
#pragma once

#include <string>

#include "courier/abi/gpu_v1.h"

namespace courier::host_gpu {

// Returns 0 or -errno with *error set.
int run_ep_layout(const courier_gpu_ep_layout_v1* job, std::string* error);

}  // namespace courier::host_gpu
