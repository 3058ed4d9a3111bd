/* libcourier-nic-short.so: its struct_size covers the header only (16 bytes),
 * as if it predated every entry point. Expected: "struct_size 16 is shorter
 * than the ... bytes ABI 1.0 requires". */
#include "stub_nic.h"

static const courier_nic_plugin_v1 plugin = {
    .header = {sizeof(courier_plugin_header), COURIER_NIC_ABI_MAJOR, COURIER_NIC_ABI_MINOR,
               "short"},
    STUB_NIC_ENTRIES,
};

TEST_PLUGIN_EXPORT const courier_nic_plugin_v1* courier_nic_backend_v1(void) { return &plugin; }
