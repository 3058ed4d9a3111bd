// The kernels of the EP proxy path (GPU ABI minor 3, docs/ep.md "Proxy
// path"), written once: gpu-cuda and gpu-hip wrap each body in a
// __global__ function, gpu-host runs it on CPU threads. Send kernels route
// tokens and pack (and quantize) rows into the registered send area, one
// region per destination laid out as the destination wants it; the last
// block to finish pushes each region as WRITE commands into the FIFO
// channels and announces the phase to every rank with write-then-atomic (a
// record, then atomics that sum to COURIER_GPU_EP_SIGNAL_STEP, one behind
// the rows of each channel used). Receive kernels wait on the signal words
// on the device, then unpack or reduce.
//
// Channels: the rows to rank d travel on lanes_per_rank() channels
// starting at d * lanes_per_rank() (mod the channel count), a piece of the
// region each, so a destination's rows spread over several channels and
// proxy threads when there are more channels than ranks.
#pragma once

#include <cstdint>

#include "courier/abi/gpu_v1.h"
#include "courier/transfer_cmd.hpp"
#include "gpu/channel_descriptor.hpp"
#include "gpu/ep/element_codec.hpp"
#include "gpu/ep/kernel_thread.hpp"
#include "gpu/ep/logfmt.hpp"
#include "gpu/fifo_push.hpp"

namespace courier::device::ep {

// A block's shared memory (gpu-host: one per block, from the launcher).
struct ProxyShared {
  alignas(16) uint32_t scan[1024];         // block_exclusive_scan; 512 u64 in LL dispatch's pack
  uint32_t a[COURIER_GPU_EP_MAX_EXPERTS];  // counters per rank or expert
  uint32_t b[COURIER_GPU_EP_MAX_EXPERTS + 1];
  uint32_t flag;
};

using Proxy = courier_gpu_ep_proxy_v1;

// An offset in the data window, and one in the control window.
COURIER_DEVICE_INLINE std::byte* at(const Proxy& f, uint64_t off) {
  return static_cast<std::byte*>(f.base) + off;
}
COURIER_DEVICE_INLINE std::byte* ctl(const Proxy& f, uint64_t off) {
  return static_cast<std::byte*>(f.control) + off;
}
COURIER_DEVICE_INLINE uint32_t status_of(const Proxy& f) { return load_u32(f.status); }
COURIER_DEVICE_INLINE uint64_t align16(uint64_t v) { return (v + 15) / 16 * 16; }

// Whether rows to rank d go through the channels (else: stored directly).
COURIER_DEVICE_INLINE bool through_channels(const Proxy& f, uint32_t d) {
  return d != f.rank || f.loopback != 0;
}
COURIER_DEVICE_INLINE uint32_t lanes_per_rank(const Proxy& f) {
  const uint32_t lanes = f.num_channels / f.num_ranks;
  return lanes > 0 ? lanes : 1;
}
COURIER_DEVICE_INLINE uint32_t channel_of(const Proxy& f, uint32_t d, uint32_t lane) {
  return (d * lanes_per_rank(f) + lane) % f.num_channels;
}

// Commands for one channel pushed as one batch (one ticket reservation,
// one wait for room, one fence: a push costs a GPU thread microseconds of
// round trips to host memory). Flushes itself when full; the caller
// flushes at the end. Order within the batch is channel order.
struct CmdBatch {
  static constexpr uint32_t kCapacity = 4;
  const Proxy& f;
  uint32_t c;
  TransferCmd cmds[kCapacity];
  uint32_t n = 0;
  bool failed = false;  // the channel refused or a command did not encode: push nothing more
  COURIER_DEVICE_INLINE CmdBatch(const Proxy& fifo, uint32_t channel) : f(fifo), c(channel) {}
  COURIER_DEVICE_INLINE void fail() {
    failed = true;
    set_status(f.status, COURIER_GPU_EP_STATUS_CHANNEL | c);
  }
  COURIER_DEVICE_INLINE void flush() {
    if (n != 0 && !failed &&
        push_batch(from_abi(f.channels[c]), cmds, n, nullptr) != PushStatus::ok) {
      fail();
    }
    n = 0;
  }
  COURIER_DEVICE_INLINE void add(const TransferCmd& cmd) {
    if (n == kCapacity) flush();
    if (!failed) cmds[n++] = cmd;
  }
  // WRITEs [src_off, +bytes) of `window` here (of source registration
  // `source` - 1 when not 0) to dst_off of `window` at rank d.
  COURIER_DEVICE_INLINE void write(uint32_t window, uint32_t d, uint64_t src_off, uint64_t dst_off,
                                   uint64_t bytes, uint32_t source = 0) {
    for (uint64_t done = 0; done < bytes;) {
      const uint64_t len =
          bytes - done < TransferCmd::kMaxLength ? bytes - done : TransferCmd::kMaxLength;
      WriteCmdArgs a;
      a.dst_rank = d;
      a.window = window;
      a.src_offset = src_off + done;
      a.dst_offset = dst_off + done;
      a.length = len;
      a.source = static_cast<uint8_t>(source);
      TransferCmd cmd;
      if (encode_write(a, &cmd) != CmdStatus::ok) {
        fail();
        return;
      }
      add(cmd);
      done += len;
    }
  }
  // A u64 add of `operand` at `off` of the control window at rank d.
  COURIER_DEVICE_INLINE void add_u64(uint32_t d, uint64_t off, uint32_t operand) {
    TransferCmd cmd;
    if (encode_atomic(d, f.control_window, off, AtomicOp::add_u64, operand, &cmd) !=
        CmdStatus::ok) {
      fail();
      return;
    }
    add(cmd);
  }
};

// CmdBatch::write on channel c, pushed at once.
COURIER_DEVICE_INLINE void push_write(const Proxy& f, uint32_t window, uint32_t c, uint32_t d,
                                      uint64_t src_off, uint64_t dst_off, uint64_t bytes,
                                      uint32_t source = 0) {
  CmdBatch batch(f, c);
  batch.write(window, d, src_off, dst_off, bytes, source);
  batch.flush();
}

COURIER_DEVICE_INLINE void push_add(const Proxy& f, uint32_t c, uint32_t d, uint64_t off,
                                    uint32_t operand) {
  CmdBatch batch(f, c);
  batch.add_u64(d, off, operand);
  batch.flush();
}

// Before a send kernel writes the send area: the WRITEs that read it last
// time have completed. Every thread calls it.
COURIER_DEVICE_INLINE void wait_send_area(const KernelThread& th, const Proxy& f) {
  for (uint32_t c = th.thread; c < f.num_channels; c += th.block_dim) {
    const uint64_t fence = load_relaxed(f.reuse_fence + c);
    if (fence == 0) continue;
    if (wait_completed(from_abi(f.channels[c]), fence) != PushStatus::ok) {
      set_status(f.status, COURIER_GPU_EP_STATUS_CHANNEL | c);
    }
  }
  th.sync();
}

// What a send kernel waits for before it writes: the send area free
// (wait_send_area) and, with `release`, every destination done reading
// what this rank sent it two calls ago (the u64 at release_off + d * 8
// here reached release_target). On a GPU a one-block kernel does it first,
// like the receive's wait (see wait_all).
COURIER_DEVICE_INLINE void send_wait(const KernelThread& th, const Proxy& f, bool release,
                                     uint64_t release_off, uint64_t release_target);

// Counts the block as done; true in the last block of the grid, whose
// threads then see every other block's stores.
COURIER_DEVICE_INLINE bool last_block(const KernelThread& th, const Proxy& f, ProxyShared* sh) {
  release_fence_system();
  th.sync();
  if (th.thread == 0) sh->flag = fetch_add_acq_rel(f.done, 1) == th.grid_dim - 1 ? 1 : 0;
  th.sync();
  return sh->flag != 0;
}

// The last block's epilogue: the send area's fence, the status mirror, and
// the done counter back at 0 for the next launch.
COURIER_DEVICE_INLINE void finish(const KernelThread& th, const Proxy& f, bool leave_fence) {
  th.sync();
  if (th.thread != 0) return;
  if (leave_fence) {
    for (uint32_t c = 0; c < f.num_channels; ++c) {
      store_relaxed(f.reuse_fence + c, load_relaxed(f.channels[c].head));
    }
  }
  if (f.status_host != nullptr) *const_cast<volatile uint32_t*>(f.status_host) = status_of(f);
  *f.done = 0;
  release_fence_system();
}

// The signal of a phase (last block): the records staged at staging_off go
// to every rank, then atomics summing to the step on the `lanes_used`
// lanes that carried rows. Rows to this rank itself were stored directly,
// so its record is too (unless loopback).
// `before(batch, d)` may add commands for rank d ahead of its record, in
// the same batch of lane 0 (a push saved).
struct NothingBefore {
  COURIER_DEVICE_INLINE void operator()(struct CmdBatch&, uint32_t) const {}
};
template <class Before = NothingBefore>
COURIER_DEVICE_INLINE void signal_all(const KernelThread& th, const Proxy& f, uint64_t staging_off,
                                      uint64_t record_off, uint64_t signal_off, uint32_t lanes_used,
                                      uint64_t release_off, Before before = {}) {
  const uint64_t record_bytes = uint64_t{f.record_words} * 4;
  // A thread per (rank, lane): each push costs a GPU thread microseconds
  // (a fenced store to host memory), so they go in parallel. The record
  // goes ahead of lane 0's atomic, on its channel, and the signal reaches
  // the step only with every lane's.
  for (uint32_t i = th.thread; i < f.num_ranks * lanes_used; i += th.block_dim) {
    const uint32_t d = i / lanes_used, j = i % lanes_used;
    const uint64_t staged = staging_off + d * record_bytes;
    const uint64_t record = record_off + f.rank * record_bytes;
    if (!through_channels(f, d)) {
      if (j != 0) continue;
      lanes_copy(ctl(f, record), ctl(f, staged), record_bytes, 0, 1);
      release_fence_system();
      add_release(reinterpret_cast<uint64_t*>(ctl(f, signal_off + f.rank * 8ull)),
                  COURIER_GPU_EP_SIGNAL_STEP);
      if (release_off != 0) {
        add_release(reinterpret_cast<uint64_t*>(ctl(f, release_off + f.rank * 8ull)),
                    COURIER_GPU_EP_SIGNAL_STEP);
      }
      continue;
    }
    CmdBatch batch(f, channel_of(f, d, j));
    if (j == 0) before(batch, d);
    if (j == 0) batch.write(f.control_window, d, staged, record, record_bytes);
    batch.add_u64(d, signal_off + f.rank * 8ull,
                  j + 1 < lanes_used ? 1 : COURIER_GPU_EP_SIGNAL_STEP - j);
    if (j == 0 && release_off != 0) {
      batch.add_u64(d, release_off + f.rank * 8ull, COURIER_GPU_EP_SIGNAL_STEP);
    }
    batch.flush();
  }
}

// WRITEs `rows` rows of row_bytes from src_off here (of the data window,
// or of source registration `source` - 1) to dst_off at rank d, split into
// `lanes` pieces on d's channels (their proxies and NIC queues work in
// parallel); signal_all then adds an atomic behind each.
COURIER_DEVICE_INLINE void push_region(const Proxy& f, uint32_t d, uint64_t src_off,
                                       uint64_t dst_off, uint64_t rows, uint64_t row_bytes,
                                       uint32_t lanes, uint32_t source = 0) {
  const uint64_t per = (rows + lanes - 1) / lanes;
  for (uint32_t j = 0; j < lanes && j * per < rows; ++j) {
    const uint64_t n = rows - j * per < per ? rows - j * per : per;
    push_write(f, f.window, channel_of(f, d, j), d, src_off + j * per * row_bytes,
               dst_off + j * per * row_bytes, n * row_bytes, source);
  }
}

// Waits until *word reached target: false (and the status set) on a
// timeout, when the channel to that rank failed, or when another thread
// already failed the call.
COURIER_DEVICE_INLINE bool wait_word(const Proxy& f, const uint64_t* word, uint64_t target,
                                     uint32_t rank) {
  const uint64_t start = now_ns();
  PollPause pause;
  for (uint32_t spins = 0;; ++spins) {
    if (load_acquire(word) >= target) return true;
    if ((spins & 63u) == 63u) {
      if (status_of(f) != 0) return false;
      for (uint32_t j = 0; j < lanes_per_rank(f); ++j) {  // the rank's channels
        const uint32_t c = channel_of(f, rank, j);
        if (is_fatal_channel_error(
                load_relaxed(&static_cast<FifoControl*>(f.channels[c].control)->error))) {
          set_status(f.status, COURIER_GPU_EP_STATUS_CHANNEL | c);
          return false;
        }
      }
      if (now_ns() - start > f.timeout_ns) {
        set_status(f.status, COURIER_GPU_EP_STATUS_TIMEOUT | rank);
        return false;
      }
    }
    pause.pause();
  }
}

COURIER_DEVICE_INLINE void send_wait(const KernelThread& th, const Proxy& f, bool release,
                                     uint64_t release_off, uint64_t release_target) {
  const WaitClock clock(th);
  for (uint32_t d = th.thread; release && d < f.num_ranks; d += th.block_dim) {
    wait_word(f, reinterpret_cast<const uint64_t*>(ctl(f, release_off + d * 8ull)), release_target,
              d);
  }
  wait_send_area(th, f);
}

// A job's target with its epoch word (GPU ABI 1.10, "Epochs" in gpu_v1.h):
// the calls of its phase and parity so far x the step; without, its own.
COURIER_DEVICE_INLINE uint64_t target_of(const uint64_t* epoch, uint64_t target,
                                         uint32_t ahead = 0) {
  return epoch != nullptr ? (*epoch + ahead) * uint64_t{COURIER_GPU_EP_SIGNAL_STEP} : target;
}
// A send half's last block, once it signalled: one call more of its phase
// and parity (the receive half after it on the stream reads the new value).
COURIER_DEVICE_INLINE void advance_epoch(const KernelThread& th, uint64_t* epoch) {
  if (epoch != nullptr && th.thread == 0) *epoch += 1;
}

// The high-throughput dispatch's counts wait: its epoch word is advanced by
// the rows' last block, after this wait, so the call's target is one ahead.
COURIER_DEVICE_INLINE uint64_t notify_target_of(const courier_gpu_ep_proxy_ht_dispatch_v1& job) {
  return target_of(job.epoch, job.notify_target, 1);
}

// Every rank's signal of the phase, then their records' states; the
// status says whether the call goes on (block_goes_on). With `sends`, also
// every command this rank pushed before (wait_send_area): they read the
// caller's memory, which is the caller's again once the call returns.
// Every thread calls it. The receive bodies
// wait themselves on a CPU; on a GPU a one-block kernel waits first (`waited`), because blocks
// spinning on every SM would keep out the kernels a loopback copy or a copy-engine atomic may need.
// `wait_cost` (GPU ABI 1.9): when not NULL, block 0 adds to wait_cost[r] the nanoseconds from
// the start of the wait until rank r's signal was seen.
COURIER_DEVICE_INLINE bool wait_all(const KernelThread& th, const Proxy& f, uint64_t signal_off,
                                    uint64_t record_off, uint64_t target, bool sends = false,
                                    int64_t* wait_cost = nullptr) {  // always true
  const WaitClock clock(th);
  const uint64_t start = wait_cost != nullptr ? now_ns() : 0;
  if (status_of(f) == 0) {
    for (uint32_t r = th.thread; r < f.num_ranks; r += th.block_dim) {
      if (!wait_word(f, reinterpret_cast<const uint64_t*>(ctl(f, signal_off + r * 8ull)), target,
                     r)) {
        break;
      }
      if (wait_cost != nullptr && th.block == 0) {
        fetch_add_relaxed(reinterpret_cast<uint64_t*>(wait_cost + r), now_ns() - start);
      }
      const auto* record =
          reinterpret_cast<const uint32_t*>(ctl(f, record_off + r * uint64_t{f.record_words} * 4));
      if (load_u32(record) == COURIER_GPU_EP_RECORD_REFUSED) {
        set_status(f.status, COURIER_GPU_EP_STATUS_REFUSED_BY | r);
      }
    }
  }
  th.sync();
  if (sends) wait_send_area(th, f);
  return true;
}

// Whether the block goes on with the call: one read of the status, shared
// by the block's threads (another block may set it any time, and the
// threads must take the same branches around barriers). Every thread calls it.
COURIER_DEVICE_INLINE bool block_goes_on(const KernelThread& th, const Proxy& f, ProxyShared* sh) {
  th.sync();
  if (th.thread == 0) sh->flag = status_of(f) == 0 ? 1 : 0;
  th.sync();
  const bool go = sh->flag != 0;
  th.sync();
  return go;
}

// The wait of a receive body (`waited`: a kernel before it did it), then
// block_goes_on.
COURIER_DEVICE_INLINE bool received(const KernelThread& th, const Proxy& f, ProxyShared* sh,
                                    bool waited, uint64_t signal_off, uint64_t record_off,
                                    uint64_t target, bool sends = false,
                                    int64_t* wait_cost = nullptr) {
  if (!waited) wait_all(th, f, signal_off, record_off, target, sends, wait_cost);
  return block_goes_on(th, f, sh);
}

COURIER_DEVICE_INLINE const uint32_t* record_of(const Proxy& f, uint64_t record_off, uint32_t r) {
  return reinterpret_cast<const uint32_t*>(ctl(f, record_off + r * uint64_t{f.record_words} * 4));
}

// ---- ep_proxy_refuse: one block.
COURIER_DEVICE_INLINE void refuse_body(const courier_gpu_ep_proxy_refuse_v1& job,
                                       const KernelThread& th) {
  const Proxy& f = job.fifo;
  // The staging too: the last records may be in flight. A refused
  // low-latency dispatch overwrites records a receiver of two calls ago may
  // still read: wait for its release like a dispatch would.
  send_wait(th, f, job.release_off != 0, job.release_off, target_of(job.epoch, job.release_target));
  for (uint64_t i = th.thread; i < uint64_t{f.num_ranks} * f.record_words; i += th.block_dim) {
    reinterpret_cast<uint32_t*>(ctl(f, job.staging_off))[i] =
        i % f.record_words == 0 ? COURIER_GPU_EP_RECORD_REFUSED : 0;
  }
  release_fence_system();
  th.sync();
  signal_all(th, f, job.staging_off, job.record_off, job.signal_off, 1, job.release_off);
  th.sync();
  advance_epoch(th, job.epoch);
  if (th.thread != 0) return;
  for (uint32_t c = 0; c < f.num_channels; ++c) {
    store_relaxed(f.reuse_fence + c, load_relaxed(f.channels[c].head));
  }
  if (f.status_host != nullptr) *const_cast<volatile uint32_t*>(f.status_host) = status_of(f);
}

// Adds to counts[d] the tokens t < tokens with in_rank[t][d] set, each
// thread counting its share first: one shared atomic per thread and rank
// instead of one per token.
COURIER_DEVICE_INLINE void count_tokens_per_rank(const KernelThread& th, const uint8_t* in_rank,
                                                 uint32_t ranks, uint32_t tokens,
                                                 uint32_t* counts) {
  for (uint32_t d = 0; d < ranks; ++d) {
    uint32_t mine = 0;
    for (uint32_t t = th.thread; t < tokens; t += th.block_dim) {
      mine += in_rank[uint64_t{t} * ranks + d] != 0 ? 1 : 0;
    }
    if (mine != 0) add_block(&counts[d], mine);
  }
}

// Adds to counts[e] the tokens [t0, t1) that chose expert e, once per
// token however often its row lists e.
COURIER_DEVICE_INLINE void count_tokens_per_expert(const KernelThread& th, const int64_t* topk_idx,
                                                   uint32_t K, uint32_t E, uint32_t t0, uint32_t t1,
                                                   uint32_t* counts) {
  for (uint32_t t = t0 + th.thread; topk_idx != nullptr && t < t1; t += th.block_dim) {
    const int64_t* row = topk_idx + uint64_t{t} * K;
    for (uint32_t k = 0; k < K; ++k) {
      const int64_t e = row[k];
      if (e < 0 || e >= static_cast<int64_t>(E)) continue;
      bool repeated = false;
      for (uint32_t i = 0; i < k; ++i) repeated |= row[i] == e;
      if (!repeated) add_block(&counts[e], 1);
    }
  }
}

// ---- ep_proxy_ht_dispatch (counts first). On a GPU two bodies, each over
// its own grid, a one-block wait between them: pack (each block counts its
// tokens into the counters, the last one sends every rank the records;
// then slots and a lane group per token, while the counts travel) and rows
// (once every rank's counts arrived, each block pushes the runs of its
// tokens to their final rows). On CPU threads one body does both, batch by
// batch (ht_dispatch_host_body).

// Token t's row, with a lane group.
COURIER_DEVICE_INLINE void ht_pack_row(const courier_gpu_ep_proxy_ht_dispatch_v1& job,
                                       std::byte* row, uint32_t t, uint32_t lane, uint32_t lanes) {
  lanes_copy(row, static_cast<const std::byte*>(job.x) + uint64_t{t} * job.row_bytes, job.row_bytes,
             lane, lanes);
}

// Token t's meta (scales, int32 ids, float weights), with a lane group.
COURIER_DEVICE_INLINE void ht_pack_meta(const courier_gpu_ep_proxy_ht_dispatch_v1& job,
                                        std::byte* meta, uint32_t t, uint32_t lane,
                                        uint32_t lanes) {
  const uint32_t K = job.topk, E = job.num_experts;
  if (job.meta_bytes == 0) return;
  const uint64_t ids_at = uint64_t{job.scale_cols} * 4, weights_at = ids_at + uint64_t{K} * 4;
  if (job.x_scales != nullptr) {
    lanes_copy(meta, job.x_scales + uint64_t{t} * job.scale_cols, ids_at, lane, lanes);
  }
  for (uint32_t k = lane; k < K; k += lanes) {
    const int64_t e = job.topk_idx != nullptr ? job.topk_idx[uint64_t{t} * K + k] : -1;
    reinterpret_cast<int32_t*>(meta + ids_at)[k] =
        e >= 0 && e < static_cast<int64_t>(E) ? static_cast<int32_t>(e) : -1;
    reinterpret_cast<float*>(meta + weights_at)[k] =
        job.topk_weights != nullptr ? job.topk_weights[uint64_t{t} * K + k] : 0.0f;
  }
}

// Counts tokens [t0, t1) into the counters; the last block to finish
// counting sends every rank the records (and resets the counters).
COURIER_DEVICE_INLINE void ht_count(const courier_gpu_ep_proxy_ht_dispatch_v1& job,
                                    const KernelThread& th, ProxyShared* sh, uint32_t t0,
                                    uint32_t t1) {
  const Proxy& f = job.fifo;
  const uint32_t R = f.num_ranks, K = job.topk, E = job.num_experts;
  const uint32_t L = E / R;
  if (job.topk_idx != nullptr) {  // the indices of this block's tokens
    for (uint32_t i = t0 * K + th.thread; i < t1 * K; i += th.block_dim) {
      const int64_t e = job.topk_idx[i];
      if (e < -1 || e >= static_cast<int64_t>(E)) {
        compare_exchange(f.bad_index, 0, (uint64_t{i / K} + 1) << 32 | (i % K));
        set_status(f.status, COURIER_GPU_EP_STATUS_BAD_INDEX);
      }
    }
  }
  // Each block adds its tokens' counts to the counters once: one pass over
  // all tokens in the last block alone took half a kernel.
  auto* counters = reinterpret_cast<int32_t*>(at(f, job.counts_off));
  for (uint32_t i = th.thread; i < E; i += th.block_dim) sh->b[i] = 0;
  for (uint32_t d = th.thread; d < R; d += th.block_dim) sh->scan[d] = 0;
  th.sync();
  count_tokens_per_expert(th, job.topk_idx, K, E, t0, t1, sh->b);
  count_tokens_per_rank(th, job.in_rank + uint64_t{t0} * R, R, t1 - t0, sh->scan);
  th.sync();
  for (uint32_t i = th.thread; i < E; i += th.block_dim) {
    if (sh->b[i] != 0) add_relaxed_gpu(counters + i, static_cast<int32_t>(sh->b[i]));
  }
  for (uint32_t d = th.thread; d < R; d += th.block_dim) {
    if (sh->scan[d] != 0) add_relaxed_gpu(counters + E + d, static_cast<int32_t>(sh->scan[d]));
  }
  if (!last_block(th, f, sh)) return;
  auto* counted = reinterpret_cast<uint32_t*>(counters);
  for (uint32_t i = th.thread; i < E; i += th.block_dim) sh->a[i] = load_u32(counted + i);
  for (uint32_t d = th.thread; d < R; d += th.block_dim) sh->b[d] = load_u32(counted + E + d);
  th.sync();
  for (uint32_t i = th.thread; i < E + R; i += th.block_dim) counted[i] = 0;
  const uint32_t state = status_of(f) != 0 ? COURIER_GPU_EP_RECORD_REFUSED : 0;
  auto staged = [&](uint32_t d) {
    return reinterpret_cast<uint32_t*>(ctl(f, job.staging_off + d * uint64_t{f.record_words} * 4));
  };
  for (uint32_t i = th.thread; i < R * L; i += th.block_dim) staged(i / L)[2 + i % L] = sh->a[i];
  for (uint32_t i = th.thread; i < R * R; i += th.block_dim) {
    staged(i / R)[2 + L + i % R] = sh->b[i % R];
  }
  for (uint32_t d = th.thread; d < R; d += th.block_dim) {
    staged(d)[0] = state;
    staged(d)[1] = sh->b[d];
  }
  release_fence_system();
  th.sync();
  signal_all(th, f, job.staging_off, job.notify_record_off, job.notify_signal_off, 1, 0);
  finish(th, f, false);
}

// This block's contiguous range of tokens [t0, t1) of `tokens`.
COURIER_DEVICE_INLINE void block_range(const KernelThread& th, uint32_t tokens, uint32_t* t0,
                                       uint32_t* t1) {
  const uint32_t per = (tokens + th.grid_dim - 1) / th.grid_dim;
  *t0 = th.block * per < tokens ? th.block * per : tokens;
  *t1 = *t0 + per < tokens ? *t0 + per : tokens;
}

// The slots of tokens [t0, t1) (the block's range), in token order: where
// its slots begin at each rank is the tokens before it, counted per thread
// and added once each.
COURIER_DEVICE_INLINE void ht_slots(const courier_gpu_ep_proxy_ht_dispatch_v1& job,
                                    const KernelThread& th, ProxyShared* sh, uint32_t t0,
                                    uint32_t t1) {
  const uint32_t R = job.fifo.num_ranks;
  for (uint32_t d = th.thread; d < R; d += th.block_dim) sh->a[d] = 0;
  th.sync();
  count_tokens_per_rank(th, job.in_rank, R, t0, sh->a);
  th.sync();
  for (uint32_t s0 = t0; s0 < t1; s0 += th.block_dim) {
    const uint32_t t = s0 + th.thread;
    for (uint32_t d = 0; d < R; ++d) {
      const uint32_t in = t < t1 && job.in_rank[uint64_t{t} * R + d] != 0 ? 1 : 0;
      uint32_t total = 0;
      const uint32_t before = block_exclusive_scan(th, sh->scan, in, &total);
      if (t < t1) {
        job.slots[uint64_t{t} * R + d] = in != 0 ? static_cast<int32_t>(sh->a[d] + before) : -1;
      }
      th.sync();
      if (th.thread == 0) sh->a[d] += total;
      th.sync();
    }
  }
}

// Packs tokens [t0, t1) with the block's lane groups: a token's row once;
// its meta once per destination, at its slot in that destination's meta
// region (one WRITE per destination carries them all: a WRITE per run
// would double the commands the proxies handle).
COURIER_DEVICE_INLINE void ht_pack_range(const courier_gpu_ep_proxy_ht_dispatch_v1& job,
                                         const KernelThread& th, uint32_t t0, uint32_t t1) {
  const Proxy& f = job.fifo;
  const uint32_t R = f.num_ranks;
  for (uint32_t t = t0 + th.group(); t < t1; t += th.groups()) {
    bool sent = false;
    for (uint32_t d = 0; d < R; ++d) {
      const int32_t slot = job.slots[uint64_t{t} * R + d];
      if (slot < 0 || !through_channels(f, d)) continue;
      sent = true;
      ht_pack_meta(
          job,
          at(f, job.send_meta_off +
                    (uint64_t{d} * job.max_tokens + static_cast<uint32_t>(slot)) * job.meta_bytes),
          t, th.lane(), kLanes);
    }
    if (sent && job.row_source == 0) {  // else the WRITEs read x itself
      ht_pack_row(job, at(f, job.send_off + uint64_t{t} * job.row_bytes), t, th.lane(), kLanes);
    }
  }
  th.sync();
}

// Block b takes a contiguous range of tokens: counts them (ht_count: the
// last block sends the records), gives them their slots, packs them.
// `waited`: a kernel before it waited for the send area (send_wait), which
// the staging and the pack reuse.
COURIER_DEVICE_INLINE void ht_pack_body(const courier_gpu_ep_proxy_ht_dispatch_v1& job,
                                        const KernelThread& th, ProxyShared* sh, bool waited) {
  uint32_t t0 = 0, t1 = 0;
  block_range(th, job.tokens, &t0, &t1);
  if (!waited && job.sends_settled == 0) send_wait(th, job.fifo, false, 0, 0);
  ht_count(job, th, sh, t0, t1);
  ht_slots(job, th, sh, t0, t1);
  ht_pack_range(job, th, t0, t1);
}

// Once every rank's counts arrived: base[d] (sh->b), the rows ranks before
// this one send d; open[d] (after them) no run; whether the block goes on.
COURIER_DEVICE_INLINE bool ht_bases(const courier_gpu_ep_proxy_ht_dispatch_v1& job,
                                    const KernelThread& th, ProxyShared* sh) {
  const Proxy& f = job.fifo;
  const uint32_t R = f.num_ranks, L = job.num_experts / R;
  for (uint32_t d = th.thread; d < R; d += th.block_dim) {
    uint32_t sum = 0;
    for (uint32_t s = 0; s < f.rank; ++s) {
      sum += load_u32(record_of(f, job.notify_record_off, s) + 2 + L + d);
    }
    sh->b[d] = sum;
    sh->b[R + d] = 0xFFFFFFFFu;
    const uint32_t mine = load_u32(record_of(f, job.notify_record_off, f.rank) + 2 + L + d);
    if (sum + uint64_t{mine} > job.recv_rows) {
      set_status(f.status, COURIER_GPU_EP_STATUS_OVERFLOW | d);
    }
  }
  return block_goes_on(th, f, sh);
}

// Finds the runs of tokens [r0, r1) per destination, block_dim tokens at a
// time (a run open at the end of a step carries over), and pushes each as
// a WRITE to its final rows; *pushed counts the block's runs (the lane of
// the next).
COURIER_DEVICE_INLINE void ht_push_runs(const courier_gpu_ep_proxy_ht_dispatch_v1& job,
                                        const KernelThread& th, ProxyShared* sh, uint32_t r0,
                                        uint32_t r1, uint32_t* pushed) {
  const Proxy& f = job.fifo;
  const uint32_t R = f.num_ranks, spread = lanes_per_rank(f);
  const uint32_t* base = sh->b;
  auto* open = reinterpret_cast<int32_t*>(sh->b + R);
  auto slot_of = [&](uint32_t t, uint32_t d) { return job.slots[uint64_t{t} * R + d]; };
  for (uint32_t c0 = r0; c0 < r1; c0 += th.block_dim) {
    const uint32_t t = c0 + th.thread;
    for (uint32_t d = 0; d < R; ++d) {
      if (!through_channels(f, d)) continue;
      auto in = [&](uint32_t u) { return u >= r0 && u < r1 && slot_of(u, d) >= 0; };
      const bool here = t < r1 && in(t);
      const uint32_t starts_here = here && (t == r0 || !in(t - 1)) ? 1 : 0;
      const uint32_t ends_here = here && !in(t + 1) ? 1 : 0;
      uint32_t starts = 0, ends = 0;
      const uint32_t si = block_exclusive_scan(th, sh->scan, starts_here, &starts);
      const uint32_t ei = block_exclusive_scan(th, sh->scan, ends_here, &ends);
      if (starts_here != 0) sh->a[si] = t;
      if (ends_here != 0) sh->a[th.block_dim + ei] = t;
      th.sync();
      // The k-th end closes the run open from the last step, then the
      // starts in order.
      const uint32_t carried = open[d] >= 0 ? 1 : 0;
      for (uint32_t k = th.thread; k < ends; k += th.block_dim) {
        const uint32_t first = k < carried ? static_cast<uint32_t>(open[d]) : sh->a[k - carried];
        const uint32_t last = sh->a[th.block_dim + k];
        const uint64_t row = base[d] + static_cast<uint32_t>(slot_of(first, d));
        CmdBatch batch(f, channel_of(f, d, (th.block + *pushed + k) % spread));
        batch.write(f.window, d,
                    (job.row_source != 0 ? 0 : job.send_off) + uint64_t{first} * job.row_bytes,
                    job.recv_off + row * job.row_bytes, uint64_t{last - first + 1} * job.row_bytes,
                    job.row_source);
        batch.flush();
      }
      th.sync();
      if (th.thread == 0 && starts > 0) {
        open[d] = starts + carried > ends ? static_cast<int32_t>(sh->a[starts - 1]) : -1;
      } else if (th.thread == 0 && ends > 0) {
        open[d] = -1;
      }
      *pushed += ends;
      th.sync();
    }
  }
}

// Stores the rows this rank keeps (no loopback) among tokens t = first,
// first + step, ... < end, from x to their final rows.
COURIER_DEVICE_INLINE void ht_keep_own_rows(const courier_gpu_ep_proxy_ht_dispatch_v1& job,
                                            const KernelThread& th, const ProxyShared* sh,
                                            uint32_t first, uint32_t step, uint32_t end) {
  const Proxy& f = job.fifo;
  if (through_channels(f, f.rank)) return;
  for (uint32_t t = first; t < end; t += step) {
    const int32_t slot = job.slots[uint64_t{t} * f.num_ranks + f.rank];
    if (slot < 0) continue;
    const uint64_t row = sh->b[f.rank] + static_cast<uint32_t>(slot);
    ht_pack_row(job, at(f, job.recv_off + row * job.row_bytes), t, th.lane(), kLanes);
    ht_pack_meta(job, at(f, job.recv_meta_off + row * job.meta_bytes), t, th.lane(), kLanes);
  }
}

// The last block: each destination's metas in one WRITE on its lane 0,
// ahead of the rows' record (a state word) and the signal.
COURIER_DEVICE_INLINE void ht_rows_signal(const courier_gpu_ep_proxy_ht_dispatch_v1& job,
                                          const KernelThread& th, ProxyShared* sh) {
  const Proxy& f = job.fifo;
  const uint32_t R = f.num_ranks, L = job.num_experts / R;
  if (!last_block(th, f, sh)) return;
  const uint32_t state = status_of(f) != 0 ? COURIER_GPU_EP_RECORD_REFUSED : 0;
  for (uint32_t d = th.thread; d < R; d += th.block_dim) {
    *reinterpret_cast<uint32_t*>(ctl(f, job.rows_staging_off + d * uint64_t{f.record_words} * 4)) =
        state;
  }
  release_fence_system();
  th.sync();
  const uint32_t* mine = record_of(f, job.notify_record_off, f.rank) + 2 + L;
  const uint32_t* base = sh->b;
  signal_all(th, f, job.rows_staging_off, job.record_off, job.signal_off, lanes_per_rank(f), 0,
             [&](CmdBatch& batch, uint32_t d) {
               const uint32_t n = load_u32(mine + d);
               if (state != 0 || n == 0 || job.meta_bytes == 0) return;
               batch.write(f.window, d,
                           job.send_meta_off + uint64_t{d} * job.max_tokens * job.meta_bytes,
                           job.recv_meta_off + uint64_t{base[d]} * job.meta_bytes,
                           uint64_t{n} * job.meta_bytes);
             });
  advance_epoch(th, job.epoch);
  finish(th, f, true);
}

// Rows, after every rank's counts (`waited`: a kernel before it waited).
// Blocks below ceil(tokens / run_tokens) push the runs of tokens [block *
// run_tokens, +run_tokens); every block stores its share of the rows this
// rank keeps; the last block signals.
COURIER_DEVICE_INLINE void ht_rows_body(const courier_gpu_ep_proxy_ht_dispatch_v1& job,
                                        const KernelThread& th, ProxyShared* sh,
                                        uint32_t run_tokens, bool waited) {
  const Proxy& f = job.fifo;
  const uint32_t T = job.tokens;
  if (!waited) {
    wait_all(th, f, job.notify_signal_off, job.notify_record_off, notify_target_of(job));
  }
  const bool go = ht_bases(job, th, sh);
  const uint32_t r0 = th.block * run_tokens;
  uint32_t pushed = 0;
  if (go && r0 < T)
    ht_push_runs(job, th, sh, r0, T - r0 < run_tokens ? T : r0 + run_tokens, &pushed);
  if (go) {
    ht_keep_own_rows(job, th, sh, th.block * th.groups() + th.group(), th.grid_dim * th.groups(),
                     T);
  }
  ht_rows_signal(job, th, sh);
}

// The whole send half on CPU threads (gpu-host): count, slots, then `batch`
// tokens at a time pack them and, once every rank's counts are in (looked
// at without waiting after each batch), push what is packed, so the
// proxies move rows while the next are packed; then wait for the counts if
// they are not in yet, push the rest, store this rank's own rows, signal.
COURIER_DEVICE_INLINE void ht_dispatch_host_body(const courier_gpu_ep_proxy_ht_dispatch_v1& job,
                                                 const KernelThread& th, ProxyShared* sh,
                                                 uint32_t batch) {
  const Proxy& f = job.fifo;
  uint32_t t0 = 0, t1 = 0;
  block_range(th, job.tokens, &t0, &t1);
  if (job.sends_settled == 0) send_wait(th, f, false, 0, 0);
  ht_count(job, th, sh, t0, t1);
  ht_slots(job, th, sh, t0, t1);
  bool known = false, go = false;
  uint32_t pushed_to = t0, pushed = 0;
  const uint64_t notify = notify_target_of(job);  // read before the rows' block advances it
  auto counts_in = [&] {
    th.sync();
    if (th.thread == 0) {
      uint32_t in = 1;
      for (uint32_t r = 0; r < f.num_ranks && in != 0; ++r) {
        in = load_acquire(reinterpret_cast<const uint64_t*>(
                 ctl(f, job.notify_signal_off + r * 8ull))) >= notify
                 ? 1
                 : 0;
      }
      sh->flag = in;
    }
    th.sync();
    const bool in = sh->flag != 0;
    th.sync();
    return in;
  };
  for (uint32_t b0 = t0; b0 < t1; b0 += batch) {
    const uint32_t b1 = t1 - b0 < batch ? t1 : b0 + batch;
    ht_pack_range(job, th, b0, b1);
    if (!known && counts_in()) {
      wait_all(th, f, job.notify_signal_off, job.notify_record_off, notify);
      go = ht_bases(job, th, sh);
      known = true;
    }
    if (known && go) {
      ht_push_runs(job, th, sh, pushed_to, b1, &pushed);
      pushed_to = b1;
    }
  }
  if (!known) {
    wait_all(th, f, job.notify_signal_off, job.notify_record_off, notify);
    go = ht_bases(job, th, sh);
  }
  if (go && pushed_to < t1) ht_push_runs(job, th, sh, pushed_to, t1, &pushed);
  if (go) ht_keep_own_rows(job, th, sh, t0 + th.group(), th.groups(), t1);
  ht_rows_signal(job, th, sh);
}

// ---- ep_proxy_ht_receive: every block waits; then a lane group per row's
// meta (the rows stay where they landed).
COURIER_DEVICE_INLINE void ht_receive_body(const courier_gpu_ep_proxy_ht_receive_v1& job,
                                           const KernelThread& th, ProxyShared* sh, bool waited) {
  const Proxy& f = job.fifo;
  const uint32_t R = f.num_ranks, K = job.topk;
  const bool go = received(th, f, sh, waited, job.signal_off, job.record_off,
                           target_of(job.epoch, job.target), job.wait_sends != 0);
  if (go && th.thread == 0) {
    uint32_t sum = 0;
    for (uint32_t s = 0; s < R; ++s) {
      const uint32_t n = load_u32(record_of(f, job.notify_record_off, s) + 1);
      if (n > job.max_tokens) set_status(f.status, COURIER_GPU_EP_STATUS_OVERFLOW | s);
      sum += n;
    }
    sh->b[0] = sum;
    if (sum > job.capacity) set_status(f.status, COURIER_GPU_EP_STATUS_OVERFLOW | f.rank);
  }
  th.sync();
  if (go && (job.readback != nullptr || job.plan != nullptr)) {
    // What the host reads (records, then slots) and a combine's plan (row
    // counts, then slots).
    const uint64_t record_words = uint64_t{R} * f.record_words;
    auto* out = static_cast<uint32_t*>(job.readback);
    const auto* records = reinterpret_cast<const uint32_t*>(ctl(f, job.notify_record_off));
    const auto* slots = reinterpret_cast<const uint32_t*>(job.slots);
    const uint64_t words = record_words + uint64_t{job.slot_tokens} * R;
    for (uint64_t i = uint64_t{th.block} * th.block_dim + th.thread; i < words;
         i += uint64_t{th.grid_dim} * th.block_dim) {
      const uint32_t v = i < record_words ? load_u32(records + i) : slots[i - record_words];
      if (out != nullptr) out[i] = v;
      if (job.plan != nullptr && i >= record_words) {
        job.plan[R + (i - record_words)] = static_cast<int32_t>(v);
      } else if (job.plan != nullptr && i % f.record_words == 1) {
        job.plan[i / f.record_words] = static_cast<int32_t>(v);  // rank i's row count
      }
    }
  }
  if (status_of(f) == 0) {
    const uint32_t total = sh->b[0];
    const uint32_t lane = th.lane(), lanes = kLanes;
    const uint64_t scale_bytes = uint64_t{job.scale_cols} * 4;
    const uint64_t ids_at = scale_bytes, weights_at = ids_at + uint64_t{K} * 4;
    const uint32_t stride = th.grid_dim * th.groups();
    for (uint32_t i = th.block * th.groups() + th.group(); i < total && job.meta_bytes != 0;
         i += stride) {
      const std::byte* meta = at(f, job.recv_meta_off + uint64_t{i} * job.meta_bytes);
      if (job.scales != nullptr) {
        lanes_copy(job.scales + uint64_t{i} * job.scale_cols, meta, scale_bytes, lane, lanes);
      }
      for (uint32_t k = lane; k < K; k += lanes) {
        const int32_t e = reinterpret_cast<const int32_t*>(meta + ids_at)[k];
        const bool local = e >= 0 && job.local_experts != 0 &&
                           static_cast<uint32_t>(e) / job.local_experts == f.rank;
        job.topk_idx[uint64_t{i} * K + k] =
            local ? static_cast<int64_t>(e) - int64_t{f.rank} * job.local_experts : -1;
        // An expert elsewhere: weight 0, as DeepEP's.
        job.topk_weights[uint64_t{i} * K + k] =
            local ? reinterpret_cast<const float*>(meta + weights_at)[k] : 0.0f;
      }
    }
    for (uint32_t i = total + th.block * th.groups() + th.group(); i < job.pad_rows; i += stride) {
      lanes_zero(at(f, job.recv_off + uint64_t{i} * job.row_bytes), job.row_bytes, lane, lanes);
      if (job.scales != nullptr)
        lanes_zero(job.scales + uint64_t{i} * job.scale_cols, scale_bytes, lane, lanes);
      for (uint32_t k = lane; k < K; k += lanes) {
        job.topk_idx[uint64_t{i} * K + k] = -1;
        job.topk_weights[uint64_t{i} * K + k] = 0.0f;
      }
    }
  }
  if (!last_block(th, f, sh)) return;
  finish(th, f, false);
}

// Quantizes a row of `hidden` bfloat16 (bits 16) or float32 values into
// e4m3 codes then hidden / 128 float scales at `out`, with a lane group.
COURIER_DEVICE_INLINE void quantize_row(const void* x, uint32_t bits, uint32_t hidden, bool pow2,
                                        std::byte* out, uint32_t lane) {
  constexpr uint32_t per_lane = kFp8Channels / kLanes;
  float* scales = reinterpret_cast<float*>(out + hidden);
  auto value = [&](uint64_t i) {
    return bits == 16 ? bf16_to_float(static_cast<const uint16_t*>(x)[i])
                      : static_cast<const float*>(x)[i];
  };
  for (uint32_t block = 0; block < hidden / kFp8Channels; ++block) {
    const uint64_t first = uint64_t{block} * kFp8Channels + uint64_t{lane} * per_lane;
    float amax = 0.0f;
    for (uint32_t i = 0; i < per_lane; ++i) amax = fmaxf(amax, fabsf(value(first + i)));
    amax = lanes_max(amax);
    const float scale = fp8_scale(amax, pow2);
    const Fp8Divisor divide(scale);
    for (uint32_t i = 0; i < per_lane; ++i) {
      reinterpret_cast<uint8_t*>(out)[first + i] = float_to_e4m3(divide(value(first + i)));
    }
    if (lane == 0) scales[block] = scale;
  }
}

#if defined(COURIER_GPU_DEVICE_PASS)
// The 128-channel blocks first, first + step, ... of a row of `hidden`
// bfloat16 (bits 16) or float32 values, quantized by a warp (4 channels a
// lane) and handed to each_slot(store), which calls store(out) for every
// slot the row goes to: codes at out, scales at out + hidden. Loads for
// kAhead blocks are issued before the first is reduced.
template <class EachSlot>
COURIER_DEVICE_INLINE void quantize_spread(const void* x, uint32_t bits, uint32_t hidden, bool pow2,
                                           uint32_t first, uint32_t step, uint32_t lane,
                                           EachSlot&& each_slot) {
  static_assert(kFp8Channels == 4 * kLanes, "a lane quantizes 4 channels of a block");
  constexpr uint32_t kAhead = 4;
  const uint32_t blocks = hidden / kFp8Channels;
  const bool vector = (reinterpret_cast<uintptr_t>(x) & (bits == 16 ? 7u : 15u)) == 0;
  for (uint32_t b0 = first; b0 < blocks; b0 += kAhead * step) {
    float v[kAhead][4];
#pragma unroll
    for (uint32_t a = 0; a < kAhead; ++a) {
      const uint32_t cb = b0 + a * step;
      const uint64_t c = uint64_t{cb} * kFp8Channels + lane * 4u;
      if (cb >= blocks) {
        for (uint32_t q = 0; q < 4; ++q) v[a][q] = 0.0f;
      } else if (bits == 16 && vector) {
        const uint2 w = *reinterpret_cast<const uint2*>(static_cast<const uint16_t*>(x) + c);
        v[a][0] = bf16_to_float(static_cast<uint16_t>(w.x & 0xFFFFu));
        v[a][1] = bf16_to_float(static_cast<uint16_t>(w.x >> 16));
        v[a][2] = bf16_to_float(static_cast<uint16_t>(w.y & 0xFFFFu));
        v[a][3] = bf16_to_float(static_cast<uint16_t>(w.y >> 16));
      } else if (vector) {
        const float4 w = *reinterpret_cast<const float4*>(static_cast<const float*>(x) + c);
        v[a][0] = w.x, v[a][1] = w.y, v[a][2] = w.z, v[a][3] = w.w;
      } else {
        for (uint32_t q = 0; q < 4; ++q) {
          v[a][q] = bits == 16 ? bf16_to_float(static_cast<const uint16_t*>(x)[c + q])
                               : static_cast<const float*>(x)[c + q];
        }
      }
    }
#pragma unroll
    for (uint32_t a = 0; a < kAhead; ++a) {
      const uint32_t cb = b0 + a * step;
      if (cb >= blocks) break;  // the same for every lane
      float amax = 0.0f;
      for (uint32_t q = 0; q < 4; ++q) amax = fmaxf(amax, fabsf(v[a][q]));
      const float scale = fp8_scale(lanes_max(amax), pow2);
      const Fp8Divisor divide(scale);
      float scaled[4];
      for (uint32_t q = 0; q < 4; ++q) scaled[q] = divide(v[a][q]);
      const uint32_t codes = float4_to_e4m3(scaled);
      each_slot([&](std::byte* out) {
        reinterpret_cast<uint32_t*>(out)[cb * kLanes + lane] = codes;
        if (lane == 0) reinterpret_cast<float*>(out + hidden)[cb] = scale;
      });
    }
  }
}

// The same for a row copied as it is: pieces of 16 bytes a lane, each
// loaded once and stored into every slot (n a multiple of 16 and x aligned
// to 16, as a row of a 16-byte-aligned tensor whose rows are; else bytes).
template <class EachSlot>
COURIER_DEVICE_INLINE void copy_spread(const void* x, uint64_t n, uint32_t first, uint32_t step,
                                       uint32_t lane, EachSlot&& each_slot) {
  if (((reinterpret_cast<uintptr_t>(x) | n) & 15u) == 0) {
    const auto* in = static_cast<const int4*>(x);
    for (uint64_t i = uint64_t{first} * kLanes + lane; i < n / 16; i += uint64_t{step} * kLanes) {
      const int4 v = in[i];
      each_slot([&](std::byte* out) { reinterpret_cast<int4*>(out)[i] = v; });
    }
    return;
  }
  const auto* in = static_cast<const uint8_t*>(x);
  for (uint64_t i = uint64_t{first} * kLanes + lane; i < n; i += uint64_t{step} * kLanes) {
    const uint8_t v = in[i];
    each_slot([&](std::byte* out) { reinterpret_cast<uint8_t*>(out)[i] = v; });
  }
}
#endif

// ---- ep_proxy_ll_dispatch: every block counts all pairs per expert (a
// pass over topk_idx, cheap next to a row), so that it knows where each of
// its pairs sits in its destination's region: the rows of expert d * L,
// then d * L + 1, ..., each in token order. Blocks pack their pairs; the
// last block sends each region with one WRITE and signals.
COURIER_DEVICE_INLINE void ll_dispatch_body(const courier_gpu_ep_proxy_ll_dispatch_v1& job,
                                            const KernelThread& th, ProxyShared* sh, bool waited) {
  const Proxy& f = job.fifo;
  const uint32_t R = f.num_ranks, T = job.tokens, K = job.topk, E = job.num_experts;
  const uint32_t L = E / R;
  const uint64_t region = uint64_t{L} * job.max_tokens;  // slots per destination
  const uint32_t per = (T + th.grid_dim - 1) / th.grid_dim;
  const uint32_t t0 = th.block * per < T ? th.block * per : T;
  const uint32_t t1 = t0 + per < T ? t0 + per : T;
  const uint32_t elem = job.x_dtype_bits / 8;
  const uint64_t value_bytes = job.fp8 != 0 ? job.hidden : uint64_t{job.hidden} * elem;
  auto expert = [&](uint64_t i) { return job.topk_idx[i]; };
  auto valid = [&](int64_t e) { return e >= 0 && e < static_cast<int64_t>(E); };

  for (uint64_t i = uint64_t{t0} * K + th.thread; i < uint64_t{t1} * K; i += th.block_dim) {
    const int64_t e = expert(i);
    if (e < -1 || e >= static_cast<int64_t>(E)) {
      compare_exchange(f.bad_index, 0, (i / K + 1) << 32 | (i % K));
      set_status(f.status, COURIER_GPU_EP_STATUS_BAD_INDEX);
    }
  }
  // a[e]: pairs of expert e before this block's tokens; b[e]: of all tokens.
  for (uint32_t e = th.thread; e < E; e += th.block_dim) sh->a[e] = sh->b[e] = 0;
  th.sync();
  for (uint64_t i = th.thread; i < uint64_t{T} * K; i += th.block_dim) {
    const int64_t e = expert(i);
    if (!valid(e)) continue;
    add_block(&sh->b[e], 1);
    if (i < uint64_t{t0} * K) add_block(&sh->a[e], 1);
  }
  th.sync();
  // b[e] becomes where expert e's rows start in its destination's region.
  // An expert listed twice for a token could give it more pairs than a
  // region holds: refuse the call rather than write past it.
  // One scan over all experts, a run of them per thread, less the scan at
  // the region's first expert (one thread walking the experts took 12 us
  // of an H200's 60 us kernel at 288 experts).
  {
    const uint32_t chunk = (E + th.block_dim - 1) / th.block_dim;
    const uint32_t e0 = th.thread * chunk < E ? th.thread * chunk : E;
    const uint32_t e1 = e0 + chunk < E ? e0 + chunk : E;
    uint32_t mine = 0;
    for (uint32_t e = e0; e < e1; ++e) {
      if (sh->b[e] > job.max_tokens) set_status(f.status, COURIER_GPU_EP_STATUS_OVERFLOW | f.rank);
      mine += sh->b[e];
    }
    uint32_t total = 0;
    uint32_t before = block_exclusive_scan(th, sh->scan, mine, &total);
    for (uint32_t e = e0; e < e1; ++e) {  // the scan's scratch is free again
      sh->scan[e] = before;
      before += sh->b[e];
    }
    th.sync();
    for (uint32_t e = e0; e < e1; ++e) sh->b[e] = sh->scan[e] - sh->scan[e / L * L];
    th.sync();
  }
  if (th.thread == 0) {
    for (uint64_t i = uint64_t{t0} * K; i < uint64_t{t1} * K; ++i) {
      const int64_t e = expert(i);
      job.slots[i] = valid(e) ? static_cast<int32_t>(sh->b[e] + sh->a[e]++) : -1;
    }
  }
  // d may be reading what this rank sent it two calls ago; and the send
  // area's last WRITEs may still be reading it.
  if (!waited) send_wait(th, f, true, job.release_off, target_of(job.epoch, job.release_target));
  th.sync();
  if (status_of(f) == 0) {
    const uint32_t lane = th.lane();
    // Pair i's slot: in the send area when its rank gets it through the
    // channels, in the receive area when this rank does.
    auto slot_of_pair = [&](uint64_t i) {
      const uint32_t d = static_cast<uint32_t>(expert(i)) / L;
      const uint64_t slot = static_cast<uint32_t>(job.slots[i]);
      return through_channels(f, d)
                 ? at(f, job.send_off + (d * region + slot) * job.slot_bytes)
                 : at(f, job.recv_off + (f.rank * region + slot) * job.slot_bytes);
    };
#if defined(COURIER_GPU_DEVICE_PASS)
    // A token at a time, its row read (and quantized) once by the block's
    // lane groups, a piece each, and stored into every pair's slot: a lane
    // group per pair read the row topk times and waited for memory at each
    // 128-channel block in turn (119.8 us for 128 tokens on an H200).
    // The token's slots go to shared memory first, up to 512 pairs at a
    // time: read from global memory between the stores, they cost a round
    // trip each (the compiler cannot keep them: a store may alias them).
    auto* outs = reinterpret_cast<std::byte**>(sh->scan);
    constexpr uint32_t kOuts = sizeof(ProxyShared::scan) / (sizeof(std::byte*));
    for (uint32_t t = t0; t < t1; ++t) {
      const void* x = static_cast<const std::byte*>(job.x) + uint64_t{t} * job.hidden * elem;
      for (uint32_t k0 = 0; k0 < K; k0 += kOuts) {
        const uint32_t n = K - k0 < kOuts ? K - k0 : kOuts;
        th.sync();  // the last pairs' stores are done with `outs`
        for (uint32_t k = th.thread; k < n; k += th.block_dim) {
          const uint64_t i = uint64_t{t} * K + k0 + k;
          outs[k] = valid(expert(i)) ? slot_of_pair(i) : nullptr;
        }
        th.sync();
        auto each_slot = [&](auto&& store) {
          for (uint32_t k = 0; k < n; ++k) {
            if (std::byte* out = outs[k]; out != nullptr) store(out);
          }
        };
        if (job.fp8 != 0) {
          quantize_spread(x, job.x_dtype_bits, job.hidden,
                          (job.fp8 & COURIER_GPU_EP_FP8_POW2_SCALES) != 0, th.group(), th.groups(),
                          lane, each_slot);
        } else {
          copy_spread(x, value_bytes, th.group(), th.groups(), lane, each_slot);
        }
        if (th.thread == 0) {
          each_slot([&](std::byte* out) {
            *reinterpret_cast<int32_t*>(out + job.slot_bytes - 16) = static_cast<int32_t>(t);
          });
        }
      }
    }
#else
    for (uint64_t i = uint64_t{t0} * K + th.group(); i < uint64_t{t1} * K; i += th.groups()) {
      if (!valid(expert(i))) continue;
      std::byte* out = slot_of_pair(i);
      const void* x = static_cast<const std::byte*>(job.x) + (i / K) * job.hidden * elem;
      if (job.fp8 != 0) {
        quantize_row(x, job.x_dtype_bits, job.hidden,
                     (job.fp8 & COURIER_GPU_EP_FP8_POW2_SCALES) != 0, out, lane);
      } else {
        lanes_copy(out, x, value_bytes, lane, kLanes);
      }
      if (lane == 0) {
        *reinterpret_cast<int32_t*>(out + job.slot_bytes - 16) = static_cast<int32_t>(i / K);
      }
    }
#endif
  }
  if (!last_block(th, f, sh)) return;
  // a[e]: pairs of expert e; b[d]: pairs to rank d. The records are
  // written by all threads (one thread writing a rank's words across PCIe
  // took microseconds).
  for (uint32_t e = th.thread; e < E; e += th.block_dim) sh->a[e] = 0;
  for (uint32_t d = th.thread; d < R; d += th.block_dim) sh->b[d] = 0;
  th.sync();
  for (uint64_t i = th.thread; i < uint64_t{T} * K; i += th.block_dim) {
    if (!valid(expert(i))) continue;
    add_block(&sh->a[expert(i)], 1);
    add_block(&sh->b[static_cast<uint32_t>(expert(i)) / L], 1);
  }
  th.sync();
  const uint32_t state = status_of(f) != 0 ? COURIER_GPU_EP_RECORD_REFUSED : 0;
  auto staged = [&](uint32_t d) {
    return reinterpret_cast<uint32_t*>(ctl(f, job.staging_off + d * uint64_t{f.record_words} * 4));
  };
  for (uint32_t i = th.thread; i < R * L; i += th.block_dim) staged(i / L)[1 + i % L] = sh->a[i];
  for (uint32_t d = th.thread; d < R; d += th.block_dim) {
    staged(d)[0] = state;
    if (state == 0 && through_channels(f, d)) {
      push_region(f, d, job.send_off + d * region * job.slot_bytes,
                  job.recv_off + f.rank * region * job.slot_bytes, sh->b[d], job.slot_bytes,
                  lanes_per_rank(f));
    }
  }
  release_fence_system();
  th.sync();
  signal_all(th, f, job.staging_off, job.record_off, job.signal_off, lanes_per_rank(f), 0);
  advance_epoch(th, job.epoch);
  finish(th, f, true);
}

// ---- ep_proxy_ll_receive: every block waits; then a block per local
// expert packs its rows, rank by rank; the last block frees the senders.
COURIER_DEVICE_INLINE void ll_receive_body(const courier_gpu_ep_proxy_ll_receive_v1& job,
                                           const KernelThread& th, ProxyShared* sh, bool waited) {
  const Proxy& f = job.fifo;
  const uint32_t R = f.num_ranks, L = job.local_experts;
  const uint64_t rows_per_expert = uint64_t{R} * job.max_tokens;
  if (received(th, f, sh, waited, job.signal_off, job.record_off, target_of(job.epoch, job.target),
               false, job.wait_cost)) {
    for (uint32_t l = th.block; l < L; l += th.grid_dim) {
      // b[s]: where rank s's rows of l go in the output; a[s]: where they
      // are in its region (after its rows of experts l' < l).
      for (uint32_t s = th.thread; s < R; s += th.block_dim) {
        const uint32_t* record = record_of(f, job.record_off, s);
        uint32_t before = 0;
        for (uint32_t j = 0; j < l; ++j) before += load_u32(record + 1 + j);
        sh->a[s] = before;
      }
      th.sync();
      if (th.thread == 0) {
        uint32_t sum = 0;
        for (uint32_t s = 0; s < R; ++s) {
          uint32_t n = load_u32(record_of(f, job.record_off, s) + 1 + l);
          if (n > job.max_tokens || uint64_t{sh->a[s]} + n > uint64_t{L} * job.max_tokens) {
            set_status(f.status, COURIER_GPU_EP_STATUS_OVERFLOW | s);
            n = 0;
          }
          job.range[uint64_t{l} * R + s] = static_cast<int64_t>(uint64_t{sum} << 32 | n);
          sh->b[s] = sum;
          sum += n;
        }
        sh->b[R] = sum;
        job.count[l] = static_cast<int32_t>(sum);
      }
      th.sync();
      const uint32_t lane = th.lane();
      for (uint32_t i = th.group(); i < sh->b[R]; i += th.groups()) {
        uint32_t s = 0;
        while (s + 1 < R && i >= sh->b[s + 1]) ++s;
        const std::byte* slot =
            at(f, job.recv_off + (uint64_t{s} * L * job.max_tokens + sh->a[s] + (i - sh->b[s])) *
                                     job.slot_bytes);
        const uint64_t to = l * rows_per_expert + i;
        lanes_copy(static_cast<std::byte*>(job.x) + to * job.row_bytes, slot, job.row_bytes, lane,
                   kLanes);
        if (job.scale_cols > 0 && job.scales_layout != 0) {
          store_scales(job.scales, job.scales_layout, job.scale_cols, rows_per_expert, l, i,
                       slot + job.row_bytes, lane, kLanes);
        } else if (job.scale_cols > 0) {
          lanes_copy(job.scales + to * job.scale_cols, slot + job.row_bytes,
                     uint64_t{job.scale_cols} * 4, lane, kLanes);
        }
        if (lane == 0) job.src[to] = *reinterpret_cast<const int32_t*>(slot + job.slot_bytes - 16);
      }
      th.sync();
    }
  }
  if (!last_block(th, f, sh)) return;
  // Released also after a failure, so the senders' next call of this
  // parity does not wait for a receive that will not come.
  for (uint32_t s = th.thread; s < R; s += th.block_dim) {
    if (through_channels(f, s)) {
      push_add(f, channel_of(f, s, 0), s, job.release_off + f.rank * 8ull,
               COURIER_GPU_EP_SIGNAL_STEP);
    } else {
      add_release(reinterpret_cast<uint64_t*>(ctl(f, job.release_off + f.rank * 8ull)),
                  COURIER_GPU_EP_SIGNAL_STEP);
    }
  }
  finish(th, f, false);
}

// ---- ep_proxy_combine: rows back to where they came from, packed into
// the send area first (x is the caller's memory).
COURIER_DEVICE_INLINE void combine_body(const courier_gpu_ep_proxy_combine_v1& job,
                                        const KernelThread& th, ProxyShared* sh, bool waited) {
  const Proxy& f = job.fifo;
  const uint32_t R = f.num_ranks, L = job.local_experts;
  // LogFMT (minor 5): rows are encoded into their slots (rb bytes each) as
  // they are packed; x's rows stay row_bytes apart.
  const bool logfmt = (job.mode & COURIER_GPU_EP_COMBINE_LOGFMT) != 0;
  const uint32_t hidden = job.row_bytes / 2;
  const uint64_t xb = job.row_bytes;
  const uint64_t rb = logfmt ? COURIER_GPU_EP_LOGFMT_SLOT_BYTES(hidden) : xb, T = job.max_tokens;
  const uint32_t lane = th.lane();
  const auto* x = static_cast<const std::byte*>(job.x);
  if (!waited && job.sends_settled == 0) send_wait(th, f, false, 0, 0);
  th.sync();
  // Rows [first, first + n) of x, the rows j0.. of their run to rank s,
  // into send slot `to` (or the receive slot `direct` for this rank).
  auto move = [&](uint64_t first, uint32_t n, uint32_t s, uint64_t to, uint64_t direct) {
    const bool through = through_channels(f, s);
    if (!logfmt) {  // the run is contiguous at both ends: the whole block copies it
      block_copy(th, at(f, through ? job.send_off + to * rb : job.recv_off + direct * rb),
                 x + first * xb, n * rb);
      return;
    }
    for (uint32_t i = th.group(); i < n; i += th.groups()) {
      std::byte* slot =
          at(f, (through ? job.send_off + to * rb : job.recv_off + direct * rb) + i * rb);
      if (logfmt) {
        logfmt_encode_row(slot, x + (first + i) * xb, hidden, lane, kLanes);
      } else {
        lanes_copy(slot, x + (first + i) * xb, rb, lane, kLanes);
      }
    }
  };
  // x in the data window or a source registration (x_source): only this
  // rank's own rows (no loopback) move here.
  const bool in_window = (job.mode & COURIER_GPU_EP_COMBINE_FROM_WINDOW) != 0 && !logfmt;
  const bool go = block_goes_on(th, f, sh);
  if (go && (job.mode & COURIER_GPU_EP_ROUTE_MASK) == COURIER_GPU_EP_ROUTE_RANKS) {
    if (th.thread == 0) {
      uint32_t sum = 0;
      for (uint32_t s = 0; s < R; ++s) {
        sh->b[s] = sum;
        sum += static_cast<uint32_t>(job.counts[s]);
      }
      sh->b[R] = sum;
    }
    th.sync();
    const uint32_t total = sh->b[R];
    const uint32_t per = (total + th.grid_dim - 1) / th.grid_dim;
    const uint32_t i0 = th.block * per < total ? th.block * per : total;
    const uint32_t i1 = i0 + per < total ? i0 + per : total;
    for (uint32_t s = 0; s < R; ++s) {
      const uint32_t a = i0 > sh->b[s] ? i0 : sh->b[s];
      const uint32_t b = i1 < sh->b[s + 1] ? i1 : sh->b[s + 1];
      if (a >= b || (in_window && through_channels(f, s))) continue;
      const uint64_t j = a - sh->b[s];
      move(a, b - a, s, s * T + j, f.rank * T + j);
    }
  } else if (go) {
    // Rows of expert l from rank s go back into s's region at the place
    // they had in it (after its rows of experts l' < l); the last block
    // sends each region with one WRITE.
    for (uint32_t l = th.block; l < L; l += th.grid_dim) {
      for (uint32_t s = 0; s < R; ++s) {
        const auto range = static_cast<uint64_t>(job.range[uint64_t{l} * R + s]);
        const uint32_t begin = static_cast<uint32_t>(range >> 32);
        const uint32_t n = static_cast<uint32_t>(range & 0xFFFFFFFFu);
        if (n == 0) continue;
        uint64_t before = 0;
        for (uint32_t j = 0; j < l; ++j) {
          before += static_cast<uint64_t>(job.range[uint64_t{j} * R + s]) & 0xFFFFFFFFu;
        }
        move(uint64_t{l} * R * T + begin, n, s, uint64_t{s} * L * T + before,
             uint64_t{f.rank} * L * T + before);
      }
    }
  }
  // The last block sends each destination's rows, spread over its lanes.
  // (Each block pushing its own pieces as soon as they were packed made
  // combine 1.7x slower on the H200, 342-361 against 208-215 us: the copies
  // merged, so likely the 132 pushes contending for the FIFO's slots.)
  if (!last_block(th, f, sh)) return;
  const uint32_t state = status_of(f) != 0 ? COURIER_GPU_EP_RECORD_REFUSED : 0;
  const bool by_expert = (job.mode & COURIER_GPU_EP_ROUTE_MASK) == COURIER_GPU_EP_ROUTE_EXPERTS;
  const uint32_t lanes = lanes_per_rank(f);
  for (uint32_t d = th.thread; d < R; d += th.block_dim) {
    *reinterpret_cast<uint32_t*>(ctl(f, job.staging_off + d * uint64_t{f.record_words} * 4)) =
        state;
    if (state != 0 || !through_channels(f, d)) continue;
    if (in_window) {  // rank d's rows follow the rows of the ranks before it
      uint64_t first = 0;
      for (uint32_t s = 0; s < d; ++s) first += static_cast<uint32_t>(job.counts[s]);
      push_region(f, d, job.x_off + first * xb, job.recv_off + f.rank * T * rb,
                  static_cast<uint32_t>(job.counts[d]), rb, lanes, job.x_source);
      continue;
    }
    uint64_t rows = 0;
    if (by_expert) {
      for (uint32_t l = 0; l < L; ++l) {
        rows += static_cast<uint64_t>(job.range[uint64_t{l} * R + d]) & 0xFFFFFFFFu;
      }
    } else {
      rows = static_cast<uint32_t>(job.counts[d]);
    }
    const uint64_t region = by_expert ? uint64_t{L} * T : T;
    push_region(f, d, job.send_off + d * region * rb, job.recv_off + f.rank * region * rb, rows, rb,
                lanes);
  }
  release_fence_system();
  th.sync();
  signal_all(th, f, job.staging_off, job.record_off, job.signal_off, lanes, 0);
  advance_epoch(th, job.epoch);
  finish(th, f, true);
}

// ---- ep_proxy_reduce: every block waits; then a block per token, each
// thread a tile of kReduceTile channels, term by term (the rows of a term
// are read in order; on a CPU thread the tile's loop vectorizes).
#if defined(COURIER_GPU_DEVICE_PASS)
inline constexpr uint32_t kReduceTile = 8;  // 16 bytes of bfloat16: one vector load
#else
inline constexpr uint32_t kReduceTile = 512;
#endif

#if defined(COURIER_GPU_DEVICE_PASS)
// Tiles a thread sums at once in the vector path of reduce_body: their
// loads are issued together (a sum is bound by memory latency; one 16-byte
// load in flight per thread kept an H200 far from its bandwidth, and 8
// instead of 4 took the high-throughput reduce of 4096 rows of 14 KiB from
// 57 to 42 us).
#ifndef COURIER_EP_REDUCE_BATCH  // for tuning builds
#define COURIER_EP_REDUCE_BATCH 8
#endif
inline constexpr uint32_t kReduceBatch = COURIER_EP_REDUCE_BATCH;

// sum[0, 8) += w * the 8 bfloat16 values in v.
COURIER_DEVICE_INLINE void add_bf16x8(float* sum, const int4& v, float w) {
  const uint32_t words[4] = {static_cast<uint32_t>(v.x), static_cast<uint32_t>(v.y),
                             static_cast<uint32_t>(v.z), static_cast<uint32_t>(v.w)};
#pragma unroll
  for (uint32_t q = 0; q < 4; ++q) {
    sum[2 * q] += w * bf16_to_float(static_cast<uint16_t>(words[q] & 0xFFFFu));
    sum[2 * q + 1] += w * bf16_to_float(static_cast<uint16_t>(words[q] >> 16));
  }
}
#endif

// sum[0, n) += w * row's values [c0, c0 + n) (bfloat16 or float32): whole
// tiles as 16-byte vector loads on a GPU where aligned, one value at a time
// otherwise.
COURIER_DEVICE_INLINE void add_tile(float* sum, const std::byte* row, uint32_t bits, uint32_t c0,
                                    uint32_t n, float w) {
#if defined(COURIER_GPU_DEVICE_PASS)
  const std::byte* p = row + uint64_t{c0} * (bits / 8);
  if (n == kReduceTile && (reinterpret_cast<uintptr_t>(p) & 15u) == 0) {
    if (bits == 16) {
      add_bf16x8(sum, *reinterpret_cast<const int4*>(p), w);
      return;
    }
    const float4 a = reinterpret_cast<const float4*>(p)[0],
                 b = reinterpret_cast<const float4*>(p)[1];
    const float v[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
    for (uint32_t i = 0; i < 8; ++i) sum[i] += w * v[i];
    return;
  }
#endif
  if (bits == 16) {
    const auto* v = reinterpret_cast<const uint16_t*>(row) + c0;
    for (uint32_t i = 0; i < n; ++i) sum[i] += w * bf16_to_float(v[i]);
  } else {
    const auto* v = reinterpret_cast<const float*>(row) + c0;
    for (uint32_t i = 0; i < n; ++i) sum[i] += w * v[i];
  }
}

// Stores sum[0, n) as the values [c0, c0 + n) of `row`, like add_tile.
COURIER_DEVICE_INLINE void store_tile(std::byte* row, uint32_t bits, uint32_t c0, uint32_t n,
                                      const float* sum) {
#if defined(COURIER_GPU_DEVICE_PASS)
  std::byte* p = row + uint64_t{c0} * (bits / 8);
  if (n == kReduceTile && (reinterpret_cast<uintptr_t>(p) & 15u) == 0) {
    if (bits == 16) {
      uint32_t words[4];
#pragma unroll
      for (uint32_t q = 0; q < 4; ++q) {
        words[q] = uint32_t{float_to_bf16(sum[2 * q])} | uint32_t{float_to_bf16(sum[2 * q + 1])}
                                                             << 16;
      }
      *reinterpret_cast<int4*>(p) =
          make_int4(static_cast<int>(words[0]), static_cast<int>(words[1]),
                    static_cast<int>(words[2]), static_cast<int>(words[3]));
      return;
    }
    reinterpret_cast<float4*>(p)[0] = make_float4(sum[0], sum[1], sum[2], sum[3]);
    reinterpret_cast<float4*>(p)[1] = make_float4(sum[4], sum[5], sum[6], sum[7]);
    return;
  }
#endif
  if (bits == 16) {
    auto* o = reinterpret_cast<uint16_t*>(row) + c0;
    for (uint32_t i = 0; i < n; ++i) o[i] = float_to_bf16(sum[i]);
  } else {
    auto* o = reinterpret_cast<float*>(row) + c0;
    for (uint32_t i = 0; i < n; ++i) o[i] = sum[i];
  }
}

// The received row of token t's term j and its weight; false when the
// term has no row (no slot, or an expert out of range).
COURIER_DEVICE_INLINE bool term_row(const courier_gpu_ep_proxy_reduce_v1& job, uint64_t slot_bytes,
                                    uint32_t t, uint32_t j, const std::byte** row, float* w) {
  const Proxy& f = job.fifo;
  const int32_t slot = job.slots[uint64_t{t} * job.terms + j];
  if (slot < 0) return false;
  uint64_t r = 0;
  *w = 1.0f;
  if ((job.mode & COURIER_GPU_EP_ROUTE_MASK) == COURIER_GPU_EP_ROUTE_RANKS) {
    r = uint64_t{j} * job.max_tokens + static_cast<uint32_t>(slot);
  } else {
    const int64_t experts = static_cast<int64_t>(job.local_experts) * f.num_ranks;
    const int64_t e = job.topk_idx[uint64_t{t} * job.terms + j];
    if (e < 0 || e >= experts) return false;
    // Its row came back in the region of its expert's rank, where it went.
    const uint64_t d = static_cast<uint64_t>(e) / job.local_experts;
    r = d * job.local_experts * job.max_tokens + static_cast<uint32_t>(slot);
    *w = job.weights[uint64_t{t} * job.terms + j];
  }
  *row = at(f, job.recv_off + r * slot_bytes);
  return true;
}

COURIER_DEVICE_INLINE void reduce_body(const courier_gpu_ep_proxy_reduce_v1& job,
                                       const KernelThread& th, ProxyShared* sh, bool waited) {
  const Proxy& f = job.fifo;
  const uint64_t row_bytes = uint64_t{job.hidden} * (job.dtype_bits / 8);
  // LogFMT (minor 5): the received rows are slots to decode.
  const bool logfmt = (job.mode & COURIER_GPU_EP_COMBINE_LOGFMT) != 0;
  const uint64_t slot_bytes = logfmt ? COURIER_GPU_EP_LOGFMT_SLOT_BYTES(job.hidden) : row_bytes;
  if (received(th, f, sh, waited, job.signal_off, job.record_off, target_of(job.epoch, job.target),
               job.wait_sends != 0, job.wait_cost)) {
#if defined(COURIER_GPU_DEVICE_PASS)
    // bfloat16 rows of whole 16-byte tiles, aligned at both ends: each
    // thread sums kReduceBatch tiles at once.
    const bool vector =
        !logfmt && job.dtype_bits == 16 && job.hidden % kReduceTile == 0 && slot_bytes % 16 == 0 &&
        row_bytes % 16 == 0 &&
        ((reinterpret_cast<uintptr_t>(at(f, job.recv_off)) | reinterpret_cast<uintptr_t>(job.out)) &
         15u) == 0;
    if (vector) {
      // A block per token while there are no more tokens than blocks
      // (low-latency: a handful of tokens with top-k terms each); beyond,
      // a warp per token, so that every token's row lookups overlap with
      // the others' loads instead of preceding them block by block.
      const uint32_t groups = job.tokens > th.grid_dim ? th.groups() : 1;
      const uint32_t size = th.block_dim / groups, member = th.thread % size;
      const uint32_t step = size * kReduceTile;
      for (uint32_t t = th.block * groups + th.thread / size; t < job.tokens;
           t += th.grid_dim * groups) {
        std::byte* out = static_cast<std::byte*>(job.out) + uint64_t{t} * row_bytes;
        for (uint32_t c0 = member * kReduceTile; c0 < job.hidden; c0 += step * kReduceBatch) {
          float sum[kReduceBatch][kReduceTile] = {};
          for (uint32_t j = 0; j < job.terms; ++j) {
            const std::byte* p = nullptr;
            float w = 1.0f;
            if (!term_row(job, slot_bytes, t, j, &p, &w)) continue;
            int4 v[kReduceBatch];
#pragma unroll
            for (uint32_t b = 0; b < kReduceBatch; ++b) {
              const uint32_t c = c0 + b * step;
              v[b] = c < job.hidden ? *reinterpret_cast<const int4*>(p + uint64_t{c} * 2)
                                    : make_int4(0, 0, 0, 0);
            }
#pragma unroll
            for (uint32_t b = 0; b < kReduceBatch; ++b) add_bf16x8(sum[b], v[b], w);
          }
#pragma unroll
          for (uint32_t b = 0; b < kReduceBatch; ++b) {
            const uint32_t c = c0 + b * step;
            if (c < job.hidden) store_tile(out, 16, c, kReduceTile, sum[b]);
          }
        }
      }
    } else
#endif
    {
      for (uint32_t t = th.block; t < job.tokens; t += th.grid_dim) {
        std::byte* out = static_cast<std::byte*>(job.out) + uint64_t{t} * row_bytes;
        for (uint32_t c0 = th.thread * kReduceTile; c0 < job.hidden;
             c0 += th.block_dim * kReduceTile) {
          const uint32_t n = job.hidden - c0 < kReduceTile ? job.hidden - c0 : kReduceTile;
          float sum[kReduceTile];
          for (uint32_t i = 0; i < n; ++i) sum[i] = 0.0f;
          for (uint32_t j = 0; j < job.terms; ++j) {
            const std::byte* p = nullptr;
            float w = 1.0f;
            if (!term_row(job, slot_bytes, t, j, &p, &w)) continue;
            if (logfmt) {
              for (uint32_t i = 0; i < n; i += 4) {
                float v[4];
                logfmt_load4(p, job.hidden, c0 + i, v);
                for (uint32_t q = 0; q < 4; ++q) sum[i + q] += w * v[q];
              }
            } else {
              add_tile(sum, p, job.dtype_bits, c0, n, w);
            }
          }
          store_tile(out, job.dtype_bits, c0, n, sum);
        }
      }
    }
  }
  if (!last_block(th, f, sh)) return;
  finish(th, f, false);
}

}  // namespace courier::device::ep
