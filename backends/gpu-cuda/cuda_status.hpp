// Turning CUDA errors into the plugin ABI's status codes and last_error()
// text ("what failed: CUDA's description (its enum name)").
#pragma once

#include <cuda_runtime_api.h>

#include <string>

namespace courier::cuda_gpu {

// Records `message` as this thread's last error and returns `status`.
int fail(int status, std::string message);
// Records "<what>: <CUDA's text> (<enum name>)" and returns the errno-style
// status that fits `error` (-ENODEV, -ENOMEM, -EINVAL, otherwise -EIO).
int fail(cudaError_t error, const std::string& what);
// This thread's last error.
const char* last_error();

}  // namespace courier::cuda_gpu
