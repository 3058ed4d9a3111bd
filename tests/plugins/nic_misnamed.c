/* libcourier-nic-misnamed.so: its struct calls itself "somebody-else", so
 * the file name and the plugin disagree. Expected: "its struct is named
 * 'somebody-else' but the file name says 'misnamed'". */
#include "stub_nic.h"

static const courier_nic_plugin_v1 plugin = {
    .header = STUB_NIC_HEADER("somebody-else"),
    STUB_NIC_ENTRIES,
};

TEST_PLUGIN_EXPORT const courier_nic_plugin_v1* courier_nic_backend_v1(void) { return &plugin; }
