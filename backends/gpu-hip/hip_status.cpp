#include "hip_status.hpp"

#include <cerrno>
#include <utility>

namespace courier::hip_gpu {

namespace {
thread_local std::string t_last_error;  // per thread, as the ABI prescribes
}

int fail(int status, std::string message) {
  t_last_error = std::move(message);
  return status;
}

std::string describe(hipError_t error) {
  const std::string name = hipGetErrorName(error);
  const std::string text = hipGetErrorString(error);
  // HIP 5.2 often gives the enum name as the description too.
  return text == name ? name : text + " (" + name + ")";
}

int fail(hipError_t error, const std::string& what) {
  int status = -EIO;
  switch (error) {
    case hipErrorNoDevice:
    case hipErrorInsufficientDriver:
    case hipErrorInvalidDevice:
      status = -ENODEV;
      break;
    case hipErrorOutOfMemory:
      status = -ENOMEM;
      break;
    case hipErrorInvalidValue:
    case hipErrorInvalidDevicePointer:
      status = -EINVAL;
      break;
    case hipErrorNotSupported:
      status = -ENOTSUP;
      break;
    default:
      break;
  }
  return fail(status, what + ": " + describe(error));
}

const char* last_error() { return t_last_error.c_str(); }

}  // namespace courier::hip_gpu
