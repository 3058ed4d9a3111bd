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
#define COURIER_GPU_ABI_MINOR 1
#define COURIER_GPU_SYMBOL_V1 "courier_gpu_backend_v1"

/* Capability bits (courier_gpu_props_v1.caps). */
#define COURIER_GPU_CAP_HOST_KERNELS (1u << 0) /* launch_host_kernel runs C functions */
#define COURIER_GPU_CAP_MAPPED_HOST (1u << 1)  /* host memory the device can address */
#define COURIER_GPU_CAP_IPC (1u << 2)          /* device memory shareable across processes */
/* Minor 1: */
#define COURIER_GPU_CAP_DMABUF (1u << 3)       /* dmabuf_export gives NICs device memory */
#define COURIER_GPU_CAP_FIFO_KERNELS (1u << 4) /* run_fifo_producers, run_fifo_round_trips */
#define COURIER_GPU_CAP_GRAPHS (1u << 5)       /* kernels can be captured in a graph */
#define COURIER_GPU_CAP_EP_KERNELS (1u << 6)   /* run_ep_layout (expert parallelism) */

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

/* Minor 1. An opaque handle that lets another process of the same host map
 * device memory (cudaIpcMemHandle_t, hipIpcMemHandle_t: 64 bytes each). */
typedef struct courier_gpu_ipc_handle_v1 {
  uint8_t bytes[64];
} courier_gpu_ipc_handle_v1;

/* Minor 1. One FIFO channel as the device sees it (the C form of
 * courier::DeviceChannel, include/courier/device_channel.hpp; addresses are
 * device addresses). */
typedef struct courier_gpu_channel_v1 {
  void* slots;               /* depth 16-byte TransferCmd slots, mapped host memory */
  void* control;             /* courier::FifoControl, mapped host memory */
  uint64_t* head;            /* next ticket, device memory */
  uint64_t* completed_cache; /* producers' copy of control->completed, device memory */
  uint32_t depth_mask;
  uint32_t max_inflight;
  uint32_t channel_id;
  uint32_t reserved;
  uint64_t timeout_ns;
} courier_gpu_channel_v1;

/* How run_fifo_producers' threads push (courier_gpu_fifo_producers_v1.mode). */
#define COURIER_GPU_PUSH_WARP 0   /* the lanes of a warp reserve together: one fence per warp */
#define COURIER_GPU_PUSH_THREAD 1 /* every thread reserves and fences alone */

/* Minor 1. A self-test and benchmark kernel: `blocks` x `threads` producers;
 * producer p (= block * threads + thread) pushes `commands_per_thread` WRITE
 * commands to channel (block % num_channels), all with dst_rank `dst_rank`,
 * window 0, src_offset p, dst_offset = its running index 0, 1, ... and a
 * length that is a checksum of both (courier::device::selftest_length), so a
 * consumer can prove that nothing was lost, duplicated, reordered within a
 * producer or torn. */
typedef struct courier_gpu_fifo_producers_v1 {
  uint32_t struct_size;
  int32_t device;
  const courier_gpu_channel_v1* channels; /* host array of num_channels */
  uint32_t num_channels;
  uint32_t blocks;
  uint32_t threads; /* per block */
  uint32_t mode;    /* COURIER_GPU_PUSH_* */
  uint64_t commands_per_thread;
  uint32_t dst_rank;
  uint32_t use_graph;  /* 1: capture the launch in a graph and launch that */
  int32_t push_status; /* out: first non-ok courier::PushStatus, 0 when all were pushed */
  uint32_t reserved;
  uint64_t elapsed_ns; /* out: device clock from the first push to the last */
} courier_gpu_fifo_producers_v1;

/* What run_fifo_round_trips measures (courier_gpu_fifo_round_trips_v1.mode). */
#define COURIER_GPU_ROUND_TRIP_COMMAND 0 /* push one command, wait for its completion */
#define COURIER_GPU_ROUND_TRIP_FLAG 1    /* write `ping`, wait for the host to echo it in `pong` */

/* Minor 1. One device thread runs `iterations` round trips and records each
 * one's device-clock duration in ns into samples (device memory,
 * `iterations` entries). FLAG mode is the baseline: the device stores i + 1
 * into *ping (mapped host memory) and waits until *pong == i + 1, which a host
 * thread echoes; it needs no channel. */
typedef struct courier_gpu_fifo_round_trips_v1 {
  uint32_t struct_size;
  int32_t device;
  courier_gpu_channel_v1 channel; /* COMMAND mode */
  uint32_t mode;
  uint32_t iterations;
  uint64_t* ping; /* FLAG mode, mapped host memory (device addresses) */
  uint64_t* pong;
  uint64_t* samples;
  int32_t push_status; /* out */
  uint32_t reserved;
} courier_gpu_fifo_round_trips_v1;

/* Minor 1. Lists of TransferCmds pushed from the device, for tools and
 * tests that drive a channel from real device code: device thread i pushes
 * lists[i].commands in order into lists[i].channel (push_batch, up to 8 at a
 * time) and then waits until its last command completed. */
typedef struct courier_gpu_command_list_v1 {
  courier_gpu_channel_v1 channel;
  const void* commands; /* host array of `count` 16-byte TransferCmds */
  uint32_t count;
  int32_t push_status; /* out: courier::PushStatus of this list, 0 = ok */
} courier_gpu_command_list_v1;

typedef struct courier_gpu_command_lists_v1 {
  uint32_t struct_size;
  int32_t device;
  courier_gpu_command_list_v1* lists; /* host array */
  uint32_t num_lists;
  uint32_t reserved;
} courier_gpu_command_lists_v1;

/* Minor 1. get_dispatch_layout on the device (docs/ep.md): for topk_idx
 * [num_tokens, topk] (int64, -1 = no expert; experts spread evenly, rank r
 * holding [r * E/R, (r + 1) * E/R)), count tokens per rank (a token once per
 * rank) and per expert, and mark is_token_in_rank [num_tokens, num_ranks].
 * All pointers are device memory; the two count arrays and *first_invalid
 * must be zero on entry. An index outside [-1, num_experts) is skipped and
 * the first one seen is recorded in *first_invalid as
 * ((token + 1) << 32) | k. */
typedef struct courier_gpu_ep_layout_v1 {
  uint32_t struct_size;
  int32_t device;
  const int64_t* topk_idx;
  uint32_t num_tokens;
  uint32_t topk;
  uint32_t num_experts;
  uint32_t num_ranks;
  int32_t* num_tokens_per_rank;   /* [num_ranks] */
  int32_t* num_tokens_per_expert; /* [num_experts] */
  uint8_t* is_token_in_rank;      /* [num_tokens, num_ranks], 0 or 1 */
  uint64_t* first_invalid;
} courier_gpu_ep_layout_v1;

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

  /* ---- minor 1 (read only when header.struct_size covers them) ---- */
  /* Device memory for other processes of the host (COURIER_GPU_CAP_IPC):
   * export a handle for a mem_alloc pointer, import a peer's handle (the
   * mapping lives until ipc_close). */
  int (*ipc_export)(void* backend, void* ptr, courier_gpu_ipc_handle_v1* handle);
  int (*ipc_import)(void* backend, int device, const courier_gpu_ipc_handle_v1* handle, void** ptr);
  int (*ipc_close)(void* backend, void* ptr);
  /* A dmabuf file descriptor covering [ptr, ptr + bytes) of device memory,
   * for NIC registration (COURIER_GPU_CAP_DMABUF); *offset is ptr's offset
   * in it. The caller closes the fd. */
  int (*dmabuf_export)(void* backend, void* ptr, size_t bytes, int* fd, uint64_t* offset);
  /* Self-test and benchmark kernels (COURIER_GPU_CAP_FIFO_KERNELS); both
   * return once the kernel finished. */
  int (*run_fifo_producers)(void* backend, courier_gpu_fifo_producers_v1* job);
  int (*run_fifo_round_trips)(void* backend, courier_gpu_fifo_round_trips_v1* job);
  /* Pushes command lists from device threads and waits for them
   * (COURIER_GPU_CAP_FIFO_KERNELS). */
  int (*run_command_lists)(void* backend, courier_gpu_command_lists_v1* job);
  /* Expert-parallel kernels (COURIER_GPU_CAP_EP_KERNELS); return once done. */
  int (*run_ep_layout)(void* backend, const courier_gpu_ep_layout_v1* job);
} courier_gpu_plugin_v1;

typedef const courier_gpu_plugin_v1* (*courier_gpu_backend_v1_fn)(void);

#ifdef __cplusplus
}
#endif
#endif
