/* libcourier-nic-nosymbol.so: a perfectly good shared object that is not a
 * Courier plugin. Expected: "not a Courier plugin: no courier_nic_backend_v1
 * symbol". */
#define TEST_PLUGIN_EXPORT __attribute__((visibility("default")))

TEST_PLUGIN_EXPORT int unrelated_library_function(int x) { return x + 1; }
