/* libcourier-gpu-sim.so: a GPU backend whose "device memory" is host memory,
 * so the registry's GPU-side selection has a good plugin to choose.
 *
 * The same source is built under other names (SIM_GPU_NAME): as a stand-in
 * "host" in the override directory (ordering and shadowing tests), and as
 * libcourier-nic-wrongkind.so (a GPU plugin under a NIC file name).
 *
 * It runs no kernels: without COURIER_GPU_CAP_HOST_KERNELS the ABI asks
 * launch_host_kernel to return -ENOTSUP.
 *
 * Built with SIM_GPU_DMABUF it is instead a current-minor plugin that
 * claims COURIER_GPU_CAP_DMABUF and "exports" a range as a memfd of the
 * pages that hold it (no real dmabuf exists without a GPU driver), so the
 * tests can follow the core's host services into a GPU plugin and back.
 *
 * Built with SIM_GPU_DEVICES=N it reports N devices and names, as its device,
 * the GPU the core chose for the rank (host services' gpu_device), or says
 * none is chosen yet: the tests see when and what the core answers.
 */
#define _GNU_SOURCE /* memfd_create */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "courier/abi/gpu_v1.h"

#define TEST_PLUGIN_EXPORT __attribute__((visibility("default")))

#ifndef SIM_GPU_NAME
#define SIM_GPU_NAME "sim"
#endif
#ifndef SIM_GPU_DEVICES
#define SIM_GPU_DEVICES 1
#endif

static _Thread_local char sim_error[256] = SIM_GPU_NAME ": no error";

static int sim_fail(int status, const char* message) {
  snprintf(sim_error, sizeof sim_error, "%s: %s", SIM_GPU_NAME, message);
  return status;
}

static int sim_init(const courier_host_services_v1* host, void** backend) {
  /* The host table outlives the backend, so it can serve as the handle. */
  *backend = (void*)host;
  return COURIER_OK;
}

static void sim_fini(void* backend) { (void)backend; }

static const char* sim_last_error(void* backend) {
  (void)backend;
  return sim_error;
}

static int sim_query(void* backend, courier_gpu_props_v1* props) {
  const courier_host_services_v1* host = backend;
  (void)host;
  if (props->struct_size < sizeof(courier_gpu_props_v1)) {
    return sim_fail(-EINVAL, "props->struct_size is smaller than ABI 1.0's props");
  }
  memset(props, 0, sizeof *props);
  props->struct_size = sizeof *props;
  props->caps = COURIER_GPU_CAP_MAPPED_HOST;
#ifdef SIM_GPU_DMABUF
  props->caps |= COURIER_GPU_CAP_DMABUF;
#endif
  props->device_count = SIM_GPU_DEVICES;
  props->warp_size = 1;
  props->mem_kind = COURIER_MEM_HOST;
#if SIM_GPU_DEVICES > 1
  uint32_t device = 0;
  if (COURIER_HOST_HAS(host, gpu_device) && host->gpu_device(host->ctx, &device) == COURIER_OK) {
    snprintf(props->device_name, sizeof props->device_name, "%s GPU %u of %d", SIM_GPU_NAME,
             (unsigned)device, SIM_GPU_DEVICES);
  } else {
    snprintf(props->device_name, sizeof props->device_name, "%s: no GPU chosen yet", SIM_GPU_NAME);
  }
#else
  snprintf(props->device_name, sizeof props->device_name, "%s (host memory)", SIM_GPU_NAME);
#endif
  return COURIER_OK;
}

static int sim_mem_alloc(void* backend, int device, size_t bytes, void** ptr) {
  const courier_host_services_v1* host = backend;
  if (device != 0) return sim_fail(-ENODEV, "only device 0 exists");
  *ptr = host->alloc(host->ctx, bytes, 256);
  return *ptr != NULL ? COURIER_OK : sim_fail(-ENOMEM, "out of memory");
}

static int sim_mem_free(void* backend, int device, void* ptr) {
  const courier_host_services_v1* host = backend;
  (void)device;
  host->free(host->ctx, ptr);
  return COURIER_OK;
}

static int sim_host_alloc_mapped(void* backend, size_t bytes, void** host_ptr, void** device_ptr) {
  int status = sim_mem_alloc(backend, 0, bytes, host_ptr);
  *device_ptr = *host_ptr;
  return status;
}

static int sim_host_free_mapped(void* backend, void* host_ptr) {
  return sim_mem_free(backend, 0, host_ptr);
}

static int sim_memcpy_sync(void* backend, void* dst, const void* src, size_t bytes) {
  (void)backend;
  memcpy(dst, src, bytes);
  return COURIER_OK;
}

static int sim_launch_host_kernel(void* backend, const courier_host_kernel_launch_v1* launch) {
  (void)backend;
  (void)launch;
  return sim_fail(-ENOTSUP, "runs no kernels (no COURIER_GPU_CAP_HOST_KERNELS)");
}

#ifdef SIM_GPU_DMABUF
/* A memfd as long as the pages holding [ptr, ptr + bytes); *offset is ptr's
 * offset from the first, as a GPU backend's dmabuf_export answers. */
static int sim_dmabuf_export(void* backend, void* ptr, size_t bytes, int* fd, uint64_t* offset) {
  (void)backend;
  if (ptr == NULL || bytes == 0) return sim_fail(-EINVAL, "dmabuf_export: NULL or empty range");
  const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
  const uintptr_t address = (uintptr_t)ptr;
  const uintptr_t start = address & ~(page - 1);
  const uintptr_t end = (address + bytes + page - 1) & ~(page - 1);
  int memfd = memfd_create(SIM_GPU_NAME "-dmabuf", MFD_CLOEXEC);
  if (memfd < 0) return sim_fail(-errno, "dmabuf_export: memfd_create failed");
  if (ftruncate(memfd, (off_t)(end - start)) != 0) {
    int error = errno;
    close(memfd);
    return sim_fail(-error, "dmabuf_export: ftruncate of the memfd failed");
  }
  *fd = memfd;
  *offset = address - start;
  return COURIER_OK;
}

/* A current-minor plugin: its entries in the runtime part, and the same in
 * the flat fields older cores read; no selftest or EP part (entries it
 * lacks are NULL, their capabilities unclaimed). */
static const courier_gpu_runtime_part_v1 runtime = {
    .struct_size = sizeof(courier_gpu_runtime_part_v1),
    .mem_alloc = sim_mem_alloc,
    .mem_free = sim_mem_free,
    .host_alloc_mapped = sim_host_alloc_mapped,
    .host_free_mapped = sim_host_free_mapped,
    .memcpy_sync = sim_memcpy_sync,
    .launch_host_kernel = sim_launch_host_kernel,
    .dmabuf_export = sim_dmabuf_export,
};

static const courier_gpu_plugin_v1 plugin = {
    .header = {sizeof(courier_gpu_plugin_v1), COURIER_GPU_ABI_MAJOR, COURIER_GPU_ABI_MINOR,
               SIM_GPU_NAME},
    .dmabuf_export = sim_dmabuf_export,
    .runtime = &runtime,
#else
/* Built as an ABI 1.0 plugin (its struct ends before ipc_export), so the
 * tests prove that plugins older than minor 1 keep loading. */
static const courier_gpu_plugin_v1 plugin = {
    .header = {offsetof(courier_gpu_plugin_v1, ipc_export), COURIER_GPU_ABI_MAJOR, 0, SIM_GPU_NAME},
#endif
    .description = "host-memory GPU stand-in for tests",
    .init = sim_init,
    .fini = sim_fini,
    .last_error = sim_last_error,
    .query = sim_query,
    .mem_alloc = sim_mem_alloc,
    .mem_free = sim_mem_free,
    .host_alloc_mapped = sim_host_alloc_mapped,
    .host_free_mapped = sim_host_free_mapped,
    .memcpy_sync = sim_memcpy_sync,
    .launch_host_kernel = sim_launch_host_kernel,
};

TEST_PLUGIN_EXPORT const courier_gpu_plugin_v1* courier_gpu_backend_v1(void) { return &plugin; }
