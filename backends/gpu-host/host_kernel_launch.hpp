// Runs a host kernel: grid_dim blocks of block_dim threads, each a real OS
// thread, with a barrier per block for sync_block (__syncthreads).
#pragma once

#include <string>

#include "courier/abi/gpu_v1.h"

namespace courier::host_gpu {

// Largest grid_dim * block_dim a launch may ask for.
inline constexpr uint32_t kMaxHostThreads = 4096;

// Returns COURIER_OK or -errno with *error set.
int launch_host_kernel(const courier_host_kernel_launch_v1& launch, std::string* error);

}  // namespace courier::host_gpu
