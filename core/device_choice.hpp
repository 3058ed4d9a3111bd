// Which GPU this rank uses, chosen once for the whole Context: the device
// COURIER_GPU_DEVICE names, else the local rank modulo the GPU backend's
// device count (one GPU per rank on a multi-GPU host).
#pragma once

#include "core/backend_instance.hpp"
#include "core/config.hpp"

namespace courier {

// Throws naming COURIER_GPU_DEVICE when it is beyond the backend's devices.
int choose_gpu_device(const Config& config, const GpuBackend& gpu);

}  // namespace courier
