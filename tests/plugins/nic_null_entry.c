/* libcourier-nic-nullentry.so: post_write is NULL. Expected: "required entry
 * 'post_write' is NULL". */
#include "stub_nic.h"

static const courier_nic_plugin_v1 plugin = {
    .header = STUB_NIC_HEADER("nullentry"),
    STUB_NIC_ENTRIES,
    .post_write = NULL,
};

TEST_PLUGIN_EXPORT const courier_nic_plugin_v1* courier_nic_backend_v1(void) { return &plugin; }
