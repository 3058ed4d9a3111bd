// The GPU this rank uses, as a plugin learns it: the core chooses it once
// (core/device_choice.hpp) and answers through the host services'
// gpu_device (host services minor 2). The plugin checks the answer against
// the devices its own runtime sees and refuses one beyond them rather than
// wrap it. Shared by the plugins that drive the rank's GPU themselves:
// gpu-cuda and nic-ce.
#pragma once

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "courier/abi/plugin_header.h"

namespace courier::device {

struct RankDevice {
  // COURIER_OK: `device` is the rank's GPU. -EAGAIN: no GPU is chosen (yet):
  // a GPU backend's init and first query run before the core's choice, and
  // services outside a Context (courier-info, tools, tests) never choose.
  // Any other status is an error `error` explains.
  int status = COURIER_OK;
  int device = 0;
  std::string error;
};

namespace detail {

inline std::string devices_seen(int count, const char* runtime) {
  return std::to_string(count) + " " + runtime + " device" + (count == 1 ? "" : "s");
}

// For cores older than host services minor 2, whose table ends before
// gpu_device (or leaves it NULL): the core's rule, applied by the plugin
// from the environment. This is the only place a plugin reads
// COURIER_GPU_DEVICE: COURIER_GPU_DEVICE, else COURIER_LOCAL_RANK modulo
// the device count.
inline RankDevice rank_device_from_environment(const courier_host_services_v1* host, int count,
                                               const char* runtime) {
  RankDevice out;
  const char* forced = host->get_env(host->ctx, "COURIER_GPU_DEVICE");
  if (forced != nullptr && *forced != '\0') {
    char* end = nullptr;
    errno = 0;
    const long value = std::strtol(forced, &end, 10);
    if (errno != 0 || *end != '\0' || value < 0 || value >= count) {
      out.status = -EINVAL;
      out.error = std::string("COURIER_GPU_DEVICE='") + forced + "' is not one of the " +
                  devices_seen(count, runtime);
      return out;
    }
    out.device = static_cast<int>(value);
    return out;
  }
  const char* local = host->get_env(host->ctx, "COURIER_LOCAL_RANK");
  const long rank = local != nullptr ? std::strtol(local, nullptr, 10) : 0;
  out.device = static_cast<int>((rank < 0 ? 0 : rank) % count);
  return out;
}

}  // namespace detail

// The rank's GPU among the `count` (> 0) devices the plugin's runtime sees;
// `runtime` names them in messages ("CUDA"). May be called at any time and
// from any thread; once it answers COURIER_OK, the answer does not change.
inline RankDevice rank_device(const courier_host_services_v1* host, int count,
                              const char* runtime) {
  if (!COURIER_HOST_HAS(host, gpu_device)) {
    return detail::rank_device_from_environment(host, count, runtime);
  }
  RankDevice out;
  uint32_t chosen = 0;
  out.status = host->gpu_device(host->ctx, &chosen);
  if (out.status == -EAGAIN) {
    out.error = "the core has not chosen this rank's GPU yet";
  } else if (out.status != COURIER_OK) {
    out.error = "the host services' gpu_device failed (status " + std::to_string(out.status) + ")";
  } else if (chosen >= static_cast<uint32_t>(count)) {
    out.status = -ENODEV;
    out.error = "the core chose GPU " + std::to_string(chosen) + " for this rank, but there " +
                (count == 1 ? "is " : "are ") + detail::devices_seen(count, runtime);
  } else {
    out.device = static_cast<int>(chosen);
  }
  return out;
}

}  // namespace courier::device
