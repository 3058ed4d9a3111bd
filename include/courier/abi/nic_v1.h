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
/* Minor 1 added atomics: the COURIER_NIC_ATOMIC_* bits, caps_with_atomics,
 * COURIER_NIC_EP_ATOMICS, courier_nic_atomic_v1 and post_atomic. */
/* Minor 2 added describe. */
/* Minor 3 added device claims: courier_nic_claim_v1, COURIER_NIC_CLAIM_*,
 * claims and num_claims. */
#define COURIER_NIC_ABI_MINOR 3
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
/* Reaches only peers on the same host (e.g. GPU copy engines): never chosen
 * by default when another backend initializes, and refused for a job whose
 * ranks span several hosts. A bit older cores ignore, so no minor bump. */
#define COURIER_NIC_CAP_HOST_LOCAL (1u << 7)
/* Registering memory pins nothing and costs about a table entry (copy
 * engines, software providers), so the core may register a caller's buffer
 * for one call and send from it rather than copy it into a registered area
 * first. A registration here also stays valid if the pages behind its
 * addresses change. A bit older cores ignore, so no minor bump. */
#define COURIER_NIC_CAP_CHEAP_REGISTRATION (1u << 8)

/* Atomic operations (courier_nic_props_v1.atomic_ops / atomic_native, and
 * courier_nic_atomic_v1.op). Operands are little-endian unsigned integers of
 * the op's width at an address aligned to that width; ADD wraps. */
#define COURIER_NIC_ATOMIC_ADD_U64 (1u << 0)       /* *p += operand */
#define COURIER_NIC_ATOMIC_FETCH_ADD_U64 (1u << 1) /* old = *p; *p += operand */
#define COURIER_NIC_ATOMIC_CAS_U64 (1u << 2)       /* old = *p; if old == compare: *p = operand */
#define COURIER_NIC_ATOMIC_ADD_U32 (1u << 8)
#define COURIER_NIC_ATOMIC_FETCH_ADD_U32 (1u << 9)
#define COURIER_NIC_ATOMIC_CAS_U32 (1u << 10)

/* Bytes an atomic op works on (8 or 4), or 0 when `op` is not exactly one
 * known COURIER_NIC_ATOMIC_* bit. */
static inline uint32_t courier_nic_atomic_width(uint32_t op) {
  switch (op) {
    case COURIER_NIC_ATOMIC_ADD_U64:
    case COURIER_NIC_ATOMIC_FETCH_ADD_U64:
    case COURIER_NIC_ATOMIC_CAS_U64:
      return 8;
    case COURIER_NIC_ATOMIC_ADD_U32:
    case COURIER_NIC_ATOMIC_FETCH_ADD_U32:
    case COURIER_NIC_ATOMIC_CAS_U32:
      return 4;
    default:
      return 0;
  }
}

/* "ADD_U64", ... for messages; "unknown op" otherwise. */
static inline const char* courier_nic_atomic_name(uint32_t op) {
  switch (op) {
    case COURIER_NIC_ATOMIC_ADD_U64:
      return "ADD_U64";
    case COURIER_NIC_ATOMIC_FETCH_ADD_U64:
      return "FETCH_ADD_U64";
    case COURIER_NIC_ATOMIC_CAS_U64:
      return "CAS_U64";
    case COURIER_NIC_ATOMIC_ADD_U32:
      return "ADD_U32";
    case COURIER_NIC_ATOMIC_FETCH_ADD_U32:
      return "FETCH_ADD_U32";
    case COURIER_NIC_ATOMIC_CAS_U32:
      return "CAS_U32";
    default:
      return "unknown op";
  }
}

/* Immutable description of a backend instance, filled by query(). The caller
 * sets struct_size; a backend writes no field beyond it. */
typedef struct courier_nic_props_v1 {
  uint32_t struct_size;    /* set by the caller to sizeof(courier_nic_props_v1) */
  uint32_t caps;           /* COURIER_NIC_CAP_* */
  uint32_t atomic_ops;     /* COURIER_NIC_ATOMIC_* that post_atomic carries out */
  uint32_t atomic_native;  /* subset of atomic_ops executed natively (NIC, or the provider
                              itself), not emulated over messages by a software layer */
  uint32_t imm_bytes;      /* width of immediate data in bytes (0 when unsupported) */
  uint32_t mem_kinds;      /* COURIER_MEM_* the backend can register */
  uint64_t max_msg_size;   /* largest single write */
  uint32_t max_ep_name;    /* bytes needed for an endpoint name */
  uint32_t latency_ns;     /* nominal half round trip, for scoring */
  uint32_t bandwidth_mbps; /* nominal per-endpoint bandwidth, for scoring */
  uint32_t reserved;
  char device[64];      /* e.g. "shm", "tcp;ofi_rxm", "mlx5_0" */
  char pci_address[32]; /* "0000:3b:00.0", or "" for software transports */
  /* Minor 1. The caps of an endpoint opened with COURIER_NIC_EP_ATOMICS
   * (requesting atomics may cost ordering, e.g. libfabric tcp;ofi_rxm). */
  uint32_t caps_with_atomics;
  uint32_t reserved2;
} courier_nic_props_v1;

/* Endpoint creation parameters. */
typedef struct courier_nic_ep_attr_v1 {
  uint32_t struct_size;
  uint32_t tx_depth; /* writes in flight this endpoint must accept */
  uint32_t rx_depth; /* immediate-data completions it must buffer */
  uint32_t flags;    /* COURIER_NIC_EP_* */
} courier_nic_ep_attr_v1;

/* courier_nic_ep_attr_v1.flags (minor 1): the endpoint will post atomics;
 * its capabilities are then props.caps_with_atomics. */
#define COURIER_NIC_EP_ATOMICS (1u << 0)

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

/* One atomic on a peer's registered region (minor 1). */
typedef struct courier_nic_atomic_v1 {
  uint32_t peer;
  uint32_t op; /* exactly one COURIER_NIC_ATOMIC_* bit from atomic_ops */
  courier_nic_rkey_v1 remote;
  uint64_t remote_offset; /* aligned to the op's width */
  uint64_t operand;       /* addend (ADD, FETCH_ADD) or new value (CAS) */
  uint64_t compare;       /* CAS only */
  void* result_mr;        /* FETCH_ADD, CAS: where the old value goes (registered here) */
  uint64_t result_offset; /* aligned to the op's width */
  uint64_t cookie;        /* returned in the TX completion, after the result landed */
} courier_nic_atomic_v1;

/* Completion kinds. */
#define COURIER_NIC_COMP_TX 1     /* a posted write or atomic completed (cookie is valid) */
#define COURIER_NIC_COMP_RX_IMM 2 /* a peer's write with immediate data landed here */

typedef struct courier_nic_completion_v1 {
  uint32_t kind;  /* COURIER_NIC_COMP_* */
  int32_t status; /* COURIER_OK or -errno */
  uint32_t peer;  /* RX_IMM: sender rank, or UINT32_MAX without CAP_IMM_SOURCE */
  uint32_t reserved;
  uint64_t cookie; /* TX: cookie of the write */
  uint64_t imm;    /* RX_IMM: the immediate data */
  uint64_t length; /* RX_IMM: bytes written by that write, or 0 when the backend cannot tell */
} courier_nic_completion_v1;

/* Claim flags (courier_nic_claim_v1.flags, minor 3). */
/* The backend for what no plugin claims: RDMA devices without a claim, and
 * machines without an RDMA device (a transport that needs no particular NIC,
 * such as libfabric over tcp). A fallback claim names no device. */
#define COURIER_NIC_CLAIM_FALLBACK (1u << 0)

/* A kind of device the backend drives (minor 3), so that topology tries it
 * first for the GPUs paired with such a device: a vendor's backend is chosen
 * for its NIC without Courier knowing its name. A claim matches an RDMA
 * device when every criterion it sets matches; an unset one matches any:
 *   driver      the name the kernel driver gives its RDMA devices, without
 *               the index ("mlx5" for mlx5_0, "bnxt_re" for bnxt_re3);
 *               NULL or "": any. Devices renamed after their PCI path by
 *               rdma-core (rdmap16s27, rocep59s0f0) carry no driver name:
 *               claim them by PCI ID too;
 *   pci_vendor  the PCI vendor ID (0x15b3); 0: any;
 *   pci_device  the PCI device ID (0x1021); 0: any; only with pci_vendor.
 * A claim sets at least one criterion, or is COURIER_NIC_CLAIM_FALLBACK and
 * sets none; anything else makes the registry reject the plugin. When
 * several backends claim one device the most specific claim wins: the PCI
 * device ID weighs most, then the driver, then the vendor ({vendor, device}
 * beats {driver, vendor}, which beats {driver}, which beats {vendor}); a tie
 * goes to the backend whose name sorts first. COURIER_NIC_BACKEND overrides
 * all of it. */
typedef struct courier_nic_claim_v1 {
  const char* driver;
  uint16_t pci_vendor;
  uint16_t pci_device;
  /* COURIER_NIC_CLAIM_* of the plugin's minor; a core skips a claim with
   * bits of a later minor than its own. */
  uint32_t flags;
} courier_nic_claim_v1;

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

  /* Minor 1. Posts one atomic on an endpoint opened with COURIER_NIC_EP_ATOMICS;
   * it completes (TX) once applied at the target, with the old value in
   * place for fetching ops. -EAGAIN: full; -EOPNOTSUPP: op not in atomic_ops.
   * NULL when the backend has no atomics. */
  int (*post_atomic)(void* ep, const courier_nic_atomic_v1* atomic);

  /* Minor 2. A report of the backend's device for courier-info and
   * hardware-validation reports (atomic capability, on-demand paging, queue
   * pair limits, addresses, ...): lines separated by '\n', NUL-terminated,
   * truncated to fit *len bytes; *len is set to the bytes the whole report
   * needs (NUL included). NULL when the backend has nothing to add. */
  int (*describe)(void* backend, char* buf, size_t* len);

  /* Minor 3. The devices this backend drives (see courier_nic_claim_v1);
   * NULL and 0 when it claims none (it is then chosen only by name, or
   * when no claimed backend initializes). */
  const courier_nic_claim_v1* claims;
  uint32_t num_claims;
  uint32_t reserved3;
} courier_nic_plugin_v1;

typedef const courier_nic_plugin_v1* (*courier_nic_backend_v1_fn)(void);

#ifdef __cplusplus
}
#endif
#endif
