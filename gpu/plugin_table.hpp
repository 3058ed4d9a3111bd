// A GPU backend's plugin table from its parts (GPU ABI 1.15): the parts for
// cores of 1.15 on, and the same entries in the flat fields for older cores,
// which read only those. Shared by gpu-host, gpu-cuda and gpu-hip, so each
// lists its entries once, in its parts.
#pragma once

#include "courier/abi/gpu_v1.h"

namespace courier::device {

// What the table holds besides the parts.
struct PluginIdentity {
  const char* name;  // NAME of libcourier-gpu-NAME.so
  const char* description;
  const courier_knob_v1* knobs;
  uint32_t num_knobs;
  int (*init)(const courier_host_services_v1* host, void** backend);
  void (*fini)(void* backend);
  const char* (*last_error)(void* backend);
  int (*query)(void* backend, courier_gpu_props_v1* props);
};

// The table of a plugin of this header's minor. The parts must live as long
// as the library (static objects); `selftest` and `ep` may be NULL (absent).
constexpr courier_gpu_plugin_v1 plugin_table(const PluginIdentity& identity,
                                             const courier_gpu_runtime_part_v1& runtime,
                                             const courier_gpu_selftest_part_v1* selftest,
                                             const courier_gpu_ep_part_v1* ep) {
  courier_gpu_plugin_v1 t{};
  t.header = {sizeof(courier_gpu_plugin_v1), COURIER_GPU_ABI_MAJOR, COURIER_GPU_ABI_MINOR,
              identity.name};
  t.description = identity.description;
  t.knobs = identity.knobs;
  t.num_knobs = identity.num_knobs;
  t.init = identity.init;
  t.fini = identity.fini;
  t.last_error = identity.last_error;
  t.query = identity.query;

  t.mem_alloc = runtime.mem_alloc;
  t.mem_free = runtime.mem_free;
  t.host_alloc_mapped = runtime.host_alloc_mapped;
  t.host_free_mapped = runtime.host_free_mapped;
  t.memcpy_sync = runtime.memcpy_sync;
  t.launch_host_kernel = runtime.launch_host_kernel;
  t.ipc_export = runtime.ipc_export;
  t.ipc_import = runtime.ipc_import;
  t.ipc_close = runtime.ipc_close;
  t.dmabuf_export = runtime.dmabuf_export;

  if (selftest != nullptr) {
    t.run_fifo_producers = selftest->run_fifo_producers;
    t.run_fifo_round_trips = selftest->run_fifo_round_trips;
    t.run_command_lists = selftest->run_command_lists;
  }

  if (ep != nullptr) {
    t.run_ep_layout = ep->run_ep_layout;
    t.ep_route = ep->ep_route;
    t.ep_signal = ep->ep_signal;
    t.ep_wait = ep->ep_wait;
    t.ep_ht_dispatch = ep->ep_ht_dispatch;
    t.ep_ll_dispatch = ep->ep_ll_dispatch;
    t.ep_ll_receive = ep->ep_ll_receive;
    t.ep_combine_send = ep->ep_combine_send;
    t.ep_reduce = ep->ep_reduce;
    t.ep_sync = ep->ep_sync;
    t.ep_proxy_refuse = ep->ep_proxy_refuse;
    t.ep_proxy_ht_dispatch = ep->ep_proxy_ht_dispatch;
    t.ep_proxy_ht_receive = ep->ep_proxy_ht_receive;
    t.ep_proxy_ll_dispatch = ep->ep_proxy_ll_dispatch;
    t.ep_proxy_ll_receive = ep->ep_proxy_ll_receive;
    t.ep_proxy_combine = ep->ep_proxy_combine;
    t.ep_proxy_reduce = ep->ep_proxy_reduce;
    t.ep_set_stream = ep->ep_set_stream;
    t.ep_stream_capturing = ep->ep_stream_capturing;
    t.ep_copy = ep->ep_copy;
    t.ep_counters = ep->ep_counters;
    t.ep_stamp = ep->ep_stamp;
    t.ep_stamp_elapsed = ep->ep_stamp_elapsed;
    t.ep_hold = ep->ep_hold;
  }

  t.runtime = &runtime;
  t.selftest = selftest;
  t.ep = ep;
  return t;
}

}  // namespace courier::device
