/* Courier NIC backend ABI, major version 1.
 *
 * A NIC backend is a shared object libcourier-nic-NAME.so exporting
 *
 *     const courier_nic_plugin_v1 *courier_nic_backend_v1(void);
 *
 * Rules (see docs/plugin-abi.md):
 *  - the struct opens with courier_plugin_header; abi_major must be 1;
 *  - additive changes append fields and bump abi_minor; the core reads only
 *    up to header.struct_size and treats missing trailing entries as absent;
 *  - every call returns int: COURIER_OK, COURIER_IN_PROGRESS or -errno;
 *    last_error() explains the most recent failure on the calling thread;
 *  - no C++ types, exceptions or RTTI cross this boundary.
 *
 * Threading: an endpoint is driven by one thread at a time (the proxy thread
 * that owns it). Different endpoints of one backend may be used concurrently.
 */
#ifndef COURIER_ABI_NIC_V1_H
#define COURIER_ABI_NIC_V1_H

#include "courier/abi/plugin_header.h"

#ifdef __cplusplus
extern "C" {
#endif

#define COURIER_NIC_ABI_MAJOR 1
#define COURIER_NIC_ABI_MINOR 0
#define COURIER_NIC_SYMBOL_V1 "courier_nic_backend_v1"

/* Capability bits (courier_nic_props_v1.caps). */
#define COURIER_NIC_CAP_RMA_WRITE (1u << 0)         /* one-sided write */
#define COURIER_NIC_CAP_WRITE_IMM (1u << 1)         /* write with immediate data */
#define COURIER_NIC_CAP_ORDERED_WRITES (1u << 2)    /* writes to one peer land in post order */
#define COURIER_NIC_CAP_DELIVERY_COMPLETE (1u << 3) /* TX completion => remote memory visible */
#define COURIER_NIC_CAP_IMM_SOURCE (1u << 4)        /* RX_IMM completions name the sender */
#define COURIER_NIC_CAP_LOOPBACK (1u << 5)          /* a rank may write to itself */
/* Writes land and complete without the target calling poll() (the NIC or an
 * auto-progress provider moves the data). Without it the target's proxy must
 * keep polling, so it may not sleep while idle. */
#define COURIER_NIC_CAP_PASSIVE_TARGET (1u << 6)

/* Immutable description of a backend instance, filled by query(). */
typedef struct courier_nic_props_v1 {
  uint32_t struct_size;    /* set by the caller to sizeof(courier_nic_props_v1) */
  uint32_t caps;           /* COURIER_NIC_CAP_* */
  uint32_t atomic_ops;     /* supported atomic operations (bitmask, defined by a later minor) */
  uint32_t atomic_native;  /* subset of atomic_ops executed by the NIC itself */
  uint32_t imm_bytes;      /* width of immediate data in bytes (0 when unsupported) */
  uint32_t mem_kinds;      /* COURIER_MEM_* the backend can register */
  uint64_t max_msg_size;   /* largest single write */
  uint32_t max_ep_name;    /* bytes needed for an endpoint name */
  uint32_t latency_ns;     /* nominal half round trip, for scoring */
  uint32_t bandwidth_mbps; /* nominal per-endpoint bandwidth, for scoring */
  uint32_t reserved;
  char device[64];      /* e.g. "shm", "tcp;ofi_rxm", "mlx5_0" */
  char pci_address[32]; /* "0000:3b:00.0", or "" for software transports */
} courier_nic_props_v1;

/* Endpoint creation parameters. */
typedef struct courier_nic_ep_attr_v1 {
  uint32_t struct_size;
  uint32_t tx_depth; /* writes in flight this endpoint must accept */
  uint32_t rx_depth; /* immediate-data completions it must buffer */
  uint32_t flags;    /* reserved, 0 */
} courier_nic_ep_attr_v1;

/* What a peer needs to write into a registered region. `key` and `base` are
 * opaque to the core: it passes them back into post_write unchanged. */
typedef struct courier_nic_rkey_v1 {
  uint64_t key;
  uint64_t base;
} courier_nic_rkey_v1;

/* Flags of courier_nic_write_v1. */
#define COURIER_NIC_WRITE_IMM (1u << 0) /* deliver `imm` to the target's poll() */

/* One write: local registered region + offset -> remote region + offset. */
typedef struct courier_nic_write_v1 {
  uint32_t peer;  /* destination rank (index into the connect() table) */
  uint32_t flags; /* COURIER_NIC_WRITE_* */
  void* local_mr; /* from mr_register on this endpoint */
  uint64_t local_offset;
  uint64_t length;
  courier_nic_rkey_v1 remote; /* the peer's key for its region */
  uint64_t remote_offset;
  uint64_t imm;    /* immediate data (low imm_bytes bytes are carried) */
  uint64_t cookie; /* returned in the TX completion */
} courier_nic_write_v1;

/* Completion kinds. */
#define COURIER_NIC_COMP_TX 1     /* a posted write completed (cookie is valid) */
#define COURIER_NIC_COMP_RX_IMM 2 /* a peer's write with immediate data landed here */

typedef struct courier_nic_completion_v1 {
  uint32_t kind;  /* COURIER_NIC_COMP_* */
  int32_t status; /* COURIER_OK or -errno */
  uint32_t peer;  /* RX_IMM: sender rank, or UINT32_MAX without CAP_IMM_SOURCE */
  uint32_t reserved;
  uint64_t cookie; /* TX: cookie of the write */
  uint64_t imm;    /* RX_IMM: the immediate data */
  uint64_t length; /* RX_IMM: bytes written by that write */
} courier_nic_completion_v1;

typedef struct courier_nic_plugin_v1 {
  courier_plugin_header header;
  const char* description;

  /* Knobs this backend reads through get_env (may be NULL when none). */
  const courier_knob_v1* knobs;
  uint32_t num_knobs;
  uint32_t reserved;

  /* Probe the hardware and open the backend. On failure returns -errno and
   * last_error(NULL) names the reason (e.g. "no RDMA device found"). */
  int (*init)(const courier_host_services_v1* host, void** backend);
  void (*fini)(void* backend);
  /* Explains the most recent failure on this thread; never NULL. */
  const char* (*last_error)(void* backend);
  int (*query)(void* backend, courier_nic_props_v1* props);

  int (*ep_open)(void* backend, const courier_nic_ep_attr_v1* attr, void** ep);
  int (*ep_close)(void* ep);
  /* Copies the endpoint's address into buf; *len is capacity in, size out. */
  int (*ep_name)(void* ep, void* buf, size_t* len);
  /* Installs peer addresses: names[i * stride] is rank i's endpoint name. */
  int (*ep_connect)(void* ep, uint32_t num_peers, const void* names, size_t stride);

  /* Registers [addr, addr+len) of memory kind `mem_kind` for remote writes
   * and as a local source. The rkey is what peers pass to post_write. */
  int (*mr_register)(void* ep, void* addr, size_t len, uint32_t mem_kind, void** mr,
                     courier_nic_rkey_v1* rkey);
  int (*mr_deregister)(void* mr);

  /* Posts one write. -EAGAIN: the endpoint is full; poll and retry. */
  int (*post_write)(void* ep, const courier_nic_write_v1* write);
  /* Reaps up to max completions; returns how many (>= 0) or -errno. Also
   * drives progress for providers that need it. */
  int (*poll)(void* ep, courier_nic_completion_v1* out, uint32_t max);
} courier_nic_plugin_v1;

typedef const courier_nic_plugin_v1* (*courier_nic_backend_v1_fn)(void);

#ifdef __cplusplus
}
#endif
#endif
