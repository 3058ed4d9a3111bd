// Which GPU this rank uses, chosen once for the whole Context: the device
// COURIER_GPU_DEVICE names, else the local rank modulo the GPU backend's
// device count (one GPU per rank on a multi-GPU host). Plugins learn it
// through the host services' gpu_device, never by reading the variable.
#pragma once

#include "core/backend_instance.hpp"
#include "core/config.hpp"

namespace courier {

// Throws naming COURIER_GPU_DEVICE when it is beyond the backend's devices.
int choose_gpu_device(const Config& config, const GpuBackend& gpu);

// Start-up step 3 (docs/architecture.md): chooses the GPU
// (choose_gpu_device), tells the plugins (host's gpu_device answers it from
// now on, before any NIC backend's init), and has `gpu` describe that device
// (GpuBackend::requery: its init and first query ran before the choice,
// which needs their device count). Returns the device.
int choose_and_announce_gpu_device(const Config& config, GpuBackend& gpu, HostServices& host);

}  // namespace courier
