/* Courier GPU backend ABI, major version 1.
 *
 * A GPU backend is a shared object libcourier-gpu-NAME.so exporting
 *
 *     const courier_gpu_plugin_v1 *courier_gpu_backend_v1(void);
 *
 * Same rules as the NIC ABI (see nic_v1.h and docs/plugin-abi.md).
 */
#ifndef COURIER_ABI_GPU_V1_H
#define COURIER_ABI_GPU_V1_H

#include "courier/abi/plugin_header.h"

#ifdef __cplusplus
extern "C" {
#endif

#define COURIER_GPU_ABI_MAJOR 1
#define COURIER_GPU_ABI_MINOR 18
#define COURIER_GPU_SYMBOL_V1 "courier_gpu_backend_v1"

/* Capability bits (courier_gpu_props_v1.caps). */
#define COURIER_GPU_CAP_HOST_KERNELS (1u << 0) /* launch_host_kernel runs C functions */
#define COURIER_GPU_CAP_MAPPED_HOST (1u << 1)  /* host memory the device can address */
#define COURIER_GPU_CAP_IPC (1u << 2)          /* device memory shareable across processes */
/* Minor 1: */
#define COURIER_GPU_CAP_DMABUF (1u << 3)       /* dmabuf_export gives NICs device memory */
#define COURIER_GPU_CAP_FIFO_KERNELS (1u << 4) /* run_fifo_producers, run_fifo_round_trips */
#define COURIER_GPU_CAP_GRAPHS (1u << 5)       /* kernels can be captured in a graph */
#define COURIER_GPU_CAP_EP_KERNELS (1u << 6)   /* run_ep_layout (expert parallelism) */
/* Minor 2: */
#define COURIER_GPU_CAP_EP_DIRECT (1u << 7) /* ep_* below: EP over direct stores to peers */
/* Minor 3: */
#define COURIER_GPU_CAP_EP_PROXY (1u << 8) /* ep_proxy_* below: EP through the FIFO channels */
/* Minor 4: the low-latency dispatches' `fp8` field takes
 * COURIER_GPU_EP_FP8_POW2_SCALES. */
#define COURIER_GPU_CAP_EP_FP8_POW2 (1u << 9)
/* Minor 5: the combine jobs' `mode` takes COURIER_GPU_EP_COMBINE_LOGFMT. */
#define COURIER_GPU_CAP_EP_LOGFMT (1u << 10)
/* Minor 13: the direct path's jobs take their minor-13 fields (fused
 * launches: "Fused launches", below). */
#define COURIER_GPU_CAP_EP_FUSED (1u << 11)
/* Minor 14: a low-latency combine's own rows stay in place ("Local rows",
 * below). */
#define COURIER_GPU_CAP_EP_LOCAL_ROWS (1u << 12)
/* Minor 16: a high-throughput dispatch in two launches ("Fused
 * high-throughput dispatch", below). */
#define COURIER_GPU_CAP_EP_HT_FUSED (1u << 13)
/* Minor 17: a combine's send and reduce in one launch (ep_combine_send's
 * `reduce`). */
#define COURIER_GPU_CAP_EP_COMBINE_FUSED (1u << 14)
/* Minor 18: the jobs that end a direct-path call (ep_ll_receive, ep_reduce
 * and ep_ht_dispatch, each with its wait) take `done_mark` ("Done marks",
 * below). */
#define COURIER_GPU_CAP_EP_DONE_MARK (1u << 15)

/* Bits of the low-latency dispatches' `fp8` field. QUANTIZE: send e4m3 with
 * one float scale per 128 channels, scale = amax / 448 (1 for an all-zero
 * block). POW2_SCALES (minor 4, with QUANTIZE): the scale rounded up to a
 * power of two, 2^ceil(log2(amax / 448)), DeepEP's round_scale. */
#define COURIER_GPU_EP_FP8_QUANTIZE (1u << 0)
#define COURIER_GPU_EP_FP8_POW2_SCALES (1u << 1)

typedef struct courier_gpu_props_v1 {
  uint32_t struct_size;
  uint32_t caps;         /* COURIER_GPU_CAP_* */
  uint32_t device_count; /* 0 when no device is usable: see no_device_reason */
  uint32_t warp_size;    /* lanes that step together (1 for CPU threads) */
  uint32_t mem_kind;     /* COURIER_MEM_* of memory from mem_alloc */
  uint32_t reserved;
  char device_name[64];
  char no_device_reason[128];
} courier_gpu_props_v1;

/* The coordinates of one "GPU thread" of a host kernel. */
typedef struct courier_host_thread_v1 {
  uint32_t block_idx;
  uint32_t thread_idx;
  uint32_t block_dim;
  uint32_t grid_dim;
  void* block; /* opaque; pass to sync_block */
  /* Barrier across the threads of this block (__syncthreads). */
  void (*sync_block)(const struct courier_host_thread_v1* self);
} courier_host_thread_v1;

typedef void (*courier_host_kernel_fn)(const courier_host_thread_v1* thread, void* arg);

typedef struct courier_host_kernel_launch_v1 {
  uint32_t struct_size;
  uint32_t grid_dim;
  uint32_t block_dim;
  uint32_t reserved;
  courier_host_kernel_fn fn;
  void* arg;
  /* CPUs the kernel's threads may run on (NULL/0: anywhere). The core gives
   * a rank's host kernels the CPUs of that rank's proxies, the way a real
   * GPU sits next to the cores that serve it. */
  const int32_t* cpus;
  uint32_t num_cpus;
  uint32_t reserved2;
} courier_host_kernel_launch_v1;

/* Minor 1. An opaque handle that lets another process of the same host map
 * device memory (cudaIpcMemHandle_t, hipIpcMemHandle_t: 64 bytes each). */
typedef struct courier_gpu_ipc_handle_v1 {
  uint8_t bytes[64];
} courier_gpu_ipc_handle_v1;

/* Minor 1. One FIFO channel as the device sees it (the C form of
 * courier::DeviceChannel, include/courier/device_channel.hpp; addresses are
 * device addresses). */
typedef struct courier_gpu_channel_v1 {
  void* slots;               /* depth 16-byte TransferCmd slots, mapped host memory */
  void* control;             /* courier::FifoControl, mapped host memory */
  uint64_t* head;            /* next ticket, device memory */
  uint64_t* completed_cache; /* producers' copy of control->completed, device memory */
  uint32_t depth_mask;
  uint32_t max_inflight;
  uint32_t channel_id;
  uint32_t reserved;
  uint64_t timeout_ns;
} courier_gpu_channel_v1;

/* How run_fifo_producers' threads push (courier_gpu_fifo_producers_v1.mode). */
#define COURIER_GPU_PUSH_WARP 0   /* the lanes of a warp reserve together: one fence per warp */
#define COURIER_GPU_PUSH_THREAD 1 /* every thread reserves and fences alone */

/* Minor 1. A self-test and benchmark kernel: `blocks` x `threads` producers;
 * producer p (= block * threads + thread) pushes `commands_per_thread` WRITE
 * commands to channel (block % num_channels), all with dst_rank `dst_rank`,
 * window 0, src_offset p, dst_offset = its running index 0, 1, ... and a
 * length that is a checksum of both (courier::device::selftest_length), so a
 * consumer can prove that nothing was lost, duplicated, reordered within a
 * producer or torn. */
typedef struct courier_gpu_fifo_producers_v1 {
  uint32_t struct_size;
  int32_t device;
  const courier_gpu_channel_v1* channels; /* host array of num_channels */
  uint32_t num_channels;
  uint32_t blocks;
  uint32_t threads; /* per block */
  uint32_t mode;    /* COURIER_GPU_PUSH_* */
  uint64_t commands_per_thread;
  uint32_t dst_rank;
  uint32_t use_graph;  /* 1: capture the launch in a graph and launch that */
  int32_t push_status; /* out: first non-ok courier::PushStatus, 0 when all were pushed */
  uint32_t reserved;
  uint64_t elapsed_ns; /* out: device clock from the first push to the last */
} courier_gpu_fifo_producers_v1;

/* What run_fifo_round_trips measures (courier_gpu_fifo_round_trips_v1.mode). */
#define COURIER_GPU_ROUND_TRIP_COMMAND 0 /* push one command, wait for its completion */
#define COURIER_GPU_ROUND_TRIP_FLAG 1    /* write `ping`, wait for the host to echo it in `pong` */

/* Minor 1. One device thread runs `iterations` round trips and records each
 * one's device-clock duration in ns into samples (device memory,
 * `iterations` entries). FLAG mode is the baseline: the device stores i + 1
 * into *ping (mapped host memory) and waits until *pong == i + 1, which a host
 * thread echoes; it needs no channel. */
typedef struct courier_gpu_fifo_round_trips_v1 {
  uint32_t struct_size;
  int32_t device;
  courier_gpu_channel_v1 channel; /* COMMAND mode */
  uint32_t mode;
  uint32_t iterations;
  uint64_t* ping; /* FLAG mode, mapped host memory (device addresses) */
  uint64_t* pong;
  uint64_t* samples;
  int32_t push_status; /* out */
  uint32_t reserved;
} courier_gpu_fifo_round_trips_v1;

/* Minor 1. Lists of TransferCmds pushed from the device, for tools and
 * tests that drive a channel from real device code: device thread i pushes
 * lists[i].commands in order into lists[i].channel (push_batch, up to 8 at a
 * time) and then waits until its last command completed. */
typedef struct courier_gpu_command_list_v1 {
  courier_gpu_channel_v1 channel;
  const void* commands; /* host array of `count` 16-byte TransferCmds */
  uint32_t count;
  int32_t push_status; /* out: courier::PushStatus of this list, 0 = ok */
} courier_gpu_command_list_v1;

typedef struct courier_gpu_command_lists_v1 {
  uint32_t struct_size;
  int32_t device;
  courier_gpu_command_list_v1* lists; /* host array */
  uint32_t num_lists;
  uint32_t reserved;
} courier_gpu_command_lists_v1;

/* Minor 1. get_dispatch_layout on the device (docs/ep.md): for topk_idx
 * [num_tokens, topk] (int64, -1 = no expert; experts spread evenly, rank r
 * holding [r * E/R, (r + 1) * E/R)), count tokens per rank (a token once per
 * rank) and per expert, and mark is_token_in_rank [num_tokens, num_ranks].
 * All pointers are device memory; the two count arrays and *first_invalid
 * must be zero on entry. An index outside [-1, num_experts) is skipped and
 * the first one seen is recorded in *first_invalid as
 * ((token + 1) << 32) | k. */
typedef struct courier_gpu_ep_layout_v1 {
  uint32_t struct_size;
  int32_t device;
  const int64_t* topk_idx;
  uint32_t num_tokens;
  uint32_t topk;
  uint32_t num_experts;
  uint32_t num_ranks;
  int32_t* num_tokens_per_rank;   /* [num_ranks] */
  int32_t* num_tokens_per_expert; /* [num_experts] */
  uint8_t* is_token_in_rank;      /* [num_tokens, num_ranks], 0 or 1 */
  uint64_t* first_invalid;
} courier_gpu_ep_layout_v1;

/* ---- Minor 2: expert parallelism over direct device stores (docs/ep.md,
 * "Direct path"). Every rank's Buffer window has the same layout; `peers`
 * holds each rank's window as this device addresses it (its own for the
 * caller's rank, IPC mappings for the others), and the kernels store into
 * them directly (NVLink between GPUs of one host). The ep_* entry points
 * enqueue on the backend's EP stream of `device` and return at once;
 * ep_sync waits for that stream. Offsets (*_off) are byte offsets into a
 * window. `status` points at a u32 in device memory: a kernel that finds
 * it non-zero skips its work, and a signal kernel then marks its flags
 * refused, so a failure on one rank fails every rank instead of hanging
 * them. Status codes: COURIER_GPU_EP_STATUS_*.
 *
 * Epoch words (minor 10), as the proxy path's (Epochs, below): a job whose
 * `epoch_word` is not NULL takes its epoch from it instead of from its own
 * field: *epoch_word (a u64 in device memory) counts this rank's finished
 * calls of the job's phase and parity, so the call's epoch is *epoch_word +
 * 1. ep_signal raises the flags to it and its wait waits for it, ep_wait
 * waits for it, ep_ll_dispatch waits for the release flags to reach
 * *epoch_word (the calls before), ep_ll_receive raises the release flags to
 * it; the call's last job adds 1 to *epoch_word: ep_ll_receive (its last
 * block, after the release) for a dispatch, ep_reduce (one thread) for a
 * combine. The same jobs can so be replayed (a captured graph). */
#define COURIER_GPU_EP_MAX_RANKS 64
#define COURIER_GPU_EP_REFUSED_FLAG (1ull << 63)     /* set in a flag word: "refused" */
#define COURIER_GPU_EP_STATUS_REFUSED_BY 0x10000000u /* | rank: its flag said refused */
#define COURIER_GPU_EP_STATUS_TIMEOUT 0x20000000u    /* | rank: its flag never came */
#define COURIER_GPU_EP_STATUS_BAD_INDEX 0x40000000u  /* topk_idx out of range (see bad_index) */
#define COURIER_GPU_EP_STATUS_RANK_MASK 0x0fffffffu

typedef struct courier_gpu_ep_peers_v1 {
  void* window[COURIER_GPU_EP_MAX_RANKS];
} courier_gpu_ep_peers_v1;

/* Groups of ep_route. */
#define COURIER_GPU_EP_ROUTE_RANKS 0   /* high-throughput: a token once per rank */
#define COURIER_GPU_EP_ROUTE_EXPERTS 1 /* low-latency: every (token, k) pair */
/* Minor 5 (COURIER_GPU_CAP_EP_LOGFMT): OR-ed into the `mode` of the combine
 * jobs (ep_combine_send, ep_reduce, ep_proxy_combine, ep_proxy_reduce),
 * with ROUTE_EXPERTS and bfloat16 rows whose hidden is a multiple of 128:
 * the rows travel LogFMT-encoded (docs/ep.md, "LogFMT combine"), each in a
 * slot of COURIER_GPU_EP_LOGFMT_SLOT_BYTES(hidden) bytes instead of
 * row_bytes; the send half encodes, the reduce decodes. row_bytes stays
 * hidden * 2 (x's rows). The route is mode & COURIER_GPU_EP_ROUTE_MASK. */
#define COURIER_GPU_EP_ROUTE_MASK 0xFFu
#define COURIER_GPU_EP_COMBINE_LOGFMT (1u << 8)
/* Minor 7, RANKS without LOGFMT: x lies in the data window at offset
 * x_off (a dispatch's received rows): its rows go as WRITEs from there,
 * nothing is packed. Minor 8: x_source names where x_off lies: 0 the data
 * window, 1..3 the TransferCmd source x_source (x registered with
 * Context::set_source). */
#define COURIER_GPU_EP_COMBINE_FROM_WINDOW (1u << 9)
#define COURIER_GPU_EP_LOGFMT_SLOT_BYTES(hidden) ((uint64_t)(hidden)*2u + (uint64_t)(hidden) / 32u)

/* Each item's slot within its group, in token order, and the counts of
 * this rank's record. RANKS: items are the (t, r) with in_rank[t][r];
 * slots [T][R]; record = count per rank [R], then count per expert [E]
 * (tokens whose top-k holds it; zeros without topk_idx). EXPERTS: items are
 * the (t, k) with topk_idx[t][k] >= 0; slots [T][K]; record = count per
 * expert [E]. Slots of non-items are -1. An index outside [-1, E) sets
 * *status to BAD_INDEX and *bad_index to ((t + 1) << 32) | k. */
typedef struct courier_gpu_ep_route_v1 {
  uint32_t struct_size;
  int32_t device;
  uint32_t mode; /* COURIER_GPU_EP_ROUTE_* */
  uint32_t tokens, topk, num_experts, num_ranks;
  uint32_t reserved;
  const int64_t* topk_idx; /* [T][K], NULL: RANKS mode without expert counts */
  const uint8_t* in_rank;  /* [T][R], RANKS mode */
  int32_t* slots;          /* out */
  uint32_t* record;        /* out */
  uint64_t* bad_index;     /* device memory */
  uint32_t* status;
  /* ---- minor 16 (COURIER_GPU_CAP_EP_HT_FUSED; "Fused high-throughput
   * dispatch" below), RANKS mode ---- */
  /* not NULL: once every block routed, the launch's last block does what
   * ep_signal does with *signal (its src: `record`; its wait set), then
   * stores into host_counts, for this rank: [num_ranks] the rows each
   * source sends it (records[s][rank]), then [experts_per_rank] the tokens
   * per local expert (the sum over s of records[s][num_ranks + rank *
   * experts_per_rank + l]), then *status into *host_mark, last. Before
   * any block sets *status, the first block also stores it, as the
   * launches before left it, into host_counts[num_ranks +
   * experts_per_rank]. With signal the per-expert words of `record`
   * ([num_ranks, num_ranks + num_experts)) must be 0 before the launch
   * (blocks add into them) and the launch leaves them at 0 once sent.
   * Read during the call. */
  const struct courier_gpu_ep_signal_v1* signal;
  uint32_t* done;          /* with signal: a u32 in device memory, 0 before, left at 0 */
  const uint32_t* records; /* with signal: this device's records, record_words apart */
  uint32_t rank, experts_per_rank, record_words, reserved16;
  uint32_t* host_counts; /* with signal: mapped host memory */
  uint32_t* host_mark;   /* with signal: mapped host memory */
  int32_t* host_slots;   /* with signal, not NULL (mapped host memory): the last block
                          * copies the slots here too, while it waits */
} courier_gpu_ep_route_v1;

/* Waits until flags[r] >= epoch for every rank r (flags in this device's
 * memory); sets *status to REFUSED_BY | r or TIMEOUT | r otherwise. Then
 * copies *status to *status_host (mapped host memory; NULL: not), so the
 * host learns the outcome without a copy. */
typedef struct courier_gpu_ep_wait_v1 {
  uint32_t struct_size;
  int32_t device;
  uint32_t num_ranks;
  uint32_t reserved;
  const uint64_t* flags;
  uint64_t epoch;
  uint64_t timeout_ns;
  uint32_t* status;
  uint32_t* status_host;
  /* ---- minor 10 ---- */
  const uint64_t* epoch_word; /* not NULL: wait for *epoch_word + 1 instead of epoch */
} courier_gpu_ep_wait_v1;

/* Copies `bytes` at `src` (this device) to offset record_off of every
 * rank's window, then raises the u64 at flag_off there to `epoch` (with
 * REFUSED_FLAG when *status is set) with release semantics: a rank that
 * sees the flag sees the record and everything this device stored before.
 * bytes may be 0 (only the flags). With wait.flags set, the same launch
 * also does what ep_wait does with `wait` (one launch instead of two). */
typedef struct courier_gpu_ep_signal_v1 {
  uint32_t struct_size;
  int32_t device;
  uint32_t rank, num_ranks;
  const void* src;
  uint64_t bytes, record_off, flag_off;
  uint64_t epoch;
  uint32_t* status;
  courier_gpu_ep_peers_v1 peers;
  courier_gpu_ep_wait_v1 wait; /* its minor-10 epoch_word at its end, in here */
  /* ---- minor 10 ---- */
  const uint64_t* epoch_word; /* not NULL: raise the flags to *epoch_word + 1 instead of epoch */
} courier_gpu_ep_signal_v1;

/* High-throughput dispatch: token t with slots[t][d] >= 0 goes to rank d at
 * row begin + slot, begin = sum over s < rank of records[s][d] (records:
 * num_ranks records of record_words u32 in this device's memory, from
 * ep_route RANKS and ep_signal). Stored there: its value row (row_bytes),
 * scales (scale_cols floats, when x_scales), topk local expert ids (int64,
 * -1 where not on d) and weights (when topk > 0). Also pads this rank's
 * rows [received, pad_rows) with zeros (ids -1). */
typedef struct courier_gpu_ep_ht_dispatch_v1 {
  uint32_t struct_size;
  int32_t device;
  uint32_t rank, num_ranks;
  uint32_t tokens, topk, experts_per_rank, row_bytes, scale_cols;
  uint32_t record_words;
  uint32_t pad_rows;
  uint32_t reserved;
  const void* x;
  const float* x_scales;
  const int64_t* topk_idx;
  const float* topk_weights;
  const int32_t* slots;
  const uint32_t* records;
  uint64_t x_off, scales_off, idx_off, weights_off;
  uint32_t* status;
  courier_gpu_ep_peers_v1 peers;
  /* ---- minor 16 (COURIER_GPU_CAP_EP_HT_FUSED) ---- */
  /* done not NULL (a u32 in device memory, 0 before, left at 0): once every
   * block stored its rows, the last block raises this rank's data flag at
   * flag_off in every window to `epoch` (with REFUSED_FLAG when *status is
   * set), then waits as ep_wait does with `wait` (ep_signal's work, in
   * this launch). */
  uint32_t* done;
  uint64_t flag_off, epoch;
  courier_gpu_ep_wait_v1 wait;
  /* ---- minor 18 (COURIER_GPU_CAP_EP_DONE_MARK), with done ---- */
  uint32_t* done_mark; /* mapped host memory, or NULL ("Done marks") */
} courier_gpu_ep_ht_dispatch_v1;

/* Done marks (minor 18, COURIER_GPU_CAP_EP_DONE_MARK): a host that waits
 * for a call's end spins on a word in mapped host memory rather than on
 * the stream, as it does for a high-throughput dispatch's counts (ep_route's
 * host_mark): the stream's own completion reaches the host microseconds
 * after the kernel's last store does. A job that ends a call, with its wait set
 * (ep_ll_receive's and ep_reduce's wait.flags, ep_ht_dispatch's done) and
 * done_mark not NULL: once every block finished the call's work (the epoch
 * word's update included), the last block stores
 * *status into *done_mark, after a system-scope release fence; nothing of
 * the launch stores there after it. The host arms the word (0xFFFFFFFF)
 * before it queues the launch; a word it read as stored tells that the
 * call's work is done and whether the call failed (*status: 0 or the
 * code). Without the wait the field is not read. */

/* Fused high-throughput dispatch (minor 16, COURIER_GPU_CAP_EP_HT_FUSED):
 * two launches, as DeepEP's (notify, then dispatch), and no copy between
 * them: ep_route RANKS with `signal` counts, signals, waits for the ranks'
 * counts and leaves what the host reads (counts, slots, a mark) in mapped
 * host memory; ep_ht_dispatch with `done` stores the rows, signals and
 * waits. The host spins on the mark, not on the stream. A combine of one of
 * the last two dispatches' handles reads where its rows begin in those
 * records (ep_combine_send `records`) and its slots where the route left
 * them (ep_reduce `slots`): no plan is copied. */

/* Low-latency dispatch, send half: pair (t, k) with e = topk_idx[t][k] >= 0
 * goes to rank d = e / L (L local experts), expert l = e % L, into d's
 * staging block of (l, this rank): row (l * num_ranks + rank) * max_tokens
 * + slots[t][k]. Stored there: the row (x_dtype_bits 16: bfloat16, 32:
 * float32; with fp8: e4m3 values, hidden bytes, plus hidden / 128 float
 * scales, quantized here), the source token t (int32) and k (int32).
 * Before storing into d's staging, waits until released[d] (this device's
 * memory; the REFUSED_FLAG bit ignored) reaches released_epoch: d has
 * finished reading what this rank stored there two calls ago. A backend
 * that stores this rank's own rows straight into the receive's outputs
 * (fused, no hook) need not wait for released[rank]: nothing goes into its
 * own staging then, and the receive that read its own records two calls
 * ago ran earlier on the same stream (the core keeps a Buffer's launches
 * on one stream, and refuses a dispatch whose hook of two calls ago has
 * not run). */
/* Fused launches (minor 13, COURIER_GPU_CAP_EP_FUSED): the low-latency
 * calls in as few launches as DeepEP's, no host step between them.
 * ep_ll_dispatch's `fuse` bits: ROUTE: the launch also does ep_route
 * EXPERTS (slots into route_slots, bad indices flagged); SIGNAL: after the
 * last block stored its rows, it stores this rank's count per expert e
 * into rank e / L's window at record_off + 4 e, then does what ep_signal
 * does with the flag at flag_off; RECEIVE: the launch then does the
 * receive half (*receive, its wait set), so its blocks wait for the
 * others' flags: the backend launches no more blocks than can be resident
 * together. ep_ll_receive and ep_reduce with wait.flags wait themselves
 * (no ep_wait before them), ep_combine_send with `done` signals itself (no
 * ep_signal after it). A low-latency dispatch is one launch (two with a
 * receive hook), a combine two (one with minor 17's `reduce`). */
#define COURIER_GPU_EP_FUSE_ROUTE (1u << 0)
#define COURIER_GPU_EP_FUSE_SIGNAL (1u << 1)
#define COURIER_GPU_EP_FUSE_RECEIVE (1u << 2)
/* Local rows (minor 14, COURIER_GPU_CAP_EP_LOCAL_ROWS): a low-latency
 * combine leaves the rows a rank dispatched to itself in its x and its
 * reduce reads them there, as high-throughput's skip_self does: the
 * dispatch records where each such row landed (ep_ll_dispatch and
 * ep_ll_receive self_rows), ep_combine_send EXPERTS skips them (skip_self)
 * and ep_reduce EXPERTS reads them (local_rows, local_index). */

typedef struct courier_gpu_ep_ll_dispatch_v1 {
  uint32_t struct_size;
  int32_t device;
  uint32_t rank, num_ranks;
  uint32_t tokens, topk, num_experts, hidden;
  uint32_t x_dtype_bits, fp8, max_tokens;
  uint32_t reserved;
  const void* x;
  const int64_t* topk_idx;
  const int32_t* slots;
  uint64_t x_off, scales_off, src_off, k_off; /* the staging blocks */
  const uint64_t* released;                   /* [num_ranks] */
  uint64_t released_epoch;
  uint64_t timeout_ns;
  uint32_t* status;
  courier_gpu_ep_peers_v1 peers;
  /* ---- minor 10 ---- */
  const uint64_t* epoch_word; /* not NULL: released_epoch is *epoch_word */
  /* ---- minor 13 (COURIER_GPU_CAP_EP_FUSED; "Fused launches" below) ---- */
  uint32_t fuse; /* COURIER_GPU_EP_FUSE_*: what the launch does besides storing rows */
  uint32_t reserved13;
  int32_t* route_slots; /* FUSE_ROUTE: the slots, written (ep_route EXPERTS); `slots` unused */
  uint64_t* bad_index;  /* FUSE_ROUTE: as ep_route's */
  uint64_t record_off;  /* FUSE_SIGNAL: where this rank's counts per expert go (u32 [E]) */
  uint64_t flag_off;    /* FUSE_SIGNAL: this rank's data flag in every window */
  uint64_t epoch;       /* FUSE_SIGNAL: the flags' epoch (epoch_word: *epoch_word + 1) */
  uint32_t* done;       /* FUSE_SIGNAL: a u32 in device memory, 0 before, left at 0 */
  /* FUSE_RECEIVE: the receive half, run by the same launch once every
   * rank's data flag arrived (its wait.flags set); read during the call. */
  const struct courier_gpu_ep_ll_receive_v1* receive;
  /* ---- minor 14 (COURIER_GPU_CAP_EP_LOCAL_ROWS; "Local rows" below) ---- */
  /* not NULL: self_rows[t][k] = -1 for each pair whose expert is not one
   * of this rank's (or none); the receive half writes the others. */
  int32_t* self_rows;
} courier_gpu_ep_ll_dispatch_v1;

/* Low-latency dispatch, receive half (after the ranks' data flags): per
 * local expert l, the ranks' staging blocks are packed into the outputs
 * from row 0 (x, scales, src, k: [L][num_ranks * max_tokens] rows), one
 * block per rank, count[l] = sum over s of records[s][rank * L + l] and
 * range[l][s] = (begin << 32) | records[s][rank * L + l]. The blocks'
 * order is the backend's (DeepEP's is that of arrival); consumers read
 * range. (gpu-cuda and gpu-hip: ranks 0, 1, ... in a receive launch of its
 * own; in an ep_ll_dispatch launch with FUSE_RECEIVE the send half stores
 * this rank's own rows straight into the outputs, and its block comes
 * first, then ranks rank + 1, rank + 2, ... mod num_ranks.) Then, once
 * every block is done (*done counts them and is left at 0), raises this
 * rank's release
 * flag at release_off in every window to `epoch`, also when *status is set
 * (then nothing is packed): the senders may store into the staging again.
 * Pointers are this device's memory. */
typedef struct courier_gpu_ep_ll_receive_v1 {
  uint32_t struct_size;
  int32_t device;
  uint32_t rank, num_ranks, local_experts, num_experts, max_tokens;
  uint32_t row_bytes, scale_cols; /* scale_cols 0: no scales */
  uint32_t reserved;
  const uint32_t* records; /* [num_ranks][num_experts] */
  const void* staging_x;
  const float* staging_scales;
  const int32_t* staging_src;
  const int32_t* staging_k;
  void* x;
  float* scales;
  int32_t* src;
  int32_t* k;
  int32_t* count;
  int64_t* range;
  uint32_t* done;
  uint64_t release_off;
  uint64_t epoch;
  uint32_t* status;
  courier_gpu_ep_peers_v1 peers;
  /* ---- minor 10 ---- */
  uint64_t* epoch_word;   /* not NULL: release to *epoch_word + 1, then add 1 to it */
  uint32_t scales_layout; /* COURIER_GPU_EP_SCALES_* (as the proxy path's receive) */
  uint32_t reserved10;
  /* ---- minor 13 ---- */
  /* wait.flags not NULL: every block first waits as ep_wait does for the
   * ranks' data flags; the last block mirrors *status to wait.status_host. */
  courier_gpu_ep_wait_v1 wait;
  /* ---- minor 14 (COURIER_GPU_CAP_EP_LOCAL_ROWS) ---- */
  /* not NULL: for each row packed from this rank's own staging, with
   * source token t and k, self_rows[t][k] (topk per token) = its row in x
   * (l * num_ranks * max_tokens + j). */
  int32_t* self_rows;
  uint32_t topk;
  uint32_t reserved14;
  /* ---- minor 18 (COURIER_GPU_CAP_EP_DONE_MARK), with wait.flags ---- */
  uint32_t* done_mark; /* mapped host memory, or NULL ("Done marks") */
} courier_gpu_ep_ll_receive_v1;

/* Combine's send half: rows of x go back to the ranks they came from.
 * RANKS (high-throughput): row i of x came from rank s with
 * begins[s] <= i < begins[s + 1]; it goes to rank s at
 * out_off + (rank * rows_per_rank + i - begins[s]) * row_bytes.
 * EXPERTS (low-latency): x is [L][rows_per_expert]; row j < count[l] of
 * expert l came from the rank s whose range[l][s] covers j, token src[..],
 * k k[..]; it goes to rank s at out_off + (t * topk + k) * row_bytes. */
typedef struct courier_gpu_ep_combine_send_v1 {
  uint32_t struct_size;
  int32_t device;
  uint32_t mode; /* COURIER_GPU_EP_ROUTE_* */
  uint32_t rank, num_ranks, row_bytes;
  uint32_t rows;          /* RANKS: rows of x */
  uint32_t rows_per_rank; /* RANKS */
  uint32_t local_experts, rows_per_expert, topk;
  uint32_t reserved;
  const void* x;
  const int32_t* begins; /* RANKS: [R + 1] */
  const int32_t* count;  /* EXPERTS */
  const int64_t* range;
  const int32_t* src;
  const int32_t* k;
  uint64_t out_off;
  uint32_t* status;
  courier_gpu_ep_peers_v1 peers;
  /* ---- minor 13 ---- */
  /* done not NULL: once every block stored its rows, the last raises this
   * rank's flag at flag_off in every window to epoch (epoch_word: to
   * *epoch_word + 1), with REFUSED_FLAG when *status is set: what ep_signal
   * without a record does. *done: a u32 in device memory, 0, left at 0. */
  uint64_t flag_off;
  uint64_t epoch;
  const uint64_t* epoch_word;
  uint32_t* done;
  /* RANKS (and EXPERTS, minor 14): not 0: the rows that came from this
   * rank stay in x (the reduce reads them there: its local_rows), none is
   * stored. */
  uint32_t skip_self;
  uint32_t reserved13;
  /* ---- minor 16 (COURIER_GPU_CAP_EP_HT_FUSED), RANKS ---- */
  /* not NULL: a dispatch's records in this device's memory (record_words
   * apart), which say where each source's rows begin in x: begins[s] = the
   * sum over s' < s of records[s'][rank], rows = that sum over every s;
   * `begins` and `rows` are not read. moved_rows: the rows that leave x
   * (rows, less this rank's own with skip_self), for which the backend
   * sizes the launch. */
  const uint32_t* records;
  uint32_t record_words;
  uint32_t moved_rows;
  /* ---- minor 17 (COURIER_GPU_CAP_EP_COMBINE_FUSED) ---- */
  /* not NULL, with `done` (and the reduce's wait.flags and done): once its
   * last block raised the flags, the same launch runs *reduce as ep_reduce
   * would (the backend copies the job): a combine in one launch. Its blocks
   * wait for the ranks' flags, so the backend launches no more of them than
   * stay resident together. */
  const struct courier_gpu_ep_reduce_v1* reduce;
} courier_gpu_ep_combine_send_v1;

/* Combine's reduce: out[t] = sum over j < terms with slots[t][j] >= 0 of
 * weight * rows[r], in float, stored as bfloat16 (dtype_bits 16) or
 * float32. RANKS: r = j * rows_per_term + slots[t][j], weight 1. EXPERTS:
 * r = t * terms + j, weight weights[t][j]. */
typedef struct courier_gpu_ep_reduce_v1 {
  uint32_t struct_size;
  int32_t device;
  uint32_t mode;
  uint32_t tokens, hidden, dtype_bits, terms, rows_per_term;
  const int32_t* slots;
  const float* weights;
  const void* rows;
  void* out;
  uint32_t* status;
  /* ---- minor 10 ---- */
  uint64_t* epoch_word; /* not NULL: one thread adds 1 to it (the combine's last job) */
  /* ---- minor 13 ---- */
  /* wait.flags not NULL: every block first waits as ep_wait does for the
   * ranks' combine flags; then the last block (done: a u32 in device
   * memory, 0, left at 0) adds 1 to *epoch_word and mirrors *status to
   * wait.status_host. */
  courier_gpu_ep_wait_v1 wait;
  uint32_t* done;
  /* RANKS: not NULL: term local_term's rows are read here (row
   * slots[t][local_term], rows of row_bytes: this rank's own rows, left in
   * the combine's x by skip_self) instead of in `rows`. */
  const void* local_rows;
  uint32_t local_term;
  uint32_t reserved13;
  /* ---- minor 14 (COURIER_GPU_CAP_EP_LOCAL_ROWS) ---- */
  /* EXPERTS, with local_rows: term j of token t with local_index[t][j] >= 0
   * is read in local_rows at that row (row_bytes = hidden x dtype) instead
   * of in rows: this rank's own rows, left in the combine's x by
   * skip_self (the dispatch's self_rows). */
  const int32_t* local_index;
  /* ---- minor 18 (COURIER_GPU_CAP_EP_DONE_MARK), with wait.flags ---- */
  uint32_t* done_mark; /* mapped host memory, or NULL ("Done marks") */
} courier_gpu_ep_reduce_v1;

/* ---- Minor 3: expert parallelism through the proxies (docs/ep.md, "Proxy
 * path"). The kernels route, pack and quantize on the device and push
 * WRITE and ATOMIC TransferCmds into the FIFO channels; the NIC backend's
 * proxies carry them out. Every rank registered two windows with the same
 * layouts, data and control (offsets *_off are byte offsets into one of
 * them; `base` and `control` are this rank's, as the device addresses
 * them). A phase announces itself to each
 * destination d with write-then-atomic: a record (record_words u32: [0]
 * state, 0 or COURIER_GPU_EP_RECORD_REFUSED, then counts) written to
 * record_off + rank * record_bytes at d, then COURIER_GPU_EP_SIGNAL_STEP
 * added to the u64 at signal_off + rank * 8 at d, split over the channels
 * that carried this rank's rows to d (one ATOMIC each, behind them in
 * their channel, the parts summing to the step). A receiver waits on the
 * device until every rank's signal word reached `target` (calls of that
 * parity so far x the step), then reads the records: it needs to know
 * neither how many channels a sender used nor when its writes completed.
 * Rows to this rank itself are stored directly (and the signal raised with
 * a device store) unless `loopback` is set, when they go through the
 * channels like any peer's. The ep_proxy_* entry points enqueue on the EP
 * stream of `device` (gpu-host runs them before returning); ep_sync waits.
 *
 * Epochs (minor 10): a job with an `epoch` field not NULL takes its targets
 * from the device instead of from its target fields, so that the same job
 * can be replayed (a captured CUDA graph). *epoch is a u64 in device memory
 * counting this rank's calls of the job's phase and parity so far. A send
 * half (refuse, ll_dispatch, combine) waits for its release words to reach
 * *epoch x COURIER_GPU_EP_SIGNAL_STEP (where it waits for release) and,
 * once it has signalled, adds 1 to *epoch; a receive half (ll_receive,
 * reduce) waits for the signal words to reach *epoch x the step, the send
 * half of its call having added its 1 before it on the stream. */
#define COURIER_GPU_EP_SIGNAL_STEP (1u << 16)
#define COURIER_GPU_EP_RECORD_REFUSED 1u
#define COURIER_GPU_EP_MAX_EXPERTS 1024     /* per call, for the proxy path's per-expert scans */
#define COURIER_GPU_EP_PROXY_MAX_RANKS 1024 /* ranks of a proxy-path Buffer (per-rank scans) */
#define COURIER_GPU_EP_STATUS_OVERFLOW 0x08000000u /* | rank: more rows than the outputs hold */
#define COURIER_GPU_EP_STATUS_CHANNEL 0x04000000u  /* | channel: a push failed or it failed */

/* What every proxy-path kernel shares. */
typedef struct courier_gpu_ep_proxy_v1 {
  const courier_gpu_channel_v1* channels; /* num_channels descriptors, device-readable */
  uint32_t num_channels;
  uint32_t window; /* the window id the commands name */
  uint32_t rank, num_ranks;
  uint32_t loopback;     /* 1: rows to this rank go through the channels too */
  uint32_t record_words; /* u32 words per record */
  void* base;            /* this rank's data window (send and receive areas) */
  /* The control window (records, signal and release words, staged
   * records; the *_off of those name offsets in it) as the device
   * addresses it, and its id. Mapped host memory where the receiving proxy
   * applies atomics with the CPU (emulated atomics on a GPU backend), else
   * device memory. */
  void* control;
  uint32_t control_window;
  uint32_t reserved2;
  uint32_t* status;      /* device memory; COURIER_GPU_EP_STATUS_* */
  uint64_t* bad_index;   /* device memory: ((t + 1) << 32) | k of a bad topk index */
  uint32_t* status_host; /* mapped host memory: the receive kernels mirror *status here */
  uint32_t* done;        /* device memory, 0 between launches: blocks finished */
  /* Device memory [num_channels]: tickets that must complete before the
   * send area is written again (its earlier WRITEs read it); each send
   * kernel waits for them first and leaves its own when it is done. */
  uint64_t* reuse_fence;
  uint64_t timeout_ns;
} courier_gpu_ep_proxy_v1;

/* A refusal of the call whose records and signal words these are: once the
 * send area's last WRITEs completed, stages a record saying
 * COURIER_GPU_EP_RECORD_REFUSED for every rank at staging_off and signals
 * it. Mirrors the status to status_host. */
typedef struct courier_gpu_ep_proxy_refuse_v1 {
  uint32_t struct_size;
  int32_t device;
  courier_gpu_ep_proxy_v1 fifo;
  uint64_t staging_off, record_off, signal_off;
  /* Non-zero: a low-latency dispatch: first wait until the u64 at
   * release_off + d * 8 here reached release_target for every d (as the
   * dispatch would), and after the signal add the step to release_off +
   * rank * 8 at every rank (a refused dispatch is never received). */
  uint64_t release_off, release_target;
  /* ---- minor 10 ---- */
  uint64_t* epoch; /* not NULL: as a send half's (Epochs, above) */
} courier_gpu_ep_proxy_refuse_v1;

/* High-throughput dispatch, send half (minor 7: counts first; a job whose
 * struct_size does not cover the minor-7 fields is refused). Token t goes
 * to every rank d with in_rank[t][d], once; its slot there (slots[t][d],
 * out, -1 where not) is its place among this rank's tokens for d, in token
 * order. Three steps, in order on the EP stream:
 *  1. Counts. Record for d at staging_off + d * record_bytes: [0] state,
 *     [1] its row count, [2 + l] its tokens per local expert l
 *     (experts_per_rank of them), [2 + experts_per_rank + r] this rank's
 *     row count for every rank r; written to notify_record_off + rank *
 *     record_bytes at d, then the step added to notify_signal_off + rank * 8
 *     there. An index outside [-1, num_experts) sets BAD_INDEX and the
 *     records say refused. counts_off: the offset in the data window of
 *     num_experts + num_ranks int32 counters, zero before the launch and
 *     left zero again.
 *  2. Pack, while the counts travel: token t's row at send_off + t *
 *     row_bytes; its meta, for each rank d it goes to, at send_meta_off +
 *     (d * max_tokens + slot) * meta_bytes: scales (scale_cols floats,
 *     with x_scales), then topk int32 global expert ids (-1 without
 *     topk_idx), then topk float weights (0 without topk_weights).
 *  3. Rows, once every rank's counts arrived (notify_signal_off words at
 *     notify_target): slot s at d goes to row base_d + s there, base_d the
 *     rows ranks before this one send d (their records' counts): the row to
 *     recv_off + row * row_bytes (past recv_rows rows: OVERFLOW). Runs of
 *     consecutive tokens go as one WRITE each, spread over d's channels;
 *     d's metas as one WRITE to recv_meta_off + base_d * meta_bytes; rows
 *     for this rank itself (no loopback) are stored from x directly. Then a record
 *     of one state word from rows_staging_off to record_off + rank *
 *     record_bytes at d, and atomics summing to the step on signal_off +
 *     rank * 8 there, behind the rows of each lane.
 * slot_bytes is not read (minor 7).
 * Minor 8, row_source 1..3: step 2 packs no rows; the rows' WRITEs read x
 * itself, registered as TransferCmd source row_source (Context::set_source
 * slot row_source - 1) with token t's row at t * row_bytes. The caller then
 * sets the receive job's wait_sends, so x is not reused before they are
 * done. sends_settled nonzero: every command this rank pushed before has
 * completed (the caller knows: the last call's wait_sends), so the send
 * half does not wait for the send area. */
typedef struct courier_gpu_ep_proxy_ht_dispatch_v1 {
  uint32_t struct_size;
  int32_t device;
  courier_gpu_ep_proxy_v1 fifo;
  uint32_t tokens, topk, num_experts, row_bytes, scale_cols, slot_bytes, max_tokens;
  uint32_t counts_off;
  const void* x;
  const float* x_scales;   /* NULL: no scales */
  const int64_t* topk_idx; /* NULL: no expert columns (topk 0) */
  const float* topk_weights;
  const uint8_t* in_rank; /* [tokens][num_ranks] */
  int32_t* slots;         /* out: [tokens][num_ranks] */
  uint64_t send_off, recv_off, staging_off, record_off, signal_off;
  /* ---- minor 7 ---- */
  uint64_t notify_record_off, notify_signal_off, notify_target;
  uint64_t rows_staging_off, send_meta_off, recv_meta_off;
  uint32_t meta_bytes, recv_rows;
  /* ---- minor 8 ---- */
  uint32_t row_source, sends_settled;
  /* ---- minor 10 ---- */
  /* Not NULL: the dispatch's epoch word (Epochs, above): the counts' wait
   * waits for (*epoch + 1) x the step instead of notify_target, and the
   * rows' last block adds 1 once it signalled. */
  uint64_t* epoch;
} courier_gpu_ep_proxy_ht_dispatch_v1;

/* High-throughput dispatch, receive half (minor 7; smaller jobs refused):
 * waits for every rank's rows signal (signal_off, record_off: a record
 * saying refused fails the call), then reads the counts from the records
 * at notify_record_off ([1] of each: rank 0's rows first, then rank 1's,
 * ...). The rows stay where they landed, at recv_off + i * row_bytes (x is
 * not read); from each row's meta at recv_meta_off + i * meta_bytes it
 * writes the outputs from row 0: scales, topk ids made local to this rank
 * (global id e becomes e - rank * local_experts, -1 where e is another
 * rank's) and widened to int64, weights. Pads rows [received, pad_rows)
 * with zeros (ids -1), the rows at recv_off too. More rows than `capacity`
 * set OVERFLOW. Mirrors the status to status_host. Minor 8, wait_sends
 * nonzero: the wait also lasts until every command this rank pushed before
 * it completed (the fences its send half left), because they read the
 * caller's memory (row_source). Minor 8, readback not NULL: once the
 * wait succeeded, the records at notify_record_off (num_ranks *
 * record_words u32) then slots[slot_tokens][num_ranks] (int32: the send
 * half's slots) are copied to readback, memory the host reads after
 * ep_sync (mapped host memory on a GPU), so it needs no copy of its own;
 * plan not NULL: each rank's row count (the records' [1]) then the slots
 * go there too (device memory: a later combine's plan). */
typedef struct courier_gpu_ep_proxy_ht_receive_v1 {
  uint32_t struct_size;
  int32_t device;
  courier_gpu_ep_proxy_v1 fifo;
  uint32_t topk, row_bytes, scale_cols, slot_bytes, max_tokens, pad_rows, capacity;
  uint32_t local_experts;
  uint64_t recv_off, record_off, signal_off, target;
  void* x;
  float* scales;
  int64_t* topk_idx;
  float* topk_weights;
  /* ---- minor 7 ---- */
  uint64_t notify_record_off, recv_meta_off;
  uint32_t meta_bytes;
  uint32_t wait_sends; /* minor 8 (reserved before) */
  /* ---- minor 8 ---- */
  void* readback;
  const int32_t* slots;
  int32_t* plan;
  uint32_t slot_tokens, reserved8;
  /* ---- minor 10 ---- */
  const uint64_t* epoch; /* not NULL: replaces target (Epochs, above) */
} courier_gpu_ep_proxy_ht_receive_v1;

/* Low-latency dispatch, send half. Pair (t, k) with e = topk_idx[t][k] >= 0
 * goes to rank d = e / L, expert l = e % L. Each destination gets one
 * region of L * max_tokens slots: the pairs of its expert 0, then 1, ...,
 * each expert's in token order; slots[t][k] (out) is the pair's place in
 * its region. A slot (slot_bytes) holds the row (x_dtype_bits 16 or 32;
 * with fp8: hidden e4m3 bytes then hidden / 128 float scales, quantized
 * here), then the source token t (int32) in its last 16 bytes. The region
 * is packed at send_off + d * L * max_tokens * slot_bytes and goes, spread
 * over d's channels, to recv_off + rank * L * max_tokens * slot_bytes at d. Before
 * writing, waits until the u64 at release_off + d * 8 here reached
 * release_target for every d (d finished reading what this rank sent it
 * two calls ago). Record for d: [1 + l] its pairs for local expert l. More
 * than max_tokens pairs for one expert (an expert listed twice for a
 * token) set OVERFLOW | rank and the records say refused. */
typedef struct courier_gpu_ep_proxy_ll_dispatch_v1 {
  uint32_t struct_size;
  int32_t device;
  courier_gpu_ep_proxy_v1 fifo;
  uint32_t tokens, topk, num_experts, hidden, x_dtype_bits, fp8, max_tokens, slot_bytes;
  const void* x;
  const int64_t* topk_idx;
  int32_t* slots; /* out: [tokens][topk] */
  uint64_t send_off, recv_off, staging_off, record_off, signal_off;
  uint64_t release_off, release_target;
  /* ---- minor 10 ---- */
  uint64_t* epoch; /* not NULL: replaces release_target (Epochs, above) */
} courier_gpu_ep_proxy_ll_dispatch_v1;

/* Low-latency dispatch, receive half: waits for every rank's signal, then
 * packs, per local expert l, the slots of rank 0, 1, ... (rank s's region
 * at recv_off + s * L * max_tokens * slot_bytes holds its rows of expert 0,
 * 1, ..., counts in its record) into x (row_bytes each), scales
 * (scale_cols floats, 0: none) and src from row 0 of [L][num_ranks *
 * max_tokens]; count[l] = its rows, range[l][s] = (begin << 32) | rows
 * from s. Then adds COURIER_GPU_EP_SIGNAL_STEP to the u64 at release_off +
 * rank * 8 at every rank: they may send into it again. */
typedef struct courier_gpu_ep_proxy_ll_receive_v1 {
  uint32_t struct_size;
  int32_t device;
  courier_gpu_ep_proxy_v1 fifo;
  uint32_t local_experts, max_tokens, row_bytes, scale_cols, slot_bytes;
  uint32_t reserved;
  uint64_t recv_off, record_off, signal_off, target, release_off;
  void* x;
  float* scales;
  int32_t* src;
  int32_t* count;
  int64_t* range;
  /* ---- minor 9 ---- */
  /* Not NULL: [num_ranks] int64 in device memory; per rank r, the
   * nanoseconds from the start of this job's wait until rank r's signal was
   * seen are added to wait_cost[r] (DeepEP's dispatch_wait_recv_cost_stats,
   * counted in nanoseconds where DeepEP counts GPU cycles). */
  int64_t* wait_cost;
  /* ---- minor 10 ---- */
  const uint64_t* epoch; /* not NULL: replaces target (Epochs, above) */
  /* How scales is laid out (0: float [L][num_ranks * max_tokens][scale_cols]
   * row-major). COURIER_GPU_EP_SCALES_COLUMN_MAJOR: [L][scale_cols][num_ranks
   * * max_tokens] (column-major in the last two dimensions, DeepEP's).
   * COURIER_GPU_EP_SCALES_UE8M0: each scale's exponent byte (bits 23..30 of
   * the float, a power of two with COURIER_GPU_EP_FP8_POW2_SCALES), four per
   * u32, scale 4p + b in byte b of word p, bytes past scale_cols zero;
   * ceil(scale_cols / 4) words in place of scale_cols floats, laid out
   * either way. */
  uint32_t scales_layout;
  uint32_t reserved10;
} courier_gpu_ep_proxy_ll_receive_v1;
#define COURIER_GPU_EP_SCALES_COLUMN_MAJOR 1u
#define COURIER_GPU_EP_SCALES_UE8M0 2u

/* Combine, send half: rows of x go back to the ranks they came from.
 * RANKS: x holds the rows of rank 0, 1, ... (counts[s] each, in order);
 * row i of rank s goes to recv_off + (rank * max_tokens + i) * row_bytes at
 * s. EXPERTS: x is [L][num_ranks * max_tokens]; rows [begin, begin + n) of
 * expert l, with range[l][s] = (begin << 32) | n, go back to where they were
 * in s's dispatch region: into rank s's region at recv_off + rank * L *
 * max_tokens * row_bytes at s, after the rows of experts l' < l from s;
 * each region spread over s's channels. Packed at send_off first (x is the caller's
 * memory, not a registered window). */
typedef struct courier_gpu_ep_proxy_combine_v1 {
  uint32_t struct_size;
  int32_t device;
  courier_gpu_ep_proxy_v1 fifo;
  uint32_t mode; /* COURIER_GPU_EP_ROUTE_* */
  uint32_t row_bytes, local_experts, max_tokens;
  const void* x;
  const int32_t* counts; /* RANKS: [num_ranks] */
  const int64_t* range;  /* EXPERTS: [L][num_ranks] */
  uint64_t send_off, recv_off, staging_off, record_off, signal_off;
  /* ---- minor 7 ---- */
  uint64_t x_off; /* with COURIER_GPU_EP_COMBINE_FROM_WINDOW */
  /* ---- minor 8 ---- */
  uint32_t x_source;      /* with COURIER_GPU_EP_COMBINE_FROM_WINDOW: 0 the data window */
  uint32_t sends_settled; /* as the high-throughput dispatch's */
  /* ---- minor 10 ---- */
  uint64_t* epoch; /* not NULL: advanced once signalled (Epochs, above) */
} courier_gpu_ep_proxy_combine_v1;

/* Combine, receive half: waits for every rank's signal, then out[t] = sum
 * in float, stored as bfloat16 (dtype_bits 16) or float32. RANKS: over r
 * with slots[t][r] >= 0 (terms = num_ranks) of the row at recv_off + (r *
 * max_tokens + slots[t][r]) * row_bytes. EXPERTS: over k with e =
 * topk_idx[t][k] >= 0 (terms = topk) of weights[t][k] x the row at recv_off
 * + (d * L * max_tokens + slots[t][k]) * row_bytes, d = e / L (slots: the
 * dispatch's places in the regions). Minor 8, wait_sends nonzero: as the
 * high-throughput receive's (the combine read x through x_source). */
typedef struct courier_gpu_ep_proxy_reduce_v1 {
  uint32_t struct_size;
  int32_t device;
  courier_gpu_ep_proxy_v1 fifo;
  uint32_t mode;
  uint32_t tokens, hidden, dtype_bits, terms, local_experts, max_tokens;
  uint32_t wait_sends; /* minor 8 (reserved before) */
  const int32_t* slots;
  const int64_t* topk_idx; /* EXPERTS */
  const float* weights;    /* EXPERTS */
  uint64_t recv_off, record_off, signal_off, target;
  void* out;
  /* ---- minor 9 ---- */
  int64_t* wait_cost; /* as the low-latency receive's (combine_wait_recv_cost_stats) */
  /* ---- minor 10 ---- */
  const uint64_t* epoch; /* not NULL: replaces target (Epochs, above) */
} courier_gpu_ep_proxy_reduce_v1;

/* Minor 12: what the EP entries of one device cost, counted since the
 * backend was initialized (ep_counters). For benchmarks (courier-bench ep
 * reports them per call), not for control. */
typedef struct courier_gpu_ep_counters_v1 {
  uint32_t struct_size; /* in: sizeof(courier_gpu_ep_counters_v1) */
  uint32_t reserved;
  /* Kernels the ep_*, ep_proxy_* and run_ep_layout entries launched (a
   * copy, ep_copy's, is not a kernel). */
  uint64_t kernel_launches;
  /* Times an entry made the host wait for the device: ep_sync, a
   * synchronous copy (memcpy_sync), run_ep_layout (it waits for its
   * kernel). A backend whose kernels run on the calling thread (gpu-host)
   * counts the same entries, which cost it no wait. */
  uint64_t host_waits;
} courier_gpu_ep_counters_v1;

/* ---- Minor 15: the table in parts (docs/plugin-abi.md, "GPU ABI 1.15").
 * The entries come in three parts, each a struct of its own that starts
 * with its struct_size (sizeof the part as the plugin was built), and that
 * a plugin points to from the end of courier_gpu_plugin_v1 or leaves NULL:
 *
 *   runtime   what every GPU backend has: device memory, mapped host
 *             memory, synchronous copies, host kernels, IPC, dmabuf.
 *             Required from minor 15: the registry rejects a plugin of
 *             minor 15 or later without it.
 *   selftest  the self-test and benchmark kernels that drive FIFO channels
 *             from device code (COURIER_GPU_CAP_FIFO_KERNELS).
 *   ep        expert parallelism: the layout kernel, the direct and proxy
 *             paths' kernels, and what acts on a device's EP stream (its
 *             choice, sync, capture query, copies, counters, stamps, hold).
 *
 * The rules:
 *  - A core of minor 15 or later calls a plugin of minor 15 or later only
 *    through its parts, reading each only up to its struct_size: an entry
 *    past it or NULL is absent, and so is every capability that needs it
 *    (the core clears those bits). For a plugin of an older minor the core
 *    builds the parts itself from the flat fields of courier_gpu_plugin_v1,
 *    by the rules of each minor, so the rest of the core sees parts alone.
 *  - A plugin of minor 15 still fills the flat fields, with the same
 *    functions as its parts: a core older than 1.15 reads only those (and
 *    every core requires the 1.0 entries).
 *  - Entries added after minor 15 are appended to a part, whose struct_size
 *    grows; courier_gpu_plugin_v1 gains no more entries.
 * Each entry keeps the contract of the flat field of the same name. */
typedef struct courier_gpu_runtime_part_v1 {
  uint32_t struct_size;
  uint32_t reserved;
  /* ABI 1.0's: required in this part too. */
  int (*mem_alloc)(void* backend, int device, size_t bytes, void** ptr);
  int (*mem_free)(void* backend, int device, void* ptr);
  int (*host_alloc_mapped)(void* backend, size_t bytes, void** host_ptr, void** device_ptr);
  int (*host_free_mapped)(void* backend, void* host_ptr);
  int (*memcpy_sync)(void* backend, void* dst, const void* src, size_t bytes);
  int (*launch_host_kernel)(void* backend, const courier_host_kernel_launch_v1* launch);
  /* COURIER_GPU_CAP_IPC: all three. */
  int (*ipc_export)(void* backend, void* ptr, courier_gpu_ipc_handle_v1* handle);
  int (*ipc_import)(void* backend, int device, const courier_gpu_ipc_handle_v1* handle, void** ptr);
  int (*ipc_close)(void* backend, void* ptr);
  /* COURIER_GPU_CAP_DMABUF. */
  int (*dmabuf_export)(void* backend, void* ptr, size_t bytes, int* fd, uint64_t* offset);
} courier_gpu_runtime_part_v1;

typedef struct courier_gpu_selftest_part_v1 {
  uint32_t struct_size;
  uint32_t reserved;
  /* COURIER_GPU_CAP_FIFO_KERNELS: all three. */
  int (*run_fifo_producers)(void* backend, courier_gpu_fifo_producers_v1* job);
  int (*run_fifo_round_trips)(void* backend, courier_gpu_fifo_round_trips_v1* job);
  int (*run_command_lists)(void* backend, courier_gpu_command_lists_v1* job);
} courier_gpu_selftest_part_v1;

typedef struct courier_gpu_ep_part_v1 {
  uint32_t struct_size;
  uint32_t reserved;
  /* COURIER_GPU_CAP_EP_KERNELS. */
  int (*run_ep_layout)(void* backend, const courier_gpu_ep_layout_v1* job);
  /* COURIER_GPU_CAP_EP_DIRECT: these eight and ep_sync. */
  int (*ep_route)(void* backend, const courier_gpu_ep_route_v1* job);
  int (*ep_signal)(void* backend, const courier_gpu_ep_signal_v1* job);
  int (*ep_wait)(void* backend, const courier_gpu_ep_wait_v1* job);
  int (*ep_ht_dispatch)(void* backend, const courier_gpu_ep_ht_dispatch_v1* job);
  int (*ep_ll_dispatch)(void* backend, const courier_gpu_ep_ll_dispatch_v1* job);
  int (*ep_ll_receive)(void* backend, const courier_gpu_ep_ll_receive_v1* job);
  int (*ep_combine_send)(void* backend, const courier_gpu_ep_combine_send_v1* job);
  int (*ep_reduce)(void* backend, const courier_gpu_ep_reduce_v1* job);
  int (*ep_sync)(void* backend, int device);
  /* COURIER_GPU_CAP_EP_PROXY: these seven and ep_sync. */
  int (*ep_proxy_refuse)(void* backend, const courier_gpu_ep_proxy_refuse_v1* job);
  int (*ep_proxy_ht_dispatch)(void* backend, const courier_gpu_ep_proxy_ht_dispatch_v1* job);
  int (*ep_proxy_ht_receive)(void* backend, const courier_gpu_ep_proxy_ht_receive_v1* job);
  int (*ep_proxy_ll_dispatch)(void* backend, const courier_gpu_ep_proxy_ll_dispatch_v1* job);
  int (*ep_proxy_ll_receive)(void* backend, const courier_gpu_ep_proxy_ll_receive_v1* job);
  int (*ep_proxy_combine)(void* backend, const courier_gpu_ep_proxy_combine_v1* job);
  int (*ep_proxy_reduce)(void* backend, const courier_gpu_ep_proxy_reduce_v1* job);
  /* Each on its own (no capability bit): set, or NULL when absent. */
  int (*ep_set_stream)(void* backend, int device, int caller, void* stream);
  int (*ep_stream_capturing)(void* backend, int device, int* capturing);
  int (*ep_copy)(void* backend, int device, void* dst, const void* src, size_t bytes);
  /* These three together. */
  int (*ep_counters)(void* backend, int device, courier_gpu_ep_counters_v1* out);
  int (*ep_stamp)(void* backend, int device, uint32_t slot);
  int (*ep_stamp_elapsed)(void* backend, int device, uint64_t* ns);
  int (*ep_hold)(void* backend, int device, uint32_t microseconds);
} courier_gpu_ep_part_v1;

/* True when `part` (a pointer to a part of type `type`, or NULL) is there,
 * long enough to carry `field`, and the entry is set. */
#define COURIER_GPU_PART_HAS(type, part, field)                                              \
  ((part) != NULL && (part)->struct_size >= offsetof(type, field) + sizeof((part)->field) && \
   (part)->field != NULL)

typedef struct courier_gpu_plugin_v1 {
  courier_plugin_header header;
  const char* description;
  const courier_knob_v1* knobs;
  uint32_t num_knobs;
  uint32_t reserved;

  /* Loads the vendor runtime lazily. A machine without a device is not an
   * init failure: init succeeds and query reports device_count == 0. */
  int (*init)(const courier_host_services_v1* host, void** backend);
  void (*fini)(void* backend);
  const char* (*last_error)(void* backend);
  int (*query)(void* backend, courier_gpu_props_v1* props);

  /* Device memory on `device`. */
  int (*mem_alloc)(void* backend, int device, size_t bytes, void** ptr);
  int (*mem_free)(void* backend, int device, void* ptr);
  /* Pinned host memory mapped into the device's address space (FIFO rings). */
  int (*host_alloc_mapped)(void* backend, size_t bytes, void** host_ptr, void** device_ptr);
  int (*host_free_mapped)(void* backend, void* host_ptr);
  /* Synchronous copy between any two addresses the backend knows. */
  int (*memcpy_sync)(void* backend, void* dst, const void* src, size_t bytes);
  /* Runs fn on grid_dim x block_dim threads and returns when all finished.
   * Only with COURIER_GPU_CAP_HOST_KERNELS; others return -ENOTSUP. */
  int (*launch_host_kernel)(void* backend, const courier_host_kernel_launch_v1* launch);

  /* ---- minor 1 (read only when header.struct_size covers them) ---- */
  /* Device memory for other processes of the host (COURIER_GPU_CAP_IPC):
   * export a handle for a mem_alloc pointer, import a peer's handle (the
   * mapping lives until ipc_close). */
  int (*ipc_export)(void* backend, void* ptr, courier_gpu_ipc_handle_v1* handle);
  int (*ipc_import)(void* backend, int device, const courier_gpu_ipc_handle_v1* handle, void** ptr);
  int (*ipc_close)(void* backend, void* ptr);
  /* A dmabuf file descriptor covering [ptr, ptr + bytes) of device memory,
   * for NIC registration (COURIER_GPU_CAP_DMABUF). The dmabuf starts at the
   * host page that holds ptr (drivers export whole pages), and *offset is
   * ptr's offset from that start; the caller owns the fd and closes it.
   * -EOPNOTSUPP when the driver, device or memory cannot be exported (host
   * memory among them), -EINVAL when [ptr, ptr + bytes) is not inside one
   * device allocation of this backend; last_error says which. The core's
   * host services export through this entry (courier_host_services_v1
   * .dmabuf_export), so NIC plugins reach it without knowing the GPU. */
  int (*dmabuf_export)(void* backend, void* ptr, size_t bytes, int* fd, uint64_t* offset);
  /* Self-test and benchmark kernels (COURIER_GPU_CAP_FIFO_KERNELS); both
   * return once the kernel finished. */
  int (*run_fifo_producers)(void* backend, courier_gpu_fifo_producers_v1* job);
  int (*run_fifo_round_trips)(void* backend, courier_gpu_fifo_round_trips_v1* job);
  /* Pushes command lists from device threads and waits for them
   * (COURIER_GPU_CAP_FIFO_KERNELS). */
  int (*run_command_lists)(void* backend, courier_gpu_command_lists_v1* job);
  /* Expert-parallel kernels (COURIER_GPU_CAP_EP_KERNELS); return once done. */
  int (*run_ep_layout)(void* backend, const courier_gpu_ep_layout_v1* job);

  /* ---- minor 2 (read only when header.struct_size covers them) ----
   * COURIER_GPU_CAP_EP_DIRECT: enqueue on the EP stream of job->device. */
  int (*ep_route)(void* backend, const courier_gpu_ep_route_v1* job);
  int (*ep_signal)(void* backend, const courier_gpu_ep_signal_v1* job);
  int (*ep_wait)(void* backend, const courier_gpu_ep_wait_v1* job);
  int (*ep_ht_dispatch)(void* backend, const courier_gpu_ep_ht_dispatch_v1* job);
  int (*ep_ll_dispatch)(void* backend, const courier_gpu_ep_ll_dispatch_v1* job);
  int (*ep_ll_receive)(void* backend, const courier_gpu_ep_ll_receive_v1* job);
  int (*ep_combine_send)(void* backend, const courier_gpu_ep_combine_send_v1* job);
  int (*ep_reduce)(void* backend, const courier_gpu_ep_reduce_v1* job);
  /* Waits until everything enqueued on the EP stream of `device` ran. */
  int (*ep_sync)(void* backend, int device);

  /* ---- minor 3 (read only when header.struct_size covers them) ----
   * COURIER_GPU_CAP_EP_PROXY: enqueue on the EP stream of job->device
   * (ep_sync, also offered by backends without EP_DIRECT, waits for it). */
  int (*ep_proxy_refuse)(void* backend, const courier_gpu_ep_proxy_refuse_v1* job);
  int (*ep_proxy_ht_dispatch)(void* backend, const courier_gpu_ep_proxy_ht_dispatch_v1* job);
  int (*ep_proxy_ht_receive)(void* backend, const courier_gpu_ep_proxy_ht_receive_v1* job);
  int (*ep_proxy_ll_dispatch)(void* backend, const courier_gpu_ep_proxy_ll_dispatch_v1* job);
  int (*ep_proxy_ll_receive)(void* backend, const courier_gpu_ep_proxy_ll_receive_v1* job);
  int (*ep_proxy_combine)(void* backend, const courier_gpu_ep_proxy_combine_v1* job);
  int (*ep_proxy_reduce)(void* backend, const courier_gpu_ep_proxy_reduce_v1* job);

  /* ---- minor 9 (read only when header.struct_size covers it) ----
   * Chooses the EP stream of `device`. caller = 0: the backend's own
   * (`stream` ignored; the default). caller = 1: the runtime's stream
   * `stream` (a cudaStream_t on CUDA, a hipStream_t on HIP; NULL is the
   * runtime's default stream, as in its own API). The ep_* and ep_proxy_*
   * entries enqueue on the chosen stream from then on, behind what the
   * caller queued there before, and ep_sync waits for it; the caller keeps
   * that stream alive while it is chosen. A backend without streams
   * (gpu-host: its kernels run before their entries return, which keeps
   * any stream's order) accepts either and ignores `stream`. */
  int (*ep_set_stream)(void* backend, int device, int caller, void* stream);

  /* ---- minor 10 (read only when header.struct_size covers it) ----
   * *capturing = 1 when the EP stream of `device` is being captured into a
   * graph (CUDA or HIP stream capture), else 0. The core asks before a call
   * that must read results on the host between its kernels, which a graph
   * cannot hold, and refuses it naming the reason. A backend without
   * streams (gpu-host) answers 0. */
  int (*ep_stream_capturing)(void* backend, int device, int* capturing);

  /* ---- minor 11 (read only when header.struct_size covers it) ----
   * Enqueues a copy of `bytes` bytes from `src` to `dst`, both memory
   * `device` addresses (its own, or mapped host memory), on the EP stream
   * of `device`, behind what is queued there, and returns at once: the
   * bytes are at `dst` in that stream's order (after ep_sync). The core
   * copies a call's results out of the Buffer into the caller's tensors
   * with it (ep::Buffer::copy_result), which a graph can capture. bytes 0
   * does nothing. A backend without streams (gpu-host) copies before it
   * returns. */
  int (*ep_copy)(void* backend, int device, void* dst, const void* src, size_t bytes);

  /* ---- minor 12 (read only when header.struct_size covers them) ----
   * ep_counters fills `out` (out->struct_size set by the caller) with the
   * counts of `device` so far. ep_stamp records the time on the EP stream
   * of `device`, behind what is queued there, as stamp `slot` (0 or 1); it
   * is neither a kernel nor a wait for the counters. ep_stamp_elapsed waits
   * for stamp 1 and gives the GPU time from stamp 0 to stamp 1 in
   * nanoseconds (a CUDA or HIP event pair; gpu-host, whose kernels run
   * before their entries return, stamps the host's clock at the entry).
   * Neither wait counts as a host wait. */
  int (*ep_counters)(void* backend, int device, courier_gpu_ep_counters_v1* out);
  int (*ep_stamp)(void* backend, int device, uint32_t slot);
  int (*ep_stamp_elapsed)(void* backend, int device, uint64_t* ns);

  /* ---- minor 14 (read only when header.struct_size covers it) ----
   * Enqueues on the EP stream of `device`, behind what is queued there, a
   * kernel that spins for `microseconds`, and returns at once. Benchmarks
   * put it before ep_stamp slot 0, so that the host queues the call while
   * the GPU is still held and the stamps then time the GPU alone (not the
   * host's time to launch the call's first kernel). It is not counted in
   * ep_counters' kernel_launches. A backend whose kernels run before its
   * entries return (gpu-host) does nothing and returns 0. */
  int (*ep_hold)(void* backend, int device, uint32_t microseconds);

  /* ---- minor 15 (read only when header.struct_size covers them) ----
   * The parts (above): a core of minor 15 or later calls the plugin through
   * these alone. runtime is required; NULL selftest or ep: absent. */
  const courier_gpu_runtime_part_v1* runtime;
  const courier_gpu_selftest_part_v1* selftest;
  const courier_gpu_ep_part_v1* ep;
} courier_gpu_plugin_v1;

typedef const courier_gpu_plugin_v1* (*courier_gpu_backend_v1_fn)(void);

#ifdef __cplusplus
}
#endif
#endif
