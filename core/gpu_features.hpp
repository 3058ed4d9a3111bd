// What a caller may need from a GPU backend (GpuBackend::supports): an
// entry of the plugin's parts, a capability bit, or a revision of the EP
// jobs, each with the GPU ABI minor that brought it, so that a refusal can
// say which plugin version would do.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace courier {

enum class GpuFeature : uint8_t {
  host_kernels,      // launch_host_kernel runs C functions (COURIER_GPU_CAP_HOST_KERNELS)
  ipc,               // ipc_export, ipc_import, ipc_close (COURIER_GPU_CAP_IPC)
  dmabuf_export,     // dmabuf_export, set and claimed (COURIER_GPU_CAP_DMABUF)
  fifo_kernels,      // the selftest part (COURIER_GPU_CAP_FIFO_KERNELS)
  ep_layout,         // run_ep_layout (COURIER_GPU_CAP_EP_KERNELS)
  ep_direct,         // ep_route .. ep_reduce and ep_sync (COURIER_GPU_CAP_EP_DIRECT)
  ep_proxy,          // ep_proxy_* and ep_sync (COURIER_GPU_CAP_EP_PROXY)
  ep_fp8_pow2,       // COURIER_GPU_EP_FP8_POW2_SCALES (COURIER_GPU_CAP_EP_FP8_POW2)
  ep_logfmt,         // COURIER_GPU_EP_COMBINE_LOGFMT (COURIER_GPU_CAP_EP_LOGFMT)
  ep_counts_first,   // the high-throughput proxy jobs send counts first (their minor-7 meaning)
  ep_proxy_sources,  // their sources, readback and plan (minor-8 fields)
  ep_set_stream,     // ep_set_stream: EP kernels on a caller's stream
  ep_capture_query,  // ep_stream_capturing: is the EP stream being captured
  ep_scales_layout,  // scales_layout in the low-latency receive jobs
  ep_copy,           // ep_copy: a copy on the EP stream
  ep_counters,       // ep_counters, ep_stamp and ep_stamp_elapsed (benchmarks' figures)
  ep_fused,          // fused direct launches (COURIER_GPU_CAP_EP_FUSED)
  ep_local_rows,     // a low-latency combine's own rows stay in x (COURIER_GPU_CAP_EP_LOCAL_ROWS)
  ep_hold,           // ep_hold: a spin on the EP stream
  ep_ht_fused,       // a high-throughput dispatch in two launches (COURIER_GPU_CAP_EP_HT_FUSED)
  ep_combine_fused,  // a combine in one launch (COURIER_GPU_CAP_EP_COMBINE_FUSED)
  ep_done_mark,      // a call's end told in mapped host memory (COURIER_GPU_CAP_EP_DONE_MARK)
};

inline constexpr size_t kGpuFeatureCount = static_cast<size_t>(GpuFeature::ep_done_mark) + 1;

// "ep_set_stream": the feature's name, as in the list above.
std::string_view to_string(GpuFeature feature);
// The GPU ABI minor whose plugins first could offer it (1.<minor>).
uint16_t gpu_feature_minor(GpuFeature feature);

}  // namespace courier
