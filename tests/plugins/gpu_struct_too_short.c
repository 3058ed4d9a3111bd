/* libcourier-gpu-short.so: a GPU plugin whose struct_size stops just before
 * launch_host_kernel, the last entry ABI 1.0 requires: one pointer short.
 * Expected (LP64): "struct_size 112 is shorter than the 120 bytes ABI 1.0
 * requires". */
#include <errno.h>
#include <stddef.h>

#include "courier/abi/gpu_v1.h"

#define TEST_PLUGIN_EXPORT __attribute__((visibility("default")))

static int short_init(const courier_host_services_v1* host, void** backend) {
  (void)host;
  *backend = NULL;
  return -ENOTSUP;
}
static void short_fini(void* backend) { (void)backend; }
static const char* short_last_error(void* backend) {
  (void)backend;
  return "short: never initializes";
}
static int short_query(void* backend, courier_gpu_props_v1* props) {
  (void)backend;
  (void)props;
  return -ENOTSUP;
}

static const courier_gpu_plugin_v1 plugin = {
    .header = {offsetof(courier_gpu_plugin_v1, launch_host_kernel), COURIER_GPU_ABI_MAJOR,
               COURIER_GPU_ABI_MINOR, "short"},
    .init = short_init,
    .fini = short_fini,
    .last_error = short_last_error,
    .query = short_query,
};

TEST_PLUGIN_EXPORT const courier_gpu_plugin_v1* courier_gpu_backend_v1(void) { return &plugin; }
