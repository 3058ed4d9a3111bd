#include "core/gpu_features.hpp"

#include <array>

namespace courier {

namespace {

struct FeatureInfo {
  std::string_view name;
  uint16_t minor;
};

// In the order of GpuFeature.
constexpr std::array<FeatureInfo, kGpuFeatureCount> kFeatures = {{
    {"host_kernels", 0},      {"ipc", 1},
    {"dmabuf_export", 1},     {"fifo_kernels", 1},
    {"ep_layout", 1},         {"ep_direct", 2},
    {"ep_proxy", 3},          {"ep_fp8_pow2", 4},
    {"ep_logfmt", 5},         {"ep_counts_first", 7},
    {"ep_proxy_sources", 8},  {"ep_set_stream", 9},
    {"ep_capture_query", 10}, {"ep_scales_layout", 10},
    {"ep_copy", 11},          {"ep_counters", 12},
    {"ep_fused", 13},         {"ep_local_rows", 14},
    {"ep_hold", 14},          {"ep_ht_fused", 16},
    {"ep_combine_fused", 17}, {"ep_done_mark", 18},
}};

}  // namespace

std::string_view to_string(GpuFeature feature) {
  return kFeatures[static_cast<size_t>(feature)].name;
}

uint16_t gpu_feature_minor(GpuFeature feature) {
  return kFeatures[static_cast<size_t>(feature)].minor;
}

}  // namespace courier
