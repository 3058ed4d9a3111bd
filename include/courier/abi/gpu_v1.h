/* Courier GPU backend ABI, major version 1.
 *
 * A GPU backend is a shared object libcourier-gpu-NAME.so exporting
 *
 *     const courier_gpu_plugin_v1 *courier_gpu_backend_v1(void);
 *
 * Same rules as the NIC ABI (see nic_v1.h and docs/plugin-abi.md).
 */
#ifndef COURIER_ABI_GPU_V1_H
#define COURIER_ABI_GPU_V1_H

#include "courier/abi/plugin_header.h"

#ifdef __cplusplus
extern "C" {
#endif

#define COURIER_GPU_ABI_MAJOR 1
#define COURIER_GPU_ABI_MINOR 0
#define COURIER_GPU_SYMBOL_V1 "courier_gpu_backend_v1"

/* Capability bits (courier_gpu_props_v1.caps). */
#define COURIER_GPU_CAP_HOST_KERNELS (1u << 0) /* launch_host_kernel runs C functions */
#define COURIER_GPU_CAP_MAPPED_HOST (1u << 1)  /* host memory the device can address */
#define COURIER_GPU_CAP_IPC (1u << 2)          /* device memory shareable across processes */

typedef struct courier_gpu_props_v1 {
  uint32_t struct_size;
  uint32_t caps;         /* COURIER_GPU_CAP_* */
  uint32_t device_count; /* 0 when no device is usable: see no_device_reason */
  uint32_t warp_size;    /* lanes that step together (1 for CPU threads) */
  uint32_t mem_kind;     /* COURIER_MEM_* of memory from mem_alloc */
  uint32_t reserved;
  char device_name[64];
  char no_device_reason[128];
} courier_gpu_props_v1;

/* The coordinates of one "GPU thread" of a host kernel. */
typedef struct courier_host_thread_v1 {
  uint32_t block_idx;
  uint32_t thread_idx;
  uint32_t block_dim;
  uint32_t grid_dim;
  void* block; /* opaque; pass to sync_block */
  /* Barrier across the threads of this block (__syncthreads). */
  void (*sync_block)(const struct courier_host_thread_v1* self);
} courier_host_thread_v1;

typedef void (*courier_host_kernel_fn)(const courier_host_thread_v1* thread, void* arg);

typedef struct courier_host_kernel_launch_v1 {
  uint32_t struct_size;
  uint32_t grid_dim;
  uint32_t block_dim;
  uint32_t reserved;
  courier_host_kernel_fn fn;
  void* arg;
  /* CPUs the kernel's threads may run on (NULL/0: anywhere). The core gives
   * a rank's host kernels the CPUs of that rank's proxies, the way a real
   * GPU sits next to the cores that serve it. */
  const int32_t* cpus;
  uint32_t num_cpus;
  uint32_t reserved2;
} courier_host_kernel_launch_v1;

typedef struct courier_gpu_plugin_v1 {
  courier_plugin_header header;
  const char* description;
  const courier_knob_v1* knobs;
  uint32_t num_knobs;
  uint32_t reserved;

  /* Loads the vendor runtime lazily. A machine without a device is not an
   * init failure: init succeeds and query reports device_count == 0. */
  int (*init)(const courier_host_services_v1* host, void** backend);
  void (*fini)(void* backend);
  const char* (*last_error)(void* backend);
  int (*query)(void* backend, courier_gpu_props_v1* props);

  /* Device memory on `device`. */
  int (*mem_alloc)(void* backend, int device, size_t bytes, void** ptr);
  int (*mem_free)(void* backend, int device, void* ptr);
  /* Pinned host memory mapped into the device's address space (FIFO rings). */
  int (*host_alloc_mapped)(void* backend, size_t bytes, void** host_ptr, void** device_ptr);
  int (*host_free_mapped)(void* backend, void* host_ptr);
  /* Synchronous copy between any two addresses the backend knows. */
  int (*memcpy_sync)(void* backend, void* dst, const void* src, size_t bytes);
  /* Runs fn on grid_dim x block_dim threads and returns when all finished.
   * Only with COURIER_GPU_CAP_HOST_KERNELS; others return -ENOTSUP. */
  int (*launch_host_kernel)(void* backend, const courier_host_kernel_launch_v1* launch);
} courier_gpu_plugin_v1;

typedef const courier_gpu_plugin_v1* (*courier_gpu_backend_v1_fn)(void);

#ifdef __cplusplus
}
#endif
#endif
