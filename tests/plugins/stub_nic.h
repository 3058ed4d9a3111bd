/* Entry points shared by the deliberately broken NIC test plugins.
 *
 * Each broken plugin is a complete, valid ABI 1 plugin except for the one
 * defect its file is named after, so the only reason the registry can give
 * for rejecting it is that defect. The entries do nothing: the registry never
 * calls them on a plugin it rejects.
 */
#ifndef COURIER_TEST_STUB_NIC_H
#define COURIER_TEST_STUB_NIC_H

#include <errno.h>

#include "courier/abi/nic_v1.h"

/* Test plugins are built with hidden visibility, like real ones. */
#define TEST_PLUGIN_EXPORT __attribute__((visibility("default")))

static inline int stub_init(const courier_host_services_v1* host, void** backend) {
  (void)host;
  *backend = NULL;
  return COURIER_OK;
}
static inline void stub_fini(void* backend) { (void)backend; }
static inline const char* stub_last_error(void* backend) {
  (void)backend;
  return "stub: this test plugin does nothing";
}
static inline int stub_query(void* backend, courier_nic_props_v1* props) {
  (void)backend;
  (void)props;
  return -ENOTSUP;
}
static inline int stub_ep_open(void* backend, const courier_nic_ep_attr_v1* attr, void** ep) {
  (void)backend;
  (void)attr;
  (void)ep;
  return -ENOTSUP;
}
static inline int stub_ep_close(void* ep) {
  (void)ep;
  return -ENOTSUP;
}
static inline int stub_ep_name(void* ep, void* buf, size_t* len) {
  (void)ep;
  (void)buf;
  (void)len;
  return -ENOTSUP;
}
static inline int stub_ep_connect(void* ep, uint32_t num_peers, const void* names, size_t stride) {
  (void)ep;
  (void)num_peers;
  (void)names;
  (void)stride;
  return -ENOTSUP;
}
static inline int stub_mr_register(void* ep, void* addr, size_t len, uint32_t mem_kind, void** mr,
                                   courier_nic_rkey_v1* rkey) {
  (void)ep;
  (void)addr;
  (void)len;
  (void)mem_kind;
  (void)mr;
  (void)rkey;
  return -ENOTSUP;
}
static inline int stub_mr_deregister(void* mr) {
  (void)mr;
  return -ENOTSUP;
}
static inline int stub_post_write(void* ep, const courier_nic_write_v1* write) {
  (void)ep;
  (void)write;
  return -ENOTSUP;
}
static inline int stub_poll(void* ep, courier_nic_completion_v1* out, uint32_t max) {
  (void)ep;
  (void)out;
  (void)max;
  return -ENOTSUP;
}

/* Designated initializers for every entry point after the header. A plugin
 * spells out its header (often the thing under test) and may override one
 * entry after this list to introduce its defect. */
#define STUB_NIC_ENTRIES                                                             \
  .description = "registry test plugin", .init = stub_init, .fini = stub_fini,       \
  .last_error = stub_last_error, .query = stub_query, .ep_open = stub_ep_open,       \
  .ep_close = stub_ep_close, .ep_name = stub_ep_name, .ep_connect = stub_ep_connect, \
  .mr_register = stub_mr_register, .mr_deregister = stub_mr_deregister,              \
  .post_write = stub_post_write, .poll = stub_poll

/* The header of a valid ABI 1.0 NIC plugin called `name`. */
#define STUB_NIC_HEADER(name) \
  { sizeof(courier_nic_plugin_v1), COURIER_NIC_ABI_MAJOR, COURIER_NIC_ABI_MINOR, name }

#endif
