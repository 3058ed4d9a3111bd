// last_error() for nic-ce: one message per thread, as the ABI prescribes.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

namespace courier::nic_ce {

// Records `message` and returns `status`.
int set_error(int status, std::string message);
// The same with a printf-style message: the form the shared entry points
// (nic/plugin_entries.hpp) report their own failures in.
[[gnu::format(printf, 2, 3)]] int set_errorf(int status, const char* format, ...);
// Records "<what>: <CUDA's text> (<enum name>)" and returns -EIO (or
// -ENOMEM, -EINVAL, -ENODEV where CUDA's error says so).
int set_cuda_error(cudaError_t error, const std::string& what);
// The calling thread's most recent error text ("" when none yet).
const std::string& last_error();

}  // namespace courier::nic_ce
