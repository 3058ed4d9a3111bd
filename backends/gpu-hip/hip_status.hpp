// Turning HIP errors into the plugin ABI's status codes and last_error()
// text ("what failed: HIP's description (its enum name)").
#pragma once

#include <hip/hip_runtime_api.h>

#include <string>

namespace courier::hip_gpu {

// Records `message` as this thread's last error and returns `status`.
int fail(int status, std::string message);
// Records "<what>: <HIP's text> (<enum name>)" and returns the errno-style
// status that fits `error` (-ENODEV, -ENOMEM, -EINVAL, -ENOTSUP, otherwise
// -EIO).
int fail(hipError_t error, const std::string& what);
// "<HIP's text> (<enum name>)", or just the name where HIP's text is the name.
std::string describe(hipError_t error);
// This thread's last error.
const char* last_error();

}  // namespace courier::hip_gpu
