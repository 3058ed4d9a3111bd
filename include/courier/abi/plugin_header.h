/* Courier plugin ABI: the header every plugin struct opens with.
 *
 * This layout is frozen forever: the registry reads it before it knows which
 * ABI major the plugin speaks. Every plugin struct of every major version
 * starts with exactly these fields, in this order.
 */
#ifndef COURIER_ABI_PLUGIN_HEADER_H
#define COURIER_ABI_PLUGIN_HEADER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct courier_plugin_header {
  uint32_t struct_size; /* sizeof the whole plugin struct as the plugin was built */
  uint16_t abi_major;   /* must equal the major the symbol name promises */
  uint16_t abi_minor;   /* additive revisions; the core reads only up to struct_size */
  const char* name;     /* short backend name, e.g. "ofi"; matches the file name */
} courier_plugin_header;

/* Status codes returned by every plugin entry point. Negative values are
 * negated errno codes (-EINVAL, -ENOMEM, -EAGAIN, -ENOTSUP, ...); details are
 * available from the plugin's last_error(). */
#define COURIER_OK 0
#define COURIER_IN_PROGRESS 1

/* Log levels passed to courier_host_services_v1.log. */
#define COURIER_LOG_ERROR 0
#define COURIER_LOG_WARN 1
#define COURIER_LOG_INFO 2
#define COURIER_LOG_DEBUG 3
#define COURIER_LOG_TRACE 4

/* Services the core hands to a plugin in init(), so that plugins never link
 * against the core. The first four function pointers are always non-NULL; later
 * additions are tested with COURIER_HOST_HAS.
 *
 * Host services minors (the table carries no number: its struct_size says
 * which additions a core has, COURIER_HOST_HAS tests them):
 *   minor 0  log, get_env, alloc, free
 *   minor 1  dmabuf_export
 *   minor 2  gpu_device */
typedef struct courier_host_services_v1 {
  uint32_t struct_size;
  uint32_t reserved;
  void* ctx;
  void (*log)(void* ctx, int level, const char* backend, const char* message);
  /* Returns the value of an environment variable, or NULL when unset. */
  const char* (*get_env)(void* ctx, const char* name);
  void* (*alloc)(void* ctx, size_t size, size_t alignment);
  void (*free)(void* ctx, void* ptr);
  /* Minor 1, added after the first release: a plugin reads it only when
   * struct_size covers it (COURIER_HOST_HAS(host, dmabuf_export)).
   *
   * Exports the GPU memory [addr, addr+len) of the job's GPU backend as a
   * dmabuf: on success returns COURIER_OK with *fd a new file descriptor the
   * caller owns (and closes) and *offset the position of addr within that
   * dmabuf. -EOPNOTSUPP when the GPU backend, driver or memory cannot
   * (host memory, a GPU backend without dmabuf); -EINVAL for a range that is
   * not one GPU allocation. NIC backends register GPU memory through it
   * (ibv_reg_dmabuf_mr) before falling back to peer-memory registration. */
  int (*dmabuf_export)(void* ctx, const void* addr, size_t len, int* fd, uint64_t* offset);
  /* Minor 2: a plugin reads it only when COURIER_HOST_HAS(host, gpu_device).
   *
   * The GPU this rank uses, chosen once by the core (COURIER_GPU_DEVICE, else
   * the local rank modulo the GPU backend's device count): COURIER_OK with
   * *device its index among the GPU backend's devices. -EAGAIN while no GPU
   * is chosen: the GPU backend's init and first query run before the choice
   * (it needs their device count), so a GPU backend asks again when it needs
   * the device (the core queries it once more after the choice); NIC
   * backends initialize after it and always get an answer from a Context.
   * Services outside a Context (courier-info, tools, tests) answer -EAGAIN
   * forever. -EINVAL for a NULL device. Plugins use this instead of reading
   * COURIER_GPU_DEVICE, and treat an index beyond the devices their runtime
   * sees as an error, never wrapping it. */
  int (*gpu_device)(void* ctx, uint32_t* device);
} courier_host_services_v1;

/* True when `host` (a courier_host_services_v1*) is large enough to carry
 * `field` and the entry is set: the way to test for services added later. */
#define COURIER_HOST_HAS(host, field)                                                          \
  ((host)->struct_size >= offsetof(courier_host_services_v1, field) + sizeof((host)->field) && \
   (host)->field != NULL)

/* A configuration knob a plugin reads through get_env. The core validates
 * enumerated and ranged knobs before init(), so a bad value stops start-up
 * with a message naming the variable, and shows all of them in courier-info. */
typedef struct courier_knob_v1 {
  const char* name;          /* e.g. "COURIER_OFI_PROVIDER" */
  const char* default_value; /* shown when unset */
  const char* allowed;       /* "a|b|c" enumeration, "min..max" integers, NULL free-form */
  const char* help;
} courier_knob_v1;

/* Memory kinds a backend allocates or registers (bitmask). */
#define COURIER_MEM_HOST (1u << 0)
#define COURIER_MEM_CUDA (1u << 1)
#define COURIER_MEM_ROCM (1u << 2)
#define COURIER_MEM_DMABUF (1u << 3)
#define COURIER_MEM_ODP (1u << 4)

#ifdef __cplusplus
}
#endif
#endif
