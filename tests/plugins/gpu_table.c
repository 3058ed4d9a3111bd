/* libcourier-gpu-TABLE_NAME.so: a GPU plugin with every entry of the GPU ABI,
 * built as one minor or another, so the tests can check which entries and
 * capabilities the core finds in each (core/gpu_parts.cpp). Its "device
 * memory" is host memory; its kernels run nowhere: each refuses with
 * -ENOTSUP and a last_error naming the entry ("flat14: ep_route runs no
 * kernels"), which tells a test what the core called.
 *
 * TABLE_MINOR picks the table:
 *   14  the flat table of GPU ABI 1.14, as plugins built before the parts
 *       (struct_size ends before the parts' pointers);
 *    8  the flat table of 1.8: its struct_size ends before ep_set_stream,
 *       though the fields past it are set (the core must not read them);
 *   15  the parts: a runtime part, an EP part whose struct_size ends before
 *       ep_hold (set past it), and no selftest part. Its flat fields hold
 *       every entry, ep_hold and the self-test kernels too, where a current
 *       plugin would leave those NULL: the difference shows that the core
 *       reads the parts alone.
 *   16  the same parts, as a plugin of 1.16 (whose jobs' new fields the
 *       core may set: COURIER_GPU_CAP_EP_HT_FUSED stays).
 *   17  the same, as 1.17 (COURIER_GPU_CAP_EP_COMBINE_FUSED stays too).
 *   18  the same, as 1.18 (COURIER_GPU_CAP_EP_DONE_MARK stays too).
 * TABLE_NO_SET_STREAM leaves ep_set_stream NULL (1.14: the core then takes
 * none of the entries of minors 9 to 14, as it always did). TABLE_NO_RUNTIME
 * (with 15) leaves the runtime part NULL, which the registry rejects.
 * Every variant claims every capability bit of 1.14 except host_kernels. */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "courier/abi/gpu_v1.h"

#define TEST_PLUGIN_EXPORT __attribute__((visibility("default")))

static _Thread_local char table_error[256] = TABLE_NAME ": no error";

static int table_fail(int status, const char* entry, const char* what) {
  snprintf(table_error, sizeof table_error, "%s: %s %s", TABLE_NAME, entry, what);
  return status;
}

static int refuse(const char* entry) { return table_fail(-ENOTSUP, entry, "runs no kernels"); }

static int table_init(const courier_host_services_v1* host, void** backend) {
  *backend = (void*)host; /* the host table outlives the backend */
  return COURIER_OK;
}

static void table_fini(void* backend) { (void)backend; }

static const char* table_last_error(void* backend) {
  (void)backend;
  return table_error;
}

static int table_query(void* backend, courier_gpu_props_v1* props) {
  (void)backend;
  if (props->struct_size < sizeof(courier_gpu_props_v1)) {
    return table_fail(-EINVAL, "query:", "props->struct_size is smaller than ABI 1.0's props");
  }
  memset(props, 0, sizeof *props);
  props->struct_size = sizeof *props;
  props->caps = COURIER_GPU_CAP_MAPPED_HOST | COURIER_GPU_CAP_IPC | COURIER_GPU_CAP_DMABUF |
                COURIER_GPU_CAP_FIFO_KERNELS | COURIER_GPU_CAP_GRAPHS | COURIER_GPU_CAP_EP_KERNELS |
                COURIER_GPU_CAP_EP_DIRECT | COURIER_GPU_CAP_EP_PROXY | COURIER_GPU_CAP_EP_FP8_POW2 |
                COURIER_GPU_CAP_EP_LOGFMT | COURIER_GPU_CAP_EP_FUSED |
                COURIER_GPU_CAP_EP_LOCAL_ROWS | COURIER_GPU_CAP_EP_HT_FUSED |
                COURIER_GPU_CAP_EP_COMBINE_FUSED | COURIER_GPU_CAP_EP_DONE_MARK;
  props->device_count = 1;
  props->warp_size = 1;
  props->mem_kind = COURIER_MEM_HOST;
  snprintf(props->device_name, sizeof props->device_name, "%s (host memory)", TABLE_NAME);
  return COURIER_OK;
}

/* ---- runtime ---- */

static int table_mem_alloc(void* backend, int device, size_t bytes, void** ptr) {
  const courier_host_services_v1* host = backend;
  if (device != 0) return table_fail(-ENODEV, "mem_alloc:", "only device 0 exists");
  *ptr = host->alloc(host->ctx, bytes, 256);
  return *ptr != NULL ? COURIER_OK : table_fail(-ENOMEM, "mem_alloc:", "out of memory");
}

static int table_mem_free(void* backend, int device, void* ptr) {
  const courier_host_services_v1* host = backend;
  (void)device;
  host->free(host->ctx, ptr);
  return COURIER_OK;
}

static int table_host_alloc_mapped(void* backend, size_t bytes, void** host_ptr,
                                   void** device_ptr) {
  int status = table_mem_alloc(backend, 0, bytes, host_ptr);
  *device_ptr = *host_ptr;
  return status;
}

static int table_host_free_mapped(void* backend, void* host_ptr) {
  return table_mem_free(backend, 0, host_ptr);
}

static int table_memcpy_sync(void* backend, void* dst, const void* src, size_t bytes) {
  (void)backend;
  memmove(dst, src, bytes);
  return COURIER_OK;
}

static int table_launch_host_kernel(void* backend, const courier_host_kernel_launch_v1* launch) {
  (void)backend;
  (void)launch;
  return refuse("launch_host_kernel");
}

static int table_ipc_export(void* backend, void* ptr, courier_gpu_ipc_handle_v1* handle) {
  (void)backend;
  (void)ptr;
  (void)handle;
  return table_fail(-EOPNOTSUPP, "ipc_export:", "host memory is not shared");
}

static int table_ipc_import(void* backend, int device, const courier_gpu_ipc_handle_v1* handle,
                            void** ptr) {
  (void)backend;
  (void)device;
  (void)handle;
  (void)ptr;
  return table_fail(-EOPNOTSUPP, "ipc_import:", "host memory is not shared");
}

static int table_ipc_close(void* backend, void* ptr) {
  (void)backend;
  (void)ptr;
  return COURIER_OK;
}

static int table_dmabuf_export(void* backend, void* ptr, size_t bytes, int* fd, uint64_t* offset) {
  (void)backend;
  (void)ptr;
  (void)bytes;
  (void)fd;
  (void)offset;
  return table_fail(-EOPNOTSUPP, "dmabuf_export:", "host memory is no dmabuf");
}

/* ---- self-test and EP kernels: refused, naming the entry ---- */

#define TABLE_KERNEL(entry, job_type)                      \
  static int table_##entry(void* backend, job_type* job) { \
    (void)backend;                                         \
    (void)job;                                             \
    return refuse(#entry);                                 \
  }

TABLE_KERNEL(run_fifo_producers, courier_gpu_fifo_producers_v1)
TABLE_KERNEL(run_fifo_round_trips, courier_gpu_fifo_round_trips_v1)
TABLE_KERNEL(run_command_lists, courier_gpu_command_lists_v1)
TABLE_KERNEL(run_ep_layout, const courier_gpu_ep_layout_v1)
TABLE_KERNEL(ep_route, const courier_gpu_ep_route_v1)
TABLE_KERNEL(ep_signal, const courier_gpu_ep_signal_v1)
TABLE_KERNEL(ep_wait, const courier_gpu_ep_wait_v1)
TABLE_KERNEL(ep_ht_dispatch, const courier_gpu_ep_ht_dispatch_v1)
TABLE_KERNEL(ep_ll_dispatch, const courier_gpu_ep_ll_dispatch_v1)
TABLE_KERNEL(ep_ll_receive, const courier_gpu_ep_ll_receive_v1)
TABLE_KERNEL(ep_combine_send, const courier_gpu_ep_combine_send_v1)
TABLE_KERNEL(ep_reduce, const courier_gpu_ep_reduce_v1)
TABLE_KERNEL(ep_proxy_refuse, const courier_gpu_ep_proxy_refuse_v1)
TABLE_KERNEL(ep_proxy_ht_dispatch, const courier_gpu_ep_proxy_ht_dispatch_v1)
TABLE_KERNEL(ep_proxy_ht_receive, const courier_gpu_ep_proxy_ht_receive_v1)
TABLE_KERNEL(ep_proxy_ll_dispatch, const courier_gpu_ep_proxy_ll_dispatch_v1)
TABLE_KERNEL(ep_proxy_ll_receive, const courier_gpu_ep_proxy_ll_receive_v1)
TABLE_KERNEL(ep_proxy_combine, const courier_gpu_ep_proxy_combine_v1)
TABLE_KERNEL(ep_proxy_reduce, const courier_gpu_ep_proxy_reduce_v1)

/* ---- the EP stream: nothing is ever queued, so these finish at once ---- */

static int check_device(const char* entry, int device) {
  return device == 0 ? COURIER_OK
                     : table_fail(-ENODEV, entry, "names a device that does not exist");
}

static int table_ep_sync(void* backend, int device) {
  (void)backend;
  return check_device("ep_sync", device);
}

static int table_ep_stream_capturing(void* backend, int device, int* capturing) {
  (void)backend;
  if (capturing == NULL) return table_fail(-EINVAL, "ep_stream_capturing:", "capturing is NULL");
  *capturing = 0;
  return check_device("ep_stream_capturing", device);
}

static int table_ep_copy(void* backend, int device, void* dst, const void* src, size_t bytes) {
  (void)backend;
  if (bytes > 0 && (dst == NULL || src == NULL))
    return table_fail(-EINVAL, "ep_copy:", "NULL pointer");
  if (bytes > 0) memmove(dst, src, bytes);
  return check_device("ep_copy", device);
}

static int table_ep_counters(void* backend, int device, courier_gpu_ep_counters_v1* out) {
  (void)backend;
  if (out == NULL || out->struct_size < sizeof *out) {
    return table_fail(-EINVAL, "ep_counters:", "out is NULL or too small");
  }
  out->kernel_launches = 0; /* every kernel is refused */
  out->host_waits = 0;
  return check_device("ep_counters", device);
}

static int table_ep_stamp(void* backend, int device, uint32_t slot) {
  (void)backend;
  if (slot > 1) return table_fail(-EINVAL, "ep_stamp:", "slot is not 0 or 1");
  return check_device("ep_stamp", device);
}

static int table_ep_stamp_elapsed(void* backend, int device, uint64_t* ns) {
  (void)backend;
  if (ns == NULL) return table_fail(-EINVAL, "ep_stamp_elapsed:", "ns is NULL");
  *ns = 0; /* both stamps at once: nothing runs between them */
  return check_device("ep_stamp_elapsed", device);
}

static int table_ep_hold(void* backend, int device, uint32_t microseconds) {
  (void)backend;
  (void)microseconds;
  return check_device("ep_hold", device);
}

#ifdef TABLE_NO_SET_STREAM
#define TABLE_SET_STREAM NULL
#else
static int table_ep_set_stream(void* backend, int device, int caller, void* stream) {
  (void)backend;
  (void)stream;
  if (caller != 0 && caller != 1)
    return table_fail(-EINVAL, "ep_set_stream:", "caller must be 0 or 1");
  return check_device("ep_set_stream", device);
}
#define TABLE_SET_STREAM table_ep_set_stream
#endif

#if TABLE_MINOR >= 15
#ifndef TABLE_NO_RUNTIME
static const courier_gpu_runtime_part_v1 runtime = {
    .struct_size = sizeof(courier_gpu_runtime_part_v1),
    .mem_alloc = table_mem_alloc,
    .mem_free = table_mem_free,
    .host_alloc_mapped = table_host_alloc_mapped,
    .host_free_mapped = table_host_free_mapped,
    .memcpy_sync = table_memcpy_sync,
    .launch_host_kernel = table_launch_host_kernel,
    .ipc_export = table_ipc_export,
    .ipc_import = table_ipc_import,
    .ipc_close = table_ipc_close,
    .dmabuf_export = table_dmabuf_export,
};
#endif

static const courier_gpu_ep_part_v1 ep = {
    .struct_size = offsetof(courier_gpu_ep_part_v1, ep_hold), /* ends before ep_hold */
    .run_ep_layout = table_run_ep_layout,
    .ep_route = table_ep_route,
    .ep_signal = table_ep_signal,
    .ep_wait = table_ep_wait,
    .ep_ht_dispatch = table_ep_ht_dispatch,
    .ep_ll_dispatch = table_ep_ll_dispatch,
    .ep_ll_receive = table_ep_ll_receive,
    .ep_combine_send = table_ep_combine_send,
    .ep_reduce = table_ep_reduce,
    .ep_sync = table_ep_sync,
    .ep_proxy_refuse = table_ep_proxy_refuse,
    .ep_proxy_ht_dispatch = table_ep_proxy_ht_dispatch,
    .ep_proxy_ht_receive = table_ep_proxy_ht_receive,
    .ep_proxy_ll_dispatch = table_ep_proxy_ll_dispatch,
    .ep_proxy_ll_receive = table_ep_proxy_ll_receive,
    .ep_proxy_combine = table_ep_proxy_combine,
    .ep_proxy_reduce = table_ep_proxy_reduce,
    .ep_set_stream = TABLE_SET_STREAM,
    .ep_stream_capturing = table_ep_stream_capturing,
    .ep_copy = table_ep_copy,
    .ep_counters = table_ep_counters,
    .ep_stamp = table_ep_stamp,
    .ep_stamp_elapsed = table_ep_stamp_elapsed,
    .ep_hold = table_ep_hold, /* past struct_size: not there */
};
#define TABLE_STRUCT_SIZE sizeof(courier_gpu_plugin_v1)
#elif TABLE_MINOR >= 14
#define TABLE_STRUCT_SIZE offsetof(courier_gpu_plugin_v1, runtime)
#elif TABLE_MINOR >= 8
#define TABLE_STRUCT_SIZE offsetof(courier_gpu_plugin_v1, ep_set_stream)
#else
#error "gpu_table.c is built as minor 8, 14 or 15"
#endif

static const courier_gpu_plugin_v1 plugin = {
    .header = {TABLE_STRUCT_SIZE, COURIER_GPU_ABI_MAJOR, TABLE_MINOR, TABLE_NAME},
    .description = "every GPU ABI entry, built as one minor (tests)",
    .init = table_init,
    .fini = table_fini,
    .last_error = table_last_error,
    .query = table_query,
    .mem_alloc = table_mem_alloc,
    .mem_free = table_mem_free,
    .host_alloc_mapped = table_host_alloc_mapped,
    .host_free_mapped = table_host_free_mapped,
    .memcpy_sync = table_memcpy_sync,
    .launch_host_kernel = table_launch_host_kernel,
    .ipc_export = table_ipc_export,
    .ipc_import = table_ipc_import,
    .ipc_close = table_ipc_close,
    .dmabuf_export = table_dmabuf_export,
    .run_fifo_producers = table_run_fifo_producers,
    .run_fifo_round_trips = table_run_fifo_round_trips,
    .run_command_lists = table_run_command_lists,
    .run_ep_layout = table_run_ep_layout,
    .ep_route = table_ep_route,
    .ep_signal = table_ep_signal,
    .ep_wait = table_ep_wait,
    .ep_ht_dispatch = table_ep_ht_dispatch,
    .ep_ll_dispatch = table_ep_ll_dispatch,
    .ep_ll_receive = table_ep_ll_receive,
    .ep_combine_send = table_ep_combine_send,
    .ep_reduce = table_ep_reduce,
    .ep_sync = table_ep_sync,
    .ep_proxy_refuse = table_ep_proxy_refuse,
    .ep_proxy_ht_dispatch = table_ep_proxy_ht_dispatch,
    .ep_proxy_ht_receive = table_ep_proxy_ht_receive,
    .ep_proxy_ll_dispatch = table_ep_proxy_ll_dispatch,
    .ep_proxy_ll_receive = table_ep_proxy_ll_receive,
    .ep_proxy_combine = table_ep_proxy_combine,
    .ep_proxy_reduce = table_ep_proxy_reduce,
    .ep_set_stream = TABLE_SET_STREAM,
    .ep_stream_capturing = table_ep_stream_capturing,
    .ep_copy = table_ep_copy,
    .ep_counters = table_ep_counters,
    .ep_stamp = table_ep_stamp,
    .ep_stamp_elapsed = table_ep_stamp_elapsed,
    .ep_hold = table_ep_hold,
#if TABLE_MINOR >= 15 && !defined(TABLE_NO_RUNTIME)
    .runtime = &runtime,
#endif
#if TABLE_MINOR >= 15
    .selftest = NULL, /* absent: no fifo_kernels, whatever the flat fields and caps say */
    .ep = &ep,
#endif
};

TEST_PLUGIN_EXPORT const courier_gpu_plugin_v1* courier_gpu_backend_v1(void) { return &plugin; }
