#include "ce_error.hpp"

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <utility>

namespace courier::nic_ce {

namespace {
thread_local std::string t_last_error;
}

int set_error(int status, std::string message) {
  t_last_error = "nic-ce: " + std::move(message);
  return status;
}

int set_errorf(int status, const char* format, ...) {
  char text[1024];
  va_list args;
  va_start(args, format);
  std::vsnprintf(text, sizeof text, format, args);
  va_end(args);
  return set_error(status, text);
}

int set_cuda_error(cudaError_t error, const std::string& what) {
  int status = -EIO;
  if (error == cudaErrorMemoryAllocation) status = -ENOMEM;
  if (error == cudaErrorInvalidValue || error == cudaErrorInvalidDevicePointer) status = -EINVAL;
  if (error == cudaErrorNoDevice || error == cudaErrorInsufficientDriver) status = -ENODEV;
  return set_error(status,
                   what + ": " + cudaGetErrorString(error) + " (" + cudaGetErrorName(error) + ")");
}

const std::string& last_error() { return t_last_error; }

}  // namespace courier::nic_ce
