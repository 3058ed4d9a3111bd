/* libcourier-nic-nullstruct.so: the entry symbol exists but returns NULL.
 * Expected: "courier_nic_backend_v1() returned NULL". */
#include "stub_nic.h"

TEST_PLUGIN_EXPORT const courier_nic_plugin_v1* courier_nic_backend_v1(void) { return NULL; }
