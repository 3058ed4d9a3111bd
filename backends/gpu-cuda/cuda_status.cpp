#include "cuda_status.hpp"

#include <cerrno>
#include <utility>

namespace courier::cuda_gpu {

namespace {
thread_local std::string t_last_error;  // per thread, as the ABI prescribes
}

int fail(int status, std::string message) {
  t_last_error = std::move(message);
  return status;
}

int fail(cudaError_t error, const std::string& what) {
  int status = -EIO;
  switch (error) {
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorInvalidDevice:
      status = -ENODEV;
      break;
    case cudaErrorMemoryAllocation:
      status = -ENOMEM;
      break;
    case cudaErrorInvalidValue:
    case cudaErrorInvalidDevicePointer:
      status = -EINVAL;
      break;
    default:
      break;
  }
  return fail(status,
              what + ": " + cudaGetErrorString(error) + " (" + cudaGetErrorName(error) + ")");
}

const char* last_error() { return t_last_error.c_str(); }

}  // namespace courier::cuda_gpu
