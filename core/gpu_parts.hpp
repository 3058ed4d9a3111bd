// A GPU plugin's table as the core calls it: three parts (GPU ABI 1.15,
// include/courier/abi/gpu_v1.h), copied from a plugin that has them or built
// from the flat fields of an older one, and the capability bits and features
// they leave. Only GpuBackend reads a plugin's entries; everything else
// calls through these parts.
#pragma once

#include <bitset>
#include <cstdint>

#include "core/gpu_features.hpp"
#include "courier/abi/gpu_v1.h"

namespace courier {

struct GpuParts {
  // Each complete (struct_size its sizeof); an entry the plugin lacks, or
  // one it predates, is NULL.
  courier_gpu_runtime_part_v1 runtime{};
  courier_gpu_selftest_part_v1 selftest{};
  courier_gpu_ep_part_v1 ep{};
  // The plugin's capability bits less those whose entries or minor it lacks.
  uint32_t caps = 0;
  std::bitset<kGpuFeatureCount> features;
};

// The minor from which plugins bring their own parts.
inline constexpr uint16_t kGpuPartsMinor = 15;

// The parts of `ops`, a plugin of GPU ABI 1.`abi_minor` (checked by the
// registry) whose query claimed `caps`.
GpuParts gpu_parts_of(const courier_gpu_plugin_v1& ops, uint16_t abi_minor, uint32_t caps);

}  // namespace courier
