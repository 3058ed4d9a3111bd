#include "ce_current_device.hpp"

#include <cuda_runtime_api.h>

#include <string>

#include "ce_error.hpp"

namespace courier::nic_ce {

namespace {
// What this thread last made current (cudaGetDevice would cost a call each).
thread_local int t_current_device = -1;
}  // namespace

int use_device(int device) {
  if (t_current_device == device) return 0;
  cudaError_t rc = cudaSetDevice(device);
  if (rc != cudaSuccess) return set_cuda_error(rc, "cudaSetDevice(" + std::to_string(device) + ")");
  t_current_device = device;
  return 0;
}

}  // namespace courier::nic_ce
