/* libcourier-nic-mock.so: an ABI-valid plugin whose init() fails the way a
 * backend on a machine without its hardware does. The registry lists it as
 * usable; opening it fails with "mock: no device found". */
#include "stub_nic.h"

static const char* mock_last_error(void* backend) {
  (void)backend;
  return "mock: no device found";
}

static int mock_init(const courier_host_services_v1* host, void** backend) {
  host->log(host->ctx, COURIER_LOG_DEBUG, "mock", "probing for a device that is never there");
  *backend = NULL;
  return -ENODEV;
}

static const courier_nic_plugin_v1 plugin = {
    .header = STUB_NIC_HEADER("mock"),
    STUB_NIC_ENTRIES,
    .init = mock_init,
    .last_error = mock_last_error,
};

TEST_PLUGIN_EXPORT const courier_nic_plugin_v1* courier_nic_backend_v1(void) { return &plugin; }
