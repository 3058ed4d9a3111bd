/* libcourier-nic-v2only.so: built for a future Courier that speaks NIC ABI 2
 * only. Expected: "exports ABI major 2 only". The registry never calls the
 * v2 symbol (it cannot know its signature), so this returns only a header. */
#include "stub_nic.h"

static const courier_plugin_header header = {sizeof(courier_plugin_header), 2, 0, "v2only"};

TEST_PLUGIN_EXPORT const courier_plugin_header* courier_nic_backend_v2(void) { return &header; }
