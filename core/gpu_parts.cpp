#include "core/gpu_parts.hpp"

#include <cstddef>

namespace courier {

namespace {

// Whether the plugin's table (header.struct_size bytes) reaches the end of `field`.
#define COURIER_TABLE_COVERS(ops, field) \
  ((ops).header.struct_size >= offsetof(courier_gpu_plugin_v1, field) + sizeof((ops).field))

// A part's entry, or NULL where the part is absent, ends before it or leaves it unset.
#define COURIER_PART_ENTRY(type, part, field) \
  (COURIER_GPU_PART_HAS(type, part, field) ? (part)->field : nullptr)

template <class... Entries>
bool all_set(Entries... entries) {
  return ((entries != nullptr) && ...);
}

void make_complete(GpuParts& parts) {
  parts.runtime.struct_size = sizeof parts.runtime;
  parts.selftest.struct_size = sizeof parts.selftest;
  parts.ep.struct_size = sizeof parts.ep;
}

// A plugin older than 1.15: its parts from the flat fields, with the rules
// the core applied to each minor's entries before parts existed. An entry
// group of minors 1 to 3 is there when the plugin speaks its minor and its
// table covers the group (capability bits say which entries work); from
// minor 9 on an entry also needs to be set and every later-minor entry
// before it there. Bits of absent groups, or of minors the plugin predates,
// are cleared.
GpuParts from_flat_fields(const courier_gpu_plugin_v1& ops, uint16_t minor, uint32_t caps) {
  GpuParts p;
  courier_gpu_runtime_part_v1& runtime = p.runtime;
  courier_gpu_selftest_part_v1& selftest = p.selftest;
  courier_gpu_ep_part_v1& ep = p.ep;
  runtime.mem_alloc = ops.mem_alloc;  // the 1.0 entries: the registry checked them
  runtime.mem_free = ops.mem_free;
  runtime.host_alloc_mapped = ops.host_alloc_mapped;
  runtime.host_free_mapped = ops.host_free_mapped;
  runtime.memcpy_sync = ops.memcpy_sync;
  runtime.launch_host_kernel = ops.launch_host_kernel;

  const bool minor1 = minor >= 1 && COURIER_TABLE_COVERS(ops, run_ep_layout);
  if (minor1) {
    runtime.ipc_export = ops.ipc_export;
    runtime.ipc_import = ops.ipc_import;
    runtime.ipc_close = ops.ipc_close;
    runtime.dmabuf_export = ops.dmabuf_export;
    selftest.run_fifo_producers = ops.run_fifo_producers;
    selftest.run_fifo_round_trips = ops.run_fifo_round_trips;
    selftest.run_command_lists = ops.run_command_lists;
    ep.run_ep_layout = ops.run_ep_layout;
  } else {
    caps &= ~(COURIER_GPU_CAP_IPC | COURIER_GPU_CAP_DMABUF | COURIER_GPU_CAP_FIFO_KERNELS |
              COURIER_GPU_CAP_GRAPHS | COURIER_GPU_CAP_EP_KERNELS);
  }
  const bool minor2 = minor1 && minor >= 2 && COURIER_TABLE_COVERS(ops, ep_sync);
  if (minor2) {
    ep.ep_route = ops.ep_route;
    ep.ep_signal = ops.ep_signal;
    ep.ep_wait = ops.ep_wait;
    ep.ep_ht_dispatch = ops.ep_ht_dispatch;
    ep.ep_ll_dispatch = ops.ep_ll_dispatch;
    ep.ep_ll_receive = ops.ep_ll_receive;
    ep.ep_combine_send = ops.ep_combine_send;
    ep.ep_reduce = ops.ep_reduce;
    ep.ep_sync = ops.ep_sync;
  } else {
    caps &= ~COURIER_GPU_CAP_EP_DIRECT;
  }
  const bool minor3 = minor2 && minor >= 3 && COURIER_TABLE_COVERS(ops, ep_proxy_reduce);
  if (minor3) {
    ep.ep_proxy_refuse = ops.ep_proxy_refuse;
    ep.ep_proxy_ht_dispatch = ops.ep_proxy_ht_dispatch;
    ep.ep_proxy_ht_receive = ops.ep_proxy_ht_receive;
    ep.ep_proxy_ll_dispatch = ops.ep_proxy_ll_dispatch;
    ep.ep_proxy_ll_receive = ops.ep_proxy_ll_receive;
    ep.ep_proxy_combine = ops.ep_proxy_combine;
    ep.ep_proxy_reduce = ops.ep_proxy_reduce;
  } else {
    caps &= ~COURIER_GPU_CAP_EP_PROXY;
  }
  // Flags and fields of the jobs, no entries: the minor alone says.
  if (minor < 4) caps &= ~COURIER_GPU_CAP_EP_FP8_POW2;
  if (minor < 5) caps &= ~COURIER_GPU_CAP_EP_LOGFMT;
  if (minor < 13) caps &= ~COURIER_GPU_CAP_EP_FUSED;
  if (minor < 14) caps &= ~COURIER_GPU_CAP_EP_LOCAL_ROWS;
  if (minor < 16) caps &= ~COURIER_GPU_CAP_EP_HT_FUSED;
  if (minor < 17) caps &= ~COURIER_GPU_CAP_EP_COMBINE_FUSED;
  if (minor < 18) caps &= ~COURIER_GPU_CAP_EP_DONE_MARK;

  const bool minor9 = minor3 && minor >= 9 && COURIER_TABLE_COVERS(ops, ep_set_stream) &&
                      ops.ep_set_stream != nullptr;
  if (minor9) ep.ep_set_stream = ops.ep_set_stream;
  const bool minor10 = minor9 && minor >= 10 && COURIER_TABLE_COVERS(ops, ep_stream_capturing) &&
                       ops.ep_stream_capturing != nullptr;
  if (minor10) ep.ep_stream_capturing = ops.ep_stream_capturing;
  const bool minor11 =
      minor10 && minor >= 11 && COURIER_TABLE_COVERS(ops, ep_copy) && ops.ep_copy != nullptr;
  if (minor11) ep.ep_copy = ops.ep_copy;
  const bool minor12 = minor11 && minor >= 12 && COURIER_TABLE_COVERS(ops, ep_stamp_elapsed) &&
                       all_set(ops.ep_counters, ops.ep_stamp, ops.ep_stamp_elapsed);
  if (minor12) {
    ep.ep_counters = ops.ep_counters;
    ep.ep_stamp = ops.ep_stamp;
    ep.ep_stamp_elapsed = ops.ep_stamp_elapsed;
  }
  const bool minor14 =
      minor12 && minor >= 14 && COURIER_TABLE_COVERS(ops, ep_hold) && ops.ep_hold != nullptr;
  if (minor14) ep.ep_hold = ops.ep_hold;
  p.caps = caps;
  return p;
}

// A plugin of 1.15 or later: its parts, each read up to its struct_size. A
// capability bit stays only where the entries it needs are there.
GpuParts from_plugin_parts(const courier_gpu_plugin_v1& ops, uint16_t minor, uint32_t caps) {
  using Runtime = courier_gpu_runtime_part_v1;
  using Selftest = courier_gpu_selftest_part_v1;
  using Ep = courier_gpu_ep_part_v1;
  const Runtime* rt = COURIER_TABLE_COVERS(ops, runtime) ? ops.runtime : nullptr;
  const Selftest* st = COURIER_TABLE_COVERS(ops, selftest) ? ops.selftest : nullptr;
  const Ep* e = COURIER_TABLE_COVERS(ops, ep) ? ops.ep : nullptr;
  GpuParts p;
  courier_gpu_runtime_part_v1& runtime = p.runtime;
  courier_gpu_selftest_part_v1& selftest = p.selftest;
  courier_gpu_ep_part_v1& ep = p.ep;
  runtime.mem_alloc = COURIER_PART_ENTRY(Runtime, rt, mem_alloc);
  runtime.mem_free = COURIER_PART_ENTRY(Runtime, rt, mem_free);
  runtime.host_alloc_mapped = COURIER_PART_ENTRY(Runtime, rt, host_alloc_mapped);
  runtime.host_free_mapped = COURIER_PART_ENTRY(Runtime, rt, host_free_mapped);
  runtime.memcpy_sync = COURIER_PART_ENTRY(Runtime, rt, memcpy_sync);
  runtime.launch_host_kernel = COURIER_PART_ENTRY(Runtime, rt, launch_host_kernel);
  runtime.ipc_export = COURIER_PART_ENTRY(Runtime, rt, ipc_export);
  runtime.ipc_import = COURIER_PART_ENTRY(Runtime, rt, ipc_import);
  runtime.ipc_close = COURIER_PART_ENTRY(Runtime, rt, ipc_close);
  runtime.dmabuf_export = COURIER_PART_ENTRY(Runtime, rt, dmabuf_export);

  selftest.run_fifo_producers = COURIER_PART_ENTRY(Selftest, st, run_fifo_producers);
  selftest.run_fifo_round_trips = COURIER_PART_ENTRY(Selftest, st, run_fifo_round_trips);
  selftest.run_command_lists = COURIER_PART_ENTRY(Selftest, st, run_command_lists);

  ep.run_ep_layout = COURIER_PART_ENTRY(Ep, e, run_ep_layout);
  ep.ep_route = COURIER_PART_ENTRY(Ep, e, ep_route);
  ep.ep_signal = COURIER_PART_ENTRY(Ep, e, ep_signal);
  ep.ep_wait = COURIER_PART_ENTRY(Ep, e, ep_wait);
  ep.ep_ht_dispatch = COURIER_PART_ENTRY(Ep, e, ep_ht_dispatch);
  ep.ep_ll_dispatch = COURIER_PART_ENTRY(Ep, e, ep_ll_dispatch);
  ep.ep_ll_receive = COURIER_PART_ENTRY(Ep, e, ep_ll_receive);
  ep.ep_combine_send = COURIER_PART_ENTRY(Ep, e, ep_combine_send);
  ep.ep_reduce = COURIER_PART_ENTRY(Ep, e, ep_reduce);
  ep.ep_sync = COURIER_PART_ENTRY(Ep, e, ep_sync);
  ep.ep_proxy_refuse = COURIER_PART_ENTRY(Ep, e, ep_proxy_refuse);
  ep.ep_proxy_ht_dispatch = COURIER_PART_ENTRY(Ep, e, ep_proxy_ht_dispatch);
  ep.ep_proxy_ht_receive = COURIER_PART_ENTRY(Ep, e, ep_proxy_ht_receive);
  ep.ep_proxy_ll_dispatch = COURIER_PART_ENTRY(Ep, e, ep_proxy_ll_dispatch);
  ep.ep_proxy_ll_receive = COURIER_PART_ENTRY(Ep, e, ep_proxy_ll_receive);
  ep.ep_proxy_combine = COURIER_PART_ENTRY(Ep, e, ep_proxy_combine);
  ep.ep_proxy_reduce = COURIER_PART_ENTRY(Ep, e, ep_proxy_reduce);
  ep.ep_set_stream = COURIER_PART_ENTRY(Ep, e, ep_set_stream);
  ep.ep_stream_capturing = COURIER_PART_ENTRY(Ep, e, ep_stream_capturing);
  ep.ep_copy = COURIER_PART_ENTRY(Ep, e, ep_copy);
  ep.ep_counters = COURIER_PART_ENTRY(Ep, e, ep_counters);
  ep.ep_stamp = COURIER_PART_ENTRY(Ep, e, ep_stamp);
  ep.ep_stamp_elapsed = COURIER_PART_ENTRY(Ep, e, ep_stamp_elapsed);
  ep.ep_hold = COURIER_PART_ENTRY(Ep, e, ep_hold);

  if (!all_set(runtime.ipc_export, runtime.ipc_import, runtime.ipc_close)) {
    caps &= ~COURIER_GPU_CAP_IPC;
  }
  if (runtime.dmabuf_export == nullptr) caps &= ~COURIER_GPU_CAP_DMABUF;
  if (!all_set(selftest.run_fifo_producers, selftest.run_fifo_round_trips,
               selftest.run_command_lists)) {
    caps &= ~COURIER_GPU_CAP_FIFO_KERNELS;
  }
  if (ep.run_ep_layout == nullptr) caps &= ~COURIER_GPU_CAP_EP_KERNELS;
  if (!all_set(ep.ep_route, ep.ep_signal, ep.ep_wait, ep.ep_ht_dispatch, ep.ep_ll_dispatch,
               ep.ep_ll_receive, ep.ep_combine_send, ep.ep_reduce, ep.ep_sync)) {
    caps &= ~COURIER_GPU_CAP_EP_DIRECT;
  }
  if (!all_set(ep.ep_proxy_refuse, ep.ep_proxy_ht_dispatch, ep.ep_proxy_ht_receive,
               ep.ep_proxy_ll_dispatch, ep.ep_proxy_ll_receive, ep.ep_proxy_combine,
               ep.ep_proxy_reduce, ep.ep_sync)) {
    caps &= ~COURIER_GPU_CAP_EP_PROXY;
  }
  // What refines the EP kernels goes with them.
  if ((caps & (COURIER_GPU_CAP_EP_DIRECT | COURIER_GPU_CAP_EP_PROXY)) == 0) {
    caps &= ~(COURIER_GPU_CAP_EP_FP8_POW2 | COURIER_GPU_CAP_EP_LOGFMT);
  }
  if ((caps & COURIER_GPU_CAP_EP_DIRECT) == 0) {
    caps &=
        ~(COURIER_GPU_CAP_EP_FUSED | COURIER_GPU_CAP_EP_LOCAL_ROWS | COURIER_GPU_CAP_EP_HT_FUSED |
          COURIER_GPU_CAP_EP_COMBINE_FUSED | COURIER_GPU_CAP_EP_DONE_MARK);
  }
  // Flags and fields of the jobs of minors after the parts: the minor says.
  if (minor < 16) caps &= ~COURIER_GPU_CAP_EP_HT_FUSED;
  if (minor < 17) caps &= ~COURIER_GPU_CAP_EP_COMBINE_FUSED;
  if (minor < 18) caps &= ~COURIER_GPU_CAP_EP_DONE_MARK;
  p.caps = caps;
  return p;
}

#undef COURIER_PART_ENTRY
#undef COURIER_TABLE_COVERS

// The features the parts, the cleared capability bits and the minor leave:
// the same rule for both kinds of plugin, since from_flat_fields left only
// what the core found usable in each minor.
std::bitset<kGpuFeatureCount> features_of(const GpuParts& p, uint16_t minor) {
  std::bitset<kGpuFeatureCount> features;
  auto set = [&](GpuFeature feature, bool on) { features.set(static_cast<size_t>(feature), on); };
  auto claims = [&](uint32_t bit) { return (p.caps & bit) != 0; };
  set(GpuFeature::host_kernels, claims(COURIER_GPU_CAP_HOST_KERNELS));
  set(GpuFeature::ipc, claims(COURIER_GPU_CAP_IPC));
  set(GpuFeature::dmabuf_export,
      claims(COURIER_GPU_CAP_DMABUF) && p.runtime.dmabuf_export != nullptr);
  set(GpuFeature::fifo_kernels, claims(COURIER_GPU_CAP_FIFO_KERNELS));
  set(GpuFeature::ep_layout, claims(COURIER_GPU_CAP_EP_KERNELS));
  set(GpuFeature::ep_direct, claims(COURIER_GPU_CAP_EP_DIRECT));
  set(GpuFeature::ep_proxy, claims(COURIER_GPU_CAP_EP_PROXY));
  set(GpuFeature::ep_fp8_pow2, claims(COURIER_GPU_CAP_EP_FP8_POW2));
  set(GpuFeature::ep_logfmt, claims(COURIER_GPU_CAP_EP_LOGFMT));
  set(GpuFeature::ep_counts_first, minor >= gpu_feature_minor(GpuFeature::ep_counts_first));
  set(GpuFeature::ep_proxy_sources, minor >= gpu_feature_minor(GpuFeature::ep_proxy_sources));
  set(GpuFeature::ep_set_stream, p.ep.ep_set_stream != nullptr);
  set(GpuFeature::ep_capture_query, p.ep.ep_stream_capturing != nullptr);
  set(GpuFeature::ep_scales_layout, minor >= gpu_feature_minor(GpuFeature::ep_scales_layout));
  set(GpuFeature::ep_copy, p.ep.ep_copy != nullptr);
  set(GpuFeature::ep_counters, all_set(p.ep.ep_counters, p.ep.ep_stamp, p.ep.ep_stamp_elapsed));
  set(GpuFeature::ep_fused, claims(COURIER_GPU_CAP_EP_FUSED));
  set(GpuFeature::ep_local_rows, claims(COURIER_GPU_CAP_EP_LOCAL_ROWS));
  set(GpuFeature::ep_hold, p.ep.ep_hold != nullptr);
  set(GpuFeature::ep_ht_fused, claims(COURIER_GPU_CAP_EP_HT_FUSED));
  set(GpuFeature::ep_combine_fused, claims(COURIER_GPU_CAP_EP_COMBINE_FUSED));
  set(GpuFeature::ep_done_mark, claims(COURIER_GPU_CAP_EP_DONE_MARK));
  return features;
}

}  // namespace

GpuParts gpu_parts_of(const courier_gpu_plugin_v1& ops, uint16_t abi_minor, uint32_t caps) {
  GpuParts parts = abi_minor >= kGpuPartsMinor ? from_plugin_parts(ops, abi_minor, caps)
                                               : from_flat_fields(ops, abi_minor, caps);
  make_complete(parts);
  parts.features = features_of(parts, abi_minor);
  return parts;
}

}  // namespace courier
