// last_error() for nic-ce: one message per thread, as the ABI prescribes.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

namespace courier::nic_ce {

// Records `message` and returns `status`.
int set_error(int status, std::string message);
// Records "<what>: <CUDA's text> (<enum name>)" and returns -EIO (or
// -ENOMEM, -EINVAL, -ENODEV where CUDA's error says so).
int set_cuda_error(cudaError_t error, const std::string& what);
const char* last_error();

}  // namespace courier::nic_ce
