/* libcourier-nic-unresolved.so: needs a function no library provides, as a
 * plugin built against a missing vendor library would. RTLD_NOW makes
 * dlopen fail at once. Expected: "not loadable: ... undefined symbol". */
#include "stub_nic.h"

extern int courier_test_function_nobody_defines(void);

static int init_calling_missing(const courier_host_services_v1* host, void** backend) {
  (void)host;
  *backend = NULL;
  return courier_test_function_nobody_defines();
}

static const courier_nic_plugin_v1 plugin = {
    .header = STUB_NIC_HEADER("unresolved"),
    STUB_NIC_ENTRIES,
    .init = init_calling_missing,
};

TEST_PLUGIN_EXPORT const courier_nic_plugin_v1* courier_nic_backend_v1(void) { return &plugin; }
