#include "core/device_choice.hpp"

#include "core/check.hpp"

namespace courier {

int choose_gpu_device(const Config& config, const GpuBackend& gpu) {
  const uint32_t count = gpu.props().device_count;
  if (config.gpu_device == Config::kAutoGpuDevice) {
    return static_cast<int>(static_cast<uint32_t>(config.job.local_rank) % count);
  }
  if (config.gpu_device >= count) {
    fail("COURIER_GPU_DEVICE={} is invalid: GPU backend '{}' has {} device(s)", config.gpu_device,
         gpu.plugin().name, count);
  }
  return static_cast<int>(config.gpu_device);
}

int choose_and_announce_gpu_device(const Config& config, GpuBackend& gpu, HostServices& host) {
  const int device = choose_gpu_device(config, gpu);
  host.set_gpu_device(static_cast<uint32_t>(device));
  gpu.requery();
  return device;
}

}  // namespace courier
