/* libcourier-nic-abimajor2.so: exported under the v1 symbol, but its struct
 * says ABI major 2. Expected: "reports ABI major 2 in its struct". */
#include "stub_nic.h"

static const courier_nic_plugin_v1 plugin = {
    .header = {sizeof(courier_nic_plugin_v1), 2, 0, "abimajor2"},
    STUB_NIC_ENTRIES,
};

TEST_PLUGIN_EXPORT const courier_nic_plugin_v1* courier_nic_backend_v1(void) { return &plugin; }
