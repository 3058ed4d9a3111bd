/* libcourier-nic-sim.so: a small NIC backend that works everywhere, so that
 * the registry and selection tests have a good plugin beside the broken ones.
 *
 * "sim" moves bytes with memcpy between endpoints of one process: an
 * endpoint's name is its address, an rkey's base is the registered address.
 * It is a test double, not a transport: ranks in other processes cannot be
 * reached.
 *
 * Knob: COURIER_SIM_IMM_BYTES (4|8) sets the immediate-data width it reports,
 * which lets tests see both knob validation and get_env at work.
 */
#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "courier/abi/nic_v1.h"

#define TEST_PLUGIN_EXPORT __attribute__((visibility("default")))

/* Completions one endpoint buffers per direction. */
#define SIM_RING_SLOTS 256u

typedef struct sim_backend {
  const courier_host_services_v1* host;
  uint32_t imm_bytes;
} sim_backend;

typedef struct sim_ring {
  courier_nic_completion_v1 slots[SIM_RING_SLOTS];
  uint32_t head; /* next slot to read */
  uint32_t count;
} sim_ring;

typedef struct sim_ep {
  sim_backend* backend;
  /* TX completions are pushed and polled by the endpoint's own thread only;
   * RX completions are pushed by whichever thread writes to us. */
  sim_ring tx;
  pthread_mutex_t rx_lock;
  sim_ring rx;
  struct sim_ep** peers;
  uint32_t num_peers;
} sim_ep;

typedef struct sim_mr {
  sim_backend* backend;
  char* addr;
  size_t len;
} sim_mr;

static _Thread_local char sim_error[256] = "sim: no error";

static int sim_fail(int status, const char* message) {
  snprintf(sim_error, sizeof sim_error, "sim: %s", message);
  return status;
}

static void* sim_alloc(sim_backend* backend, size_t size) {
  const courier_host_services_v1* host = backend->host;
  void* memory = host->alloc(host->ctx, size, 64);
  if (memory != NULL) memset(memory, 0, size);
  return memory;
}

static void sim_free(sim_backend* backend, void* memory) {
  backend->host->free(backend->host->ctx, memory);
}

static int ring_push(sim_ring* ring, const courier_nic_completion_v1* completion) {
  if (ring->count == SIM_RING_SLOTS) return -EAGAIN;
  ring->slots[(ring->head + ring->count) % SIM_RING_SLOTS] = *completion;
  ring->count++;
  return COURIER_OK;
}

static uint32_t ring_pop(sim_ring* ring, courier_nic_completion_v1* out, uint32_t max) {
  uint32_t taken = 0;
  while (taken < max && ring->count > 0) {
    out[taken++] = ring->slots[ring->head];
    ring->head = (ring->head + 1) % SIM_RING_SLOTS;
    ring->count--;
  }
  return taken;
}

static int sim_init(const courier_host_services_v1* host, void** out) {
  sim_backend* backend = host->alloc(host->ctx, sizeof(sim_backend), 64);
  if (backend == NULL) return sim_fail(-ENOMEM, "out of memory");
  backend->host = host;
  /* The core validated the value against "4|8" before calling init. */
  const char* imm = host->get_env(host->ctx, "COURIER_SIM_IMM_BYTES");
  backend->imm_bytes = imm != NULL && strcmp(imm, "8") == 0 ? 8 : 4;
  host->log(host->ctx, COURIER_LOG_DEBUG, "sim", "initialized");
  *out = backend;
  return COURIER_OK;
}

static void sim_fini(void* backend) {
  sim_backend* self = backend;
  self->host->free(self->host->ctx, self);
}

static const char* sim_last_error(void* backend) {
  (void)backend;
  return sim_error;
}

static int sim_query(void* backend, courier_nic_props_v1* props) {
  sim_backend* self = backend;
  if (props->struct_size < sizeof(courier_nic_props_v1)) {
    return sim_fail(-EINVAL, "props->struct_size is smaller than ABI 1.0's props");
  }
  memset(props, 0, sizeof *props);
  props->struct_size = sizeof *props;
  props->caps = COURIER_NIC_CAP_RMA_WRITE | COURIER_NIC_CAP_WRITE_IMM |
                COURIER_NIC_CAP_ORDERED_WRITES | COURIER_NIC_CAP_DELIVERY_COMPLETE |
                COURIER_NIC_CAP_LOOPBACK;
  props->imm_bytes = self->imm_bytes;
  props->mem_kinds = COURIER_MEM_HOST;
  props->max_msg_size = (uint64_t)1 << 30;
  props->max_ep_name = sizeof(sim_ep*);
  props->latency_ns = 100;
  props->bandwidth_mbps = 10000;
  snprintf(props->device, sizeof props->device, "sim");
  return COURIER_OK;
}

static int sim_ep_open(void* backend, const courier_nic_ep_attr_v1* attr, void** out) {
  (void)attr;
  sim_ep* ep = sim_alloc(backend, sizeof(sim_ep));
  if (ep == NULL) return sim_fail(-ENOMEM, "out of memory for an endpoint");
  ep->backend = backend;
  pthread_mutex_init(&ep->rx_lock, NULL);
  *out = ep;
  return COURIER_OK;
}

static int sim_ep_close(void* endpoint) {
  sim_ep* ep = endpoint;
  pthread_mutex_destroy(&ep->rx_lock);
  if (ep->peers != NULL) sim_free(ep->backend, ep->peers);
  sim_free(ep->backend, ep);
  return COURIER_OK;
}

static int sim_ep_name(void* endpoint, void* buf, size_t* len) {
  if (*len < sizeof endpoint) {
    *len = sizeof endpoint;
    return sim_fail(-ENOSPC, "endpoint name buffer too small");
  }
  memcpy(buf, &endpoint, sizeof endpoint);
  *len = sizeof endpoint;
  return COURIER_OK;
}

static int sim_ep_connect(void* endpoint, uint32_t num_peers, const void* names, size_t stride) {
  sim_ep* ep = endpoint;
  sim_ep** peers = sim_alloc(ep->backend, num_peers * sizeof(sim_ep*) + 1);
  if (peers == NULL) return sim_fail(-ENOMEM, "out of memory for the peer table");
  for (uint32_t i = 0; i < num_peers; ++i) {
    memcpy(&peers[i], (const char*)names + (size_t)i * stride, sizeof(sim_ep*));
  }
  if (ep->peers != NULL) sim_free(ep->backend, ep->peers);
  ep->peers = peers;
  ep->num_peers = num_peers;
  return COURIER_OK;
}

static int sim_mr_register(void* endpoint, void* addr, size_t len, uint32_t mem_kind, void** out,
                           courier_nic_rkey_v1* rkey) {
  sim_ep* ep = endpoint;
  if (mem_kind != COURIER_MEM_HOST) return sim_fail(-ENOTSUP, "only host memory is supported");
  sim_mr* mr = sim_alloc(ep->backend, sizeof(sim_mr));
  if (mr == NULL) return sim_fail(-ENOMEM, "out of memory for a registration");
  mr->backend = ep->backend;
  mr->addr = addr;
  mr->len = len;
  rkey->key = (uint64_t)(uintptr_t)mr;
  rkey->base = (uint64_t)(uintptr_t)addr;
  *out = mr;
  return COURIER_OK;
}

static int sim_mr_deregister(void* region) {
  sim_mr* mr = region;
  sim_free(mr->backend, mr);
  return COURIER_OK;
}

static int sim_post_write(void* endpoint, const courier_nic_write_v1* write) {
  sim_ep* ep = endpoint;
  const sim_mr* local = write->local_mr;
  if (write->peer >= ep->num_peers) return sim_fail(-EINVAL, "peer rank out of range");
  if (write->local_offset + write->length > local->len) {
    return sim_fail(-EINVAL, "write runs past the end of the local region");
  }
  if (ep->tx.count == SIM_RING_SLOTS) return sim_fail(-EAGAIN, "TX completions not polled");
  sim_ep* target = ep->peers[write->peer];
  char* destination = (char*)(uintptr_t)write->remote.base + write->remote_offset;
  if (write->flags & COURIER_NIC_WRITE_IMM) {
    /* Deliver data and immediate together, or neither, so a full target
     * ring costs the caller nothing but a retry. */
    courier_nic_completion_v1 rx = {COURIER_NIC_COMP_RX_IMM, COURIER_OK, UINT32_MAX, 0, 0, 0, 0};
    uint64_t mask = ep->backend->imm_bytes == 8 ? UINT64_MAX : UINT32_MAX;
    rx.imm = write->imm & mask;
    rx.length = write->length;
    pthread_mutex_lock(&target->rx_lock);
    int status = target->rx.count == SIM_RING_SLOTS ? -EAGAIN : COURIER_OK;
    if (status == COURIER_OK) {
      memcpy(destination, local->addr + write->local_offset, write->length);
      ring_push(&target->rx, &rx);
    }
    pthread_mutex_unlock(&target->rx_lock);
    if (status != COURIER_OK) return sim_fail(status, "target's RX completions not polled");
  } else {
    memcpy(destination, local->addr + write->local_offset, write->length);
  }
  courier_nic_completion_v1 tx = {COURIER_NIC_COMP_TX, COURIER_OK, write->peer, 0, 0, 0, 0};
  tx.cookie = write->cookie;
  return ring_push(&ep->tx, &tx);
}

static int sim_poll(void* endpoint, courier_nic_completion_v1* out, uint32_t max) {
  sim_ep* ep = endpoint;
  uint32_t taken = ring_pop(&ep->tx, out, max);
  pthread_mutex_lock(&ep->rx_lock);
  taken += ring_pop(&ep->rx, out + taken, max - taken);
  pthread_mutex_unlock(&ep->rx_lock);
  return (int)taken;
}

static const courier_knob_v1 sim_knobs[] = {
    {"COURIER_SIM_IMM_BYTES", "4", "4|8", "immediate-data width the sim NIC reports, in bytes"},
};

static const courier_nic_plugin_v1 plugin = {
    /* Built as an ABI 1.0 plugin (its struct ends before post_atomic), so
     * the tests prove a 1.0 plugin keeps working with a newer core. */
    .header = {offsetof(courier_nic_plugin_v1, post_atomic), COURIER_NIC_ABI_MAJOR, 0, "sim"},
    .description = "in-process memcpy NIC for tests",
    .knobs = sim_knobs,
    .num_knobs = sizeof sim_knobs / sizeof sim_knobs[0],
    .init = sim_init,
    .fini = sim_fini,
    .last_error = sim_last_error,
    .query = sim_query,
    .ep_open = sim_ep_open,
    .ep_close = sim_ep_close,
    .ep_name = sim_ep_name,
    .ep_connect = sim_ep_connect,
    .mr_register = sim_mr_register,
    .mr_deregister = sim_mr_deregister,
    .post_write = sim_post_write,
    .poll = sim_poll,
};

TEST_PLUGIN_EXPORT const courier_nic_plugin_v1* courier_nic_backend_v1(void) { return &plugin; }
