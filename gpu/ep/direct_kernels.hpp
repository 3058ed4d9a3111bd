// The kernels of the EP direct path (GPU ABI minor 2, docs/ep.md "Direct
// path"), written once for nvcc and hipcc: the CUDA and HIP backends include
// this file and launch them. Rows move with 16-byte vector stores straight
// into the peers' windows (NVLink between GPUs of one host); flags are
// raised with system-scope release stores, after the launch's blocks met
// in an acquire-release chain (last_block), so a peer that sees a flag
// sees everything stored before it.
//
// Work is split into "groups" of kGroup lanes (a warp on CUDA, half a
// wavefront on AMD): one group per row.
#pragma once

#include <cstdint>

#include "courier/abi/gpu_v1.h"
#include "gpu/device_atomics.hpp"
#include "gpu/ep/element_codec.hpp"
#include "gpu/ep/kernel_thread.hpp"
#include "gpu/ep/ll_dispatch_spec.hpp"
#include "gpu/ep/logfmt.hpp"
#include "gpu/ep/stamps.hpp"

namespace courier::device::ep {

inline constexpr uint32_t kGroup = 32;

__device__ __forceinline__ float group_max(float v) {
  for (int mask = kGroup / 2; mask > 0; mask /= 2) {
#if defined(__CUDA_ARCH__)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, mask));
#else
    v = fmaxf(v, __shfl_xor(v, mask, kGroup));
#endif
  }
  return v;
}

// The largest of v over 8 consecutive lanes (a 128-channel FP8 block
// when each lane holds 16 channels). Every lane of the warp calls it.
__device__ __forceinline__ float lanes8_max(float v) {
  for (int mask = 4; mask > 0; mask /= 2) {
#if defined(__CUDA_ARCH__)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, mask, 8));
#else
    v = fmaxf(v, __shfl_xor(v, mask, 8));
#endif
  }
  return v;
}

// How many lanes of the calling thread's warp (wavefront) pass `p`; every
// lane calls it. warp_leader: the lane that adds the count up.
__device__ __forceinline__ uint32_t warp_count(bool p) {
#if defined(__CUDA_ARCH__)
  return static_cast<uint32_t>(__popc(__ballot_sync(0xffffffffu, p)));
#else
  return static_cast<uint32_t>(__popcll(__ballot(p)));
#endif
}
__device__ __forceinline__ bool warp_leader() {
#if defined(__CUDA_ARCH__)
  return threadIdx.x % 32 == 0;
#else
  return threadIdx.x % warpSize == 0;
#endif
}

// The end of a block's part of a launch whose last block does more: true
// in every thread of the block that arrived last at *done (then left at
// 0). What the other blocks stored, and read, comes before what it does
// next: each block's arrival is one acquire-release add at device scope
// after the block's barrier (which orders its other threads' accesses
// before it), and a later system-scope release store by the last block
// carries the whole chain to the peers. No separate fences: a
// sequentially consistent fence costs about a microsecond per use.
__device__ __forceinline__ bool last_block(uint32_t* done) {
  __shared__ bool last;
  device::fence_before_block_release();
  __syncthreads();
  if (threadIdx.x == 0) {
    last = device::fetch_add_acq_rel(done, 1u) == gridDim.x - 1;
    if (last) *done = 0;  // every block has added: the next launch starts from 0
  }
  __syncthreads();
  return last;
}

// last_block that also tells the last block whether any block arrived
// failed (`failed` in any of its threads): each arrival adds 1, plus
// kFailedArrival for a failed block, so the last block knows without
// reading the status word again (a memory round trip on its critical path).
// Grids and their failed blocks stay below 2^16 each, so neither field
// carries into the other.
inline constexpr uint32_t kFailedArrival = 1u << 16;
__device__ __forceinline__ bool last_block(uint32_t* done, bool failed, bool* any_failed) {
  __shared__ bool last;
  __shared__ bool any;
  device::fence_before_block_release();
  const bool block_failed = __syncthreads_or(failed ? 1 : 0) != 0;
  if (threadIdx.x == 0) {
    const uint32_t mine = 1u + (block_failed ? kFailedArrival : 0u);
    const uint32_t after = device::fetch_add_acq_rel(done, mine) + mine;
    last = (after & (kFailedArrival - 1u)) == gridDim.x;
    any = after >= kFailedArrival;
    if (last) *done = 0;  // every block has added: the next launch starts from 0
  }
  __syncthreads();
  *any_failed = any;
  return last;
}

// The device clock at `point` of this block, when the launch has stamps.
__device__ __forceinline__ void stamp(uint64_t* stamps, uint32_t point) {
  if (stamps != nullptr && threadIdx.x == 0) {
    stamps[uint64_t{blockIdx.x} * kStampPoints + point] = device::now_ns();
  }
}

__device__ __forceinline__ uint32_t status_of(const uint32_t* status) {
  return *const_cast<const volatile uint32_t*>(status);
}

__device__ __forceinline__ std::byte* window(const courier_gpu_ep_peers_v1& peers, uint32_t rank,
                                             uint64_t offset) {
  return static_cast<std::byte*>(peers.window[rank]) + offset;
}

// Copies n bytes with the `lanes` lanes of a group, 16 bytes per lane and
// step where alignment allows (four loads in flight before the stores).
__device__ __forceinline__ void group_copy(void* dst, const void* src, uint64_t n, uint32_t lane,
                                           uint32_t lanes) {
  const auto d = reinterpret_cast<uintptr_t>(dst), s = reinterpret_cast<uintptr_t>(src);
  if (((d | s | n) & 15u) == 0) {
    auto* out = static_cast<int4*>(dst);
    const auto* in = static_cast<const int4*>(src);
    const uint64_t vectors = n / 16;
    uint64_t i = lane;
    for (; i + 3 * lanes < vectors; i += 4 * lanes) {
      const int4 a = in[i], b = in[i + lanes], c = in[i + 2 * lanes], e = in[i + 3 * lanes];
      out[i] = a;
      out[i + lanes] = b;
      out[i + 2 * lanes] = c;
      out[i + 3 * lanes] = e;
    }
    for (; i < vectors; i += lanes) out[i] = in[i];
  } else if (((d | s | n) & 3u) == 0) {
    for (uint64_t i = lane; i < n / 4; i += lanes)
      static_cast<uint32_t*>(dst)[i] = static_cast<const uint32_t*>(src)[i];
  } else {
    for (uint64_t i = lane; i < n; i += lanes)
      static_cast<uint8_t*>(dst)[i] = static_cast<const uint8_t*>(src)[i];
  }
}

__device__ __forceinline__ void group_zero(void* dst, uint64_t n, uint32_t lane, uint32_t lanes) {
  for (uint64_t i = lane; i < n; i += lanes) static_cast<uint8_t*>(dst)[i] = 0;
}

// Rows [0, n) of a block's work as one list of 16-byte vectors: row r's
// a_bytes from a_src[r] to a_dst[r], then (b_bytes > 0, a second part such
// as the row's scales) b_bytes from b_src[r] to b_dst[r]; all multiples of
// 16 and 16-byte aligned, the pointers in shared memory; a row whose a_dst
// is NULL is skipped. The whole block's
// threads on all the rows at once, kCopyAhead loads in flight per thread
// before their stores (a group per row leaves most lanes idle when the
// rows are few, and one load at a time pays a memory round trip each).
inline constexpr uint32_t kCopyAhead = 8;
__device__ __forceinline__ void block_copy_rows(uint32_t n, uint64_t a_bytes,
                                                const std::byte* const* a_src,
                                                std::byte* const* a_dst, uint64_t b_bytes = 0,
                                                const std::byte* const* b_src = nullptr,
                                                std::byte* const* b_dst = nullptr) {
  const uint32_t a = static_cast<uint32_t>(a_bytes / 16),
                 per = a + static_cast<uint32_t>(b_bytes / 16);
  if (per == 0) return;
  const uint32_t total = n * per, step = blockDim.x;
  const uint32_t step_rows = step / per, step_rest = step % per;
  // Vector v is (row r, vector o of the row); each thread walks its
  // vectors by `step` without dividing again.
  uint32_t r = threadIdx.x / per, o = threadIdx.x % per;
  auto from = [&](uint32_t row, uint32_t i) {
    return i < a ? reinterpret_cast<const int4*>(a_src[row]) + i
                 : reinterpret_cast<const int4*>(b_src[row]) + (i - a);
  };
  auto to = [&](uint32_t row, uint32_t i) {
    return i < a ? reinterpret_cast<int4*>(a_dst[row]) + i
                 : reinterpret_cast<int4*>(b_dst[row]) + (i - a);
  };
  for (uint32_t v = threadIdx.x; v < total; v += kCopyAhead * step) {
    int4 value[kCopyAhead];
    uint32_t row[kCopyAhead], i[kCopyAhead];
#pragma unroll
    for (uint32_t q = 0; q < kCopyAhead; ++q) {
      row[q] = r;
      i[q] = o;
      if (v + q * step < total && a_dst[r] != nullptr) value[q] = *from(r, o);
      r += step_rows;
      o += step_rest;
      if (o >= per) {
        o -= per;
        ++r;
      }
    }
#pragma unroll
    for (uint32_t q = 0; q < kCopyAhead; ++q) {
      if (v + q * step < total && a_dst[row[q]] != nullptr) *to(row[q], i[q]) = value[q];
    }
  }
}

// Rows a block handles at a time in block_copy_rows (shared row numbers).
inline constexpr uint32_t kBlockRows = 512;

// Inclusive prefix sum of `v` over the kGroup lanes of the calling
// thread's group (shuffles: no shared memory, no barrier). Every lane of
// the group calls it.
template <class T>
__device__ __forceinline__ T group_inclusive_scan(T v) {
  const uint32_t lane = threadIdx.x % kGroup;
  for (uint32_t d = 1; d < kGroup; d *= 2) {
#if defined(__CUDA_ARCH__)
    const T up = __shfl_up_sync(0xffffffffu, v, d);
#else
    const T up = __shfl_up(v, d, kGroup);
#endif
    if (lane >= d) v += up;
  }
  return v;
}

// Exclusive prefix sum of `value` over the block's threads (blockDim.x a
// multiple of kGroup, at most kGroup * kGroup); *total gets the block's
// sum. Every thread must call it. Each group scans its lanes with
// shuffles, the first group scans the groups' sums: three barriers, where
// a scan through shared memory took two per doubling (22 at 1024 threads).
template <class T>
__device__ __forceinline__ T block_exclusive_scan(T value, T* total) {
  __shared__ T group_sum[kGroup];
  const uint32_t lane = threadIdx.x % kGroup, group = threadIdx.x / kGroup;
  const uint32_t groups = blockDim.x / kGroup;
  const T inclusive = group_inclusive_scan(value);
  if (lane == kGroup - 1) group_sum[group] = inclusive;
  __syncthreads();
  if (group == 0) {
    const T sum = group_inclusive_scan(lane < groups ? group_sum[lane] : T{0});
    if (lane < groups) group_sum[lane] = sum;  // through group `lane`
  }
  __syncthreads();
  const T before = group > 0 ? group_sum[group - 1] : T{0};
  *total = group_sum[groups - 1];
  __syncthreads();  // group_sum is the next call's
  return before + inclusive - value;
}

// ---- ep_route RANKS with topk_idx: the tokens per expert (a token once
// per expert its top-k holds), kRouteExperts experts per block: each thread
// takes whole tokens, drops an expert its token named already, and adds
// into a shared histogram; one pass over topk_idx per block (a block per
// expert read every pair once for each expert).
inline constexpr uint32_t kRouteExperts = 1024;
__device__ __forceinline__ void route_expert_counts(const courier_gpu_ep_route_v1& job,
                                                    uint32_t first_expert) {
  __shared__ uint32_t histogram[kRouteExperts];
  const uint32_t T = job.tokens, K = job.topk, R = job.num_ranks, E = job.num_experts;
  const uint32_t experts = E - first_expert < kRouteExperts ? E - first_expert : kRouteExperts;
  for (uint32_t i = threadIdx.x; i < experts; i += blockDim.x) histogram[i] = 0;
  __syncthreads();
  constexpr uint32_t kTopkAhead = 8;  // a token's pairs loaded at once (more: a loop)
  for (uint32_t t = threadIdx.x; t < T; t += blockDim.x) {
    const int64_t* pairs = job.topk_idx + uint64_t{t} * K;
    for (uint32_t k0 = 0; k0 < K; k0 += kTopkAhead) {
      int64_t v[kTopkAhead];
#pragma unroll
      for (uint32_t q = 0; q < kTopkAhead; ++q) v[q] = k0 + q < K ? pairs[k0 + q] : -1;
#pragma unroll
      for (uint32_t q = 0; q < kTopkAhead; ++q) {
        const int64_t e = v[q];
        // The first such block also checks the indices (it reads them all).
        if (first_expert == 0 && (e < -1 || e >= static_cast<int64_t>(E))) {
          device::compare_exchange(job.bad_index, 0, uint64_t{t + 1} << 32 | (k0 + q));
          set_status(job.status, COURIER_GPU_EP_STATUS_BAD_INDEX);
        }
        if (e < static_cast<int64_t>(first_expert) ||
            e >= static_cast<int64_t>(first_expert + experts)) {
          continue;
        }
        // The token's earlier pairs: this batch's in registers, older
        // batches' (top-k above kTopkAhead) from L1.
        bool seen = false;
#pragma unroll
        for (uint32_t j = 0; j < q; ++j) seen = seen || v[j] == e;
        for (uint32_t k = 0; k < k0 && !seen; ++k) seen = pairs[k] == e;
        if (!seen) atomicAdd(&histogram[e - first_expert], 1u);
      }
    }
  }
  __syncthreads();
  for (uint32_t i = threadIdx.x; i < experts; i += blockDim.x) {
    job.record[R + first_expert + i] = histogram[i];
  }
}

// ---- ep_route RANKS with topk_idx and `signal` (minor 16): the tokens per
// expert counted by several blocks, each over kRouteSliceTokens tokens for
// every expert (a shared histogram per kRouteExperts experts), added into
// the record with global atomics (the last block leaves those words at 0
// for the next launch). One block for every pair made its shared atomics
// the route's longest step. Each block also checks its pairs' indices
// (*bad: this thread found a bad one).
inline constexpr uint32_t kRouteSliceTokens = 256;
__device__ __forceinline__ void route_expert_slice(const courier_gpu_ep_route_v1& job,
                                                   uint32_t slice, bool* bad) {
  __shared__ uint32_t histogram[kRouteExperts];
  const uint32_t T = job.tokens, K = job.topk, R = job.num_ranks, E = job.num_experts;
  const uint32_t begin = slice * kRouteSliceTokens;
  const uint32_t end = begin + kRouteSliceTokens < T ? begin + kRouteSliceTokens : T;
  // Every pair of the slice, the block's threads on consecutive pairs.
  const uint64_t first_pair = uint64_t{begin} * K, pairs = uint64_t{end - begin} * K;
  for (uint32_t first_expert = 0; first_expert < E; first_expert += kRouteExperts) {
    const uint32_t experts = E - first_expert < kRouteExperts ? E - first_expert : kRouteExperts;
    for (uint32_t i = threadIdx.x; i < experts; i += blockDim.x) histogram[i] = 0;
    __syncthreads();
    for (uint64_t i = threadIdx.x; i < pairs; i += blockDim.x) {
      const uint64_t p = first_pair + i;
      const int64_t e = job.topk_idx[p];
      if (first_expert == 0 && (e < -1 || e >= static_cast<int64_t>(E))) {
        device::compare_exchange(job.bad_index, 0, (p / K + 1) << 32 | p % K);
        set_status(job.status, COURIER_GPU_EP_STATUS_BAD_INDEX);
        *bad = true;
      }
      if (e < static_cast<int64_t>(first_expert) ||
          e >= static_cast<int64_t>(first_expert + experts)) {
        continue;
      }
      // A token counts once per expert: skip e when an earlier k named it.
      const int64_t* token = job.topk_idx + (p - p % K);
      bool seen = false;
      for (uint32_t k = 0; k < p % K && !seen; ++k) seen = token[k] == e;
      if (!seen) atomicAdd(&histogram[e - first_expert], 1u);
    }
    __syncthreads();
    for (uint32_t i = threadIdx.x; i < experts; i += blockDim.x) {
      if (histogram[i] != 0) atomicAdd(&job.record[R + first_expert + i], histogram[i]);
    }
    __syncthreads();
  }
}

// ---- ep_route: one block per group (and, in RANKS mode with topk_idx, one
// per kRouteExperts experts, or with `signal` one per kRouteSliceTokens
// tokens); tokens in order, each thread a contiguous run of them. *bad:
// this thread found a bad index (the blocks that check them).
__device__ __forceinline__ void route_block(const courier_gpu_ep_route_v1& job, bool* bad) {
  const uint32_t T = job.tokens, K = job.topk, R = job.num_ranks, E = job.num_experts;
  const bool by_rank = job.mode == COURIER_GPU_EP_ROUTE_RANKS;
  const uint32_t groups = by_rank ? R : E;
  const uint32_t group = blockIdx.x;
  const uint32_t per_thread = (T + blockDim.x - 1) / blockDim.x;
  const uint32_t first = threadIdx.x * per_thread;
  const uint32_t last = first + per_thread < T ? first + per_thread : T;
  auto expert_of = [&](uint32_t t, uint32_t k) { return job.topk_idx[uint64_t{t} * K + k]; };
  // Every pair p = t * K + k of the call, the block's threads on
  // consecutive pairs (coalesced), each(e, p) with kRouteAhead loads in
  // flight per thread (a memory round trip per batch, not per pair).
  constexpr uint32_t kRouteAhead = 8;
  const uint64_t pairs = uint64_t{T} * K;
  auto each_pair = [&](auto&& each) {
    for (uint64_t p0 = threadIdx.x; p0 < pairs; p0 += uint64_t{kRouteAhead} * blockDim.x) {
      int64_t v[kRouteAhead];
#pragma unroll
      for (uint32_t q = 0; q < kRouteAhead; ++q) {
        const uint64_t p = p0 + uint64_t{q} * blockDim.x;
        v[q] = p < pairs ? job.topk_idx[p] : -1;
      }
#pragma unroll
      for (uint32_t q = 0; q < kRouteAhead; ++q) {
        const uint64_t p = p0 + uint64_t{q} * blockDim.x;
        if (p < pairs) each(v[q], p);
      }
    }
  };
  if (by_rank && job.topk_idx == nullptr && group == 0) {  // no experts known: zero counts
    for (uint32_t e = threadIdx.x; e < E; e += blockDim.x) job.record[R + e] = 0;
  }
  if (group >= groups) {  // RANKS mode: tokens per expert (a token once per expert)
    if (job.signal != nullptr) {
      route_expert_slice(job, group - groups, bad);
    } else {
      route_expert_counts(job, (group - groups) * kRouteExperts);
    }
    return;
  }
  // One block checks the indices: in RANKS mode with experts the first
  // counting block (route_expert_counts), which reads them anyway, so that
  // this block's slots do not wait for it; otherwise block 0.
  const bool counted = by_rank && E > 0;
  if (group == 0 && job.topk_idx != nullptr && !counted) {
    each_pair([&](int64_t e, uint64_t p) {
      if (e < -1 || e >= static_cast<int64_t>(E)) {
        device::compare_exchange(job.bad_index, 0, (p / K + 1) << 32 | p % K);
        set_status(job.status, COURIER_GPU_EP_STATUS_BAD_INDEX);
        *bad = true;
      }
      if (!by_rank && (e < 0 || e >= static_cast<int64_t>(E))) job.slots[p] = -1;
    });
  }
  // Items of this group per thread, then each item's slot. RANKS: the
  // thread's run of in_rank read kInRankAhead at a time (loads in flight
  // together, not one round trip per token).
  constexpr uint32_t kInRankAhead = 8;
  auto in_rank_run = [&](uint32_t t0, bool* in) {
#pragma unroll
    for (uint32_t q = 0; q < kInRankAhead; ++q) {
      in[q] = t0 + q < last && job.in_rank[uint64_t{t0 + q} * R + group] != 0;
    }
  };
  uint32_t count = 0;
  if (by_rank) {
    for (uint32_t t0 = first; t0 < last; t0 += kInRankAhead) {
      bool in[kInRankAhead];
      in_rank_run(t0, in);
#pragma unroll
      for (uint32_t q = 0; q < kInRankAhead; ++q) count += in[q] ? 1 : 0;
    }
  } else {
    for (uint32_t t = first; t < last; ++t) {
      for (uint32_t k = 0; k < K; ++k) count += expert_of(t, k) == static_cast<int64_t>(group);
    }
  }
  uint32_t total = 0;
  uint32_t slot = block_exclusive_scan(count, &total);
  if (by_rank) {
    for (uint32_t t0 = first; t0 < last; t0 += kInRankAhead) {
      bool in[kInRankAhead];
      in_rank_run(t0, in);
#pragma unroll
      for (uint32_t q = 0; q < kInRankAhead; ++q) {
        if (t0 + q < last) {
          job.slots[uint64_t{t0 + q} * R + group] = in[q] ? static_cast<int32_t>(slot++) : -1;
        }
      }
    }
  }
  for (uint32_t t = first; t < last && !by_rank; ++t) {
    for (uint32_t k = 0; k < K; ++k) {
      if (expert_of(t, k) == static_cast<int64_t>(group)) {
        job.slots[uint64_t{t} * K + k] = static_cast<int32_t>(slot++);
      }
    }
  }
  if (threadIdx.x == 0) job.record[group] = total;
}

// A job's epoch with its epoch word (GPU ABI 1.10, "Epoch words" in
// gpu_v1.h): the calls finished so far plus this one; without, its own.
__device__ __forceinline__ uint64_t epoch_of(const uint64_t* word, uint64_t epoch) {
  return word != nullptr ? *word + 1 : epoch;
}

// ---- ep_wait: thread r waits for rank r's flag; then the status goes to
// the host's mirror (one posted store, so the host need not copy it back).
__device__ __forceinline__ void wait_for(const courier_gpu_ep_wait_v1& job, uint32_t r) {
  const uint64_t start = device::now_ns();
  const uint64_t epoch = epoch_of(job.epoch_word, job.epoch);
  for (uint32_t spins = 0;; ++spins) {
    // A refusal counts only when it is this call's: a flag keeps the
    // refused bit of an earlier call of this parity until the rank signals
    // again.
    const uint64_t flag = device::load_acquire(job.flags + r);
    if ((flag & ~COURIER_GPU_EP_REFUSED_FLAG) >= epoch) {
      if ((flag & COURIER_GPU_EP_REFUSED_FLAG) != 0) {
        set_status(job.status, COURIER_GPU_EP_STATUS_REFUSED_BY | r);
      }
      return;
    }
    if ((spins & 255u) == 0) {
      if (status_of(job.status) != 0) return;  // another wait already failed this call
      if (device::now_ns() - start > job.timeout_ns) {
        set_status(job.status, COURIER_GPU_EP_STATUS_TIMEOUT | r);
        return;
      }
    }
  }
}

// A receiving block that found the status set (`failed`, its code as
// thread 0 read it after the block's waits) tells the host's mirror: every
// such block stores the same first failure's code, and a call that went
// well stores nothing (its mirror is 0 from before the call, EpStatus::
// clear), so no block reads the status again once all have finished.
__device__ __forceinline__ void tell_failure(const courier_gpu_ep_wait_v1& job, uint32_t failed) {
  if (threadIdx.x == 0 && failed != 0 && job.status_host != nullptr) {
    *const_cast<volatile uint32_t*>(job.status_host) = failed;
  }
}

// The end of a call (GPU ABI 1.18, "Done marks"): the last block's thread
// 0, after every store of the call, tells the host waiting at `done_mark`
// (mapped host memory; NULL: no host waits there) the call's status. The
// routing launch's mark (minor 16, host_mark) is stored the same way.
__device__ __forceinline__ void tell_done(uint32_t* done_mark, const uint32_t* status) {
  if (threadIdx.x == 0 && done_mark != nullptr) {
    device::release_fence_system();
    *const_cast<volatile uint32_t*>(done_mark) = status_of(status);
  }
}

// The wait of one block (its first num_ranks threads), then the mirror.
__device__ __forceinline__ void wait_block(const courier_gpu_ep_wait_v1& job) {
  if (threadIdx.x < job.num_ranks) wait_for(job, threadIdx.x);
  __syncthreads();
  if (threadIdx.x == 0 && job.status_host != nullptr) {
    *const_cast<volatile uint32_t*>(job.status_host) = status_of(job.status);
  }
}

__global__ void wait_kernel(courier_gpu_ep_wait_v1 job) { wait_block(job); }

// ---- ep_signal: block d writes the record to rank d, then its flag; with
// a wait, block num_ranks waits (the two need not be ordered: a rank's own
// flag arrives like any other).
__global__ void signal_kernel(courier_gpu_ep_signal_v1 job) {
  const uint32_t d = blockIdx.x;
  if (d == job.num_ranks) {
    wait_block(job.wait);
    return;
  }
  if (job.bytes > 0) {
    group_copy(window(job.peers, d, job.record_off), job.src, job.bytes, threadIdx.x, blockDim.x);
  }
  __threadfence_system();
  __syncthreads();
  if (threadIdx.x == 0) {
    const uint64_t refused = status_of(job.status) != 0 ? COURIER_GPU_EP_REFUSED_FLAG : 0;
    device::store_release(reinterpret_cast<uint64_t*>(window(job.peers, d, job.flag_off)),
                          epoch_of(job.epoch_word, job.epoch) | refused);
  }
}

// Raises this rank's flag at flag_off in every window to `epoch`, with
// REFUSED_FLAG when `refused`, thread r for rank r: after the block made
// what it and the blocks before it stored visible at system scope. Every
// thread of the block calls it, with the same `refused`: the launch's
// blocks' arrivals carry it (last_block), so no warp reads the status here
// (one that did after another warp raised this rank's own flag could see a
// peer's refusal that a receiving block set meanwhile, and send it on as
// this rank's).
__device__ __forceinline__ void raise_flags(const courier_gpu_ep_peers_v1& peers, uint32_t ranks,
                                            uint64_t flag_off, uint64_t epoch, bool refused) {
  if (threadIdx.x < ranks) {
    device::store_release(reinterpret_cast<uint64_t*>(window(peers, threadIdx.x, flag_off)),
                          epoch | (refused ? COURIER_GPU_EP_REFUSED_FLAG : 0));
  }
}

// ---- ep_route RANKS with `signal` (minor 16): the launch's last block
// sends this rank's record and flag to every rank, waits for theirs, and
// leaves what the host reads in mapped host memory, the mark last, so the
// host spins on the mark instead of waiting for the stream and copying.
// `refused`: a block of the launch failed (last_block's arrivals say so).
__device__ __forceinline__ void route_notify(const courier_gpu_ep_route_v1& job,
                                             const courier_gpu_ep_signal_v1& signal,
                                             uint64_t* stamps, bool refused) {
  const uint32_t R = job.num_ranks, L = job.experts_per_rank;
  for (uint32_t d = 0; d < R && signal.bytes > 0; ++d) {
    group_copy(window(signal.peers, d, signal.record_off), signal.src, signal.bytes, threadIdx.x,
               blockDim.x);
  }
  device::fence_before_block_release();
  __syncthreads();  // (raise_flags' release stores order the records)
  // The expert counts' words back to 0, for the next launch's atomics
  // (route_expert_slice); the copies above have read them.
  for (uint32_t e = threadIdx.x; e < job.num_experts && job.topk_idx != nullptr; e += blockDim.x) {
    job.record[R + e] = 0;
  }
  raise_flags(signal.peers, R, signal.flag_off, epoch_of(signal.epoch_word, signal.epoch), refused);
  stamp(stamps, kStampSignalled);
  // While the peers' flags come: the slots (every block's, seen here) to
  // the host, 16 bytes a store where they allow it.
  if (job.host_slots != nullptr) {
    group_copy(job.host_slots, job.slots, uint64_t{job.tokens} * R * 4, threadIdx.x, blockDim.x);
  }
  wait_block(signal.wait);  // then every rank's record is in this window
  stamp(stamps, kStampFlagsSeen);
  for (uint32_t i = threadIdx.x; i < R + L; i += blockDim.x) {
    uint32_t n = 0;
    if (i < R) {
      n = job.records[uint64_t{i} * job.record_words + job.rank];
    } else {
      for (uint32_t s = 0; s < R; ++s) {
        n += job.records[uint64_t{s} * job.record_words + R + job.rank * L + (i - R)];
      }
    }
    job.host_counts[i] = n;
  }
  device::fence_before_block_release();
  __syncthreads();
  tell_done(job.host_mark, job.status);  // the mark after the block's counts and slots
  stamp(stamps, kStampFinished);
}

// `signal`: the job's *signal where it has one (the backend copies it in).
// `stamps`: NULL, or where each block records the device clock (stamps.hpp).
__global__ void __launch_bounds__(1024)
    route_kernel(courier_gpu_ep_route_v1 job, courier_gpu_ep_signal_v1 signal, uint64_t* stamps) {
  stamp(stamps, kStampStart);
  bool failed = false;  // with `signal`: the status was set, or this thread found a bad index
  if (job.signal != nullptr) {
    // The status as the calls before this one left it, before any block of
    // this one can set it: the host tells an earlier call's failure (one
    // that did not wait) from this call's.
    if (blockIdx.x == 0 && threadIdx.x == 0) {
      const uint32_t before = status_of(job.status);
      job.host_counts[job.num_ranks + job.experts_per_rank] = before;
      failed = before != 0;
      __threadfence_system();
    }
    __syncthreads();
  }
  route_block(job, &failed);
  stamp(stamps, kStampRouted);
  // This rank refuses the call when the status was set before it or a
  // block found a bad index (no other failure can come before the flags).
  bool refused = false;
  if (job.signal != nullptr && last_block(job.done, failed, &refused)) {
    route_notify(job, signal, stamps, refused);
  }
}

// ---- ep_ht_dispatch: a group per token; it writes the token to each of its ranks.
// Two 512-thread blocks per SM (registers within 64), so that 4096 tokens
// at 16 per block are one wave rather than two. Returns whether the
// status was set (then nothing is stored).
__device__ __forceinline__ bool ht_dispatch_rows(const courier_gpu_ep_ht_dispatch_v1& job) {
  __shared__ uint32_t begin[COURIER_GPU_EP_MAX_RANKS];
  __shared__ uint32_t received;
  __shared__ uint32_t failed;
  const uint32_t R = job.num_ranks;
  if (threadIdx.x == 0) {
    failed = status_of(job.status);
    uint32_t sum = 0;
    for (uint32_t s = 0; s < R; ++s) sum += job.records[uint64_t{s} * job.record_words + job.rank];
    received = sum;
  }
  if (threadIdx.x < R) {
    uint32_t sum = 0;
    for (uint32_t s = 0; s < job.rank; ++s)
      sum += job.records[uint64_t{s} * job.record_words + threadIdx.x];
    begin[threadIdx.x] = sum;
  }
  __syncthreads();
  if (failed != 0) return true;
  const uint32_t lane = threadIdx.x % kGroup;
  const uint32_t groups = gridDim.x * (blockDim.x / kGroup);
  const uint32_t first = blockIdx.x * (blockDim.x / kGroup) + threadIdx.x / kGroup;
  const uint32_t K = job.topk, scale_bytes = job.scale_cols * 4;
  for (uint32_t t = first; t < job.tokens; t += groups) {
    const std::byte* x = static_cast<const std::byte*>(job.x) + uint64_t{t} * job.row_bytes;
    for (uint32_t d = 0; d < R; ++d) {
      const int32_t slot = job.slots[uint64_t{t} * R + d];
      if (slot < 0) continue;
      const uint64_t row = begin[d] + static_cast<uint32_t>(slot);
      group_copy(window(job.peers, d, job.x_off + row * job.row_bytes), x, job.row_bytes, lane,
                 kGroup);
      if (job.x_scales != nullptr) {
        group_copy(window(job.peers, d, job.scales_off + row * scale_bytes),
                   job.x_scales + uint64_t{t} * job.scale_cols, scale_bytes, lane, kGroup);
      }
      if (lane < K) {
        const int64_t e = job.topk_idx[uint64_t{t} * K + lane];
        const int64_t first_expert = int64_t{d} * job.experts_per_rank;
        const int64_t local =
            e >= first_expert && e < first_expert + job.experts_per_rank ? e - first_expert : -1;
        reinterpret_cast<int64_t*>(window(job.peers, d, job.idx_off))[row * K + lane] = local;
        // An expert elsewhere: weight 0, as DeepEP's.
        reinterpret_cast<float*>(window(job.peers, d, job.weights_off))[row * K + lane] =
            local >= 0 ? job.topk_weights[uint64_t{t} * K + lane] : 0.0f;
      }
    }
  }
  // Padding of this rank's outputs past the rows that arrive.
  for (uint32_t row = received + first; row < job.pad_rows; row += groups) {
    group_zero(window(job.peers, job.rank, job.x_off + uint64_t{row} * job.row_bytes),
               job.row_bytes, lane, kGroup);
    if (job.x_scales != nullptr) {
      group_zero(window(job.peers, job.rank, job.scales_off + uint64_t{row} * scale_bytes),
                 scale_bytes, lane, kGroup);
    }
    if (lane < K) {
      reinterpret_cast<int64_t*>(
          window(job.peers, job.rank, job.idx_off))[uint64_t{row} * K + lane] = -1;
      reinterpret_cast<float*>(
          window(job.peers, job.rank, job.weights_off))[uint64_t{row} * K + lane] = 0.0f;
    }
  }
  return false;
}

// With `done` (minor 16) the last block then signals and waits, as
// ep_signal with a wait would in a launch of its own.
__global__ void __launch_bounds__(512, 2)
    ht_dispatch_kernel(courier_gpu_ep_ht_dispatch_v1 job, uint64_t* stamps) {
  stamp(stamps, kStampStart);
  const bool failed = ht_dispatch_rows(job);
  __syncthreads();
  // Without `done` an ep_signal launch follows: the rows visible at system
  // scope first. With it, last_block's chain and raise_flags' release
  // stores order them.
  if (job.done == nullptr && threadIdx.x == 0) __threadfence_system();
  stamp(stamps, kStampSent);
  // Refused when a block found the status set at its start.
  bool refused = false;
  if (job.done == nullptr || !last_block(job.done, failed, &refused)) return;
  raise_flags(job.peers, job.num_ranks, job.flag_off, job.epoch, refused);
  stamp(stamps, kStampSignalled);
  wait_block(job.wait);
  tell_done(job.done_mark, job.status);
  stamp(stamps, kStampFinished);
}

// Loads 4 consecutive elements of a bfloat16 (16 bits) or float32 row as floats.
__device__ __forceinline__ void load4(const void* row, uint32_t bits, uint64_t i, float* v) {
  if (bits == 16) {
    const uint2 w = *reinterpret_cast<const uint2*>(static_cast<const uint16_t*>(row) + i);
    v[0] = bf16_to_float(static_cast<uint16_t>(w.x & 0xFFFFu));
    v[1] = bf16_to_float(static_cast<uint16_t>(w.x >> 16));
    v[2] = bf16_to_float(static_cast<uint16_t>(w.y & 0xFFFFu));
    v[3] = bf16_to_float(static_cast<uint16_t>(w.y >> 16));
  } else {
    const float4 w = *reinterpret_cast<const float4*>(static_cast<const float*>(row) + i);
    v[0] = w.x;
    v[1] = w.y;
    v[2] = w.z;
    v[3] = w.w;
  }
}

// Waits until the flag (REFUSED_FLAG ignored) reaches `want`; sets the
// status on a timeout. One thread.
__device__ __forceinline__ bool wait_released(const uint64_t* flag, uint64_t want,
                                              uint64_t timeout_ns, uint32_t* status,
                                              uint32_t rank) {
  const uint64_t start = device::now_ns();
  for (uint32_t spins = 0;; ++spins) {
    if ((device::load_acquire(flag) & ~COURIER_GPU_EP_REFUSED_FLAG) >= want) return true;
    if ((spins & 255u) == 0 && device::now_ns() - start > timeout_ns) {
      set_status(status, COURIER_GPU_EP_STATUS_TIMEOUT | rank);
      return false;
    }
  }
}

inline constexpr uint32_t kMaxTopk = 32;  // direct_misfit: a lane per expert of a token

// LlSpec (ll_dispatch_spec.hpp): what a dispatch instance knows at compile time.
template <uint32_t kSpec>
__device__ __forceinline__ bool ll_fp8(const courier_gpu_ep_ll_dispatch_v1& job) {
  if constexpr ((kSpec & kLlSendKind) == kLlFp8) {
    return true;
  } else if constexpr ((kSpec & kLlSendKind) == kLlVectors) {
    return false;
  } else {
    return job.fp8 != 0;
  }
}

// Where a token's row goes: for each k, its staging row and scales at the
// expert's rank (NULL where the token does not go there), or with own rows
// (ll_own_rows) for this rank's experts its row of the receive's outputs;
// found once per token so that the stores only add the channel offset.
// Own rows under a scales layout have no scales pointer: their expert and
// slot say where store_scale puts each scale (layout_l -1: not such a row).
struct TokenDests {
  std::byte* row[kMaxTopk];
  float* scales[kMaxTopk];
  int32_t layout_l[kMaxTopk];
  int32_t layout_slot[kMaxTopk];
};

// The pairs before a token that each thread loads at once when counting
// the token's slots (one memory round trip for up to kScanAhead * blockDim
// pairs).
inline constexpr uint32_t kScanAhead = 4;

// Row `slot` of local expert l in the receive's outputs ([L][R *
// max_tokens] rows), where an own row (ll_own_rows) goes.
__device__ __forceinline__ uint64_t ll_own_row(const courier_gpu_ep_ll_dispatch_v1& job, uint32_t l,
                                               int32_t slot) {
  return uint64_t{l} * job.num_ranks * job.max_tokens + static_cast<uint32_t>(slot);
}

// The staging row at expert e's rank of a pair with slot `slot`: block
// (e's local index, this rank), row slot.
__device__ __forceinline__ uint64_t ll_staging_row(const courier_gpu_ep_ll_dispatch_v1& job,
                                                   int32_t e, int32_t slot) {
  const uint32_t R = job.num_ranks, L = job.num_experts / R;
  return (uint64_t{static_cast<uint32_t>(e) % L} * R + job.rank) * job.max_tokens +
         static_cast<uint32_t>(slot);
}

// Token t of a low-latency dispatch: its experts (-1 where none, or where
// the index is out of range: then, with FUSE_ROUTE, the status says so),
// each one's slot, the (t', k') before it in token order with the same
// expert (FUSE_ROUTE), else the slots ep_route wrote, and where its row
// goes (with `own_rows`, `own` is the receive whose outputs take this
// rank's own rows). Nothing is stored at the destinations. A bad index
// also sets *bad (the finding thread's: its block's arrival carries it).
// `earlier` (FUSE_ROUTE, at most kHistogram experts; else NULL): a shared
// count per expert, all zero, that the pairs before t go into (one atomic
// a pair, where a ballot per pair and k cost the block of token 127 of a
// top-8 dispatch 0.9 us); zero again when this returns.
template <uint32_t kSpec>
__device__ __forceinline__ void ll_token_slots(const courier_gpu_ep_ll_dispatch_v1& job,
                                               const courier_gpu_ep_ll_receive_v1& own,
                                               bool own_rows, uint32_t t, int32_t* expert,
                                               int32_t* slot, uint32_t* before, uint32_t* earlier,
                                               TokenDests* dests, bool* bad, uint64_t* stamps) {
  const uint32_t K = job.topk, E = job.num_experts, L = E / job.num_ranks;
  const bool route = (job.fuse & COURIER_GPU_EP_FUSE_ROUTE) != 0;
  const uint32_t n = route ? t * K : 0;  // the pairs of the tokens before t
  // The first of them, loaded with the token's own (one round trip).
  int64_t ahead[kScanAhead];
#pragma unroll
  for (uint32_t q = 0; q < kScanAhead; ++q) {
    const uint32_t i = q * blockDim.x + threadIdx.x;
    ahead[q] = i < n ? job.topk_idx[i] : -1;
  }
  if (threadIdx.x < K) {
    const uint32_t k = threadIdx.x;
    const int64_t e = job.topk_idx[uint64_t{t} * K + k];
    if (route && (e < -1 || e >= static_cast<int64_t>(E))) {
      device::compare_exchange(job.bad_index, 0, (uint64_t{t} + 1) << 32 | k);
      set_status(job.status, COURIER_GPU_EP_STATUS_BAD_INDEX);
      *bad = true;
    }
    expert[k] = e >= 0 && e < static_cast<int64_t>(E) ? static_cast<int32_t>(e) : -1;
    before[k] = 0;
  }
  __syncthreads();
  if (t == blockIdx.x) stamp(stamps, kStampExperts);
  // (No index below -1 or from E on names an expert: such pairs count nowhere.)
  auto valid = [&](int64_t v) { return v >= 0 && v < static_cast<int64_t>(E); };
  if (route && earlier != nullptr) {
#pragma unroll
    for (uint32_t q = 0; q < kScanAhead; ++q) {
      if (valid(ahead[q])) atomicAdd(&earlier[ahead[q]], 1u);
    }
    for (uint32_t base = kScanAhead * blockDim.x; base < n; base += blockDim.x) {
      const uint32_t i = base + threadIdx.x;
      const int64_t v = i < n ? job.topk_idx[i] : -1;
      if (valid(v)) atomicAdd(&earlier[v], 1u);
    }
    __syncthreads();
  } else if (route) {
    auto count = [&](int64_t v) {
      for (uint32_t k = 0; k < K; ++k) {
        const uint32_t c = warp_count(v >= 0 && v == expert[k]);
        if (c != 0 && warp_leader()) atomicAdd(&before[k], c);
      }
    };
#pragma unroll
    for (uint32_t q = 0; q < kScanAhead; ++q) {
      if (q * blockDim.x < n) count(ahead[q]);
    }
    for (uint32_t base = kScanAhead * blockDim.x; base < n; base += blockDim.x) {
      const uint32_t i = base + threadIdx.x;
      count(i < n ? job.topk_idx[i] : -1);
    }
    __syncthreads();
  }
  if (threadIdx.x < K) {
    const uint32_t k = threadIdx.x;
    int32_t s = -1;
    if (route && expert[k] >= 0) {
      s = static_cast<int32_t>(earlier != nullptr ? earlier[expert[k]] : before[k]);
      for (uint32_t j = 0; j < k; ++j) s += expert[j] == expert[k] ? 1 : 0;
    } else if (!route && expert[k] >= 0) {
      s = job.slots[uint64_t{t} * K + k];
    }
    slot[k] = s;
    if (route) job.route_slots[uint64_t{t} * K + k] = s;
    const bool mine = expert[k] >= 0 && static_cast<uint32_t>(expert[k]) / L == job.rank;
    if (job.self_rows != nullptr && !mine) {
      job.self_rows[uint64_t{t} * K + k] = -1;  // (the receive writes this rank's own)
    }
    dests->row[k] = nullptr;
    dests->scales[k] = nullptr;
    dests->layout_l[k] = -1;
    if (mine && own_rows) {
      // Straight into the outputs: expert l's rows from this rank come first.
      const uint32_t l = static_cast<uint32_t>(expert[k]) % L;
      const uint64_t row = ll_own_row(job, l, s);
      const uint64_t row_bytes =
          ll_fp8<kSpec>(job) ? job.hidden : uint64_t{job.hidden} * (job.x_dtype_bits / 8);
      dests->row[k] = static_cast<std::byte*>(own.x) + row * row_bytes;
      if (ll_fp8<kSpec>(job) && own.scales_layout == 0) {
        dests->scales[k] = own.scales + row * (job.hidden / kFp8Channels);
      } else if (ll_fp8<kSpec>(job)) {
        dests->layout_l[k] = static_cast<int32_t>(l);
        dests->layout_slot[k] = s;
      }
      if (job.self_rows != nullptr) job.self_rows[uint64_t{t} * K + k] = static_cast<int32_t>(row);
    } else if (expert[k] >= 0) {
      const uint32_t to = static_cast<uint32_t>(expert[k]) / L;
      const uint64_t row = ll_staging_row(job, expert[k], s);
      const uint64_t row_bytes =
          ll_fp8<kSpec>(job) ? job.hidden : uint64_t{job.hidden} * (job.x_dtype_bits / 8);
      dests->row[k] = window(job.peers, to, job.x_off + row * row_bytes);
      if (ll_fp8<kSpec>(job)) {
        dests->scales[k] = reinterpret_cast<float*>(window(job.peers, to, job.scales_off)) +
                           row * (job.hidden / kFp8Channels);
      }
    }
  }
  __syncthreads();
  // `earlier` zero again (the caller's barrier orders this before the next
  // token's adds): the counts this thread added to, or all of them where
  // the pairs before t were more than `ahead` holds.
  if (route && earlier != nullptr && n <= kScanAhead * blockDim.x) {
#pragma unroll
    for (uint32_t q = 0; q < kScanAhead; ++q) {
      if (valid(ahead[q])) earlier[ahead[q]] = 0;
    }
  } else if (route && earlier != nullptr) {
    for (uint32_t e = threadIdx.x; e < E; e += blockDim.x) earlier[e] = 0;
  }
}

// A token's row in passes over its channels, loaded before it is used, so
// that the first pass's loads overlap the slots' computation. FP8: a
// thread holds 16 channels (8 lanes quantize a 128-channel block; the
// codes go out as one 16-byte store per destination); otherwise kChunks
// 16-byte vectors.
inline constexpr uint32_t kChunks = 2;
inline constexpr uint32_t kFp8Lanes = kFp8Channels / 16;  // lanes per FP8 block
struct RowPass {
  float v[16];      // FP8: the values
  int4 w[kChunks];  // otherwise: 16-byte vectors
};

// Whether the row moves as 16-byte vectors (else a group copy per expert).
template <uint32_t kSpec>
__device__ __forceinline__ bool ll_row_vectors(const courier_gpu_ep_ll_dispatch_v1& job) {
  if constexpr (kSpec != kLlGeneral) return true;
  const uint64_t row_bytes = uint64_t{job.hidden} * (job.x_dtype_bits / 8);
  return job.fp8 != 0 || ((reinterpret_cast<uintptr_t>(job.x) | row_bytes | job.x_off) & 15u) == 0;
}
// Bytes (FP8: channels) of a pass.
template <uint32_t kSpec>
__device__ __forceinline__ uint32_t ll_pass_span(const courier_gpu_ep_ll_dispatch_v1& job) {
  return blockDim.x * (ll_fp8<kSpec>(job) ? 16u : kChunks * 16u);
}

template <uint32_t kSpec>
__device__ __forceinline__ void ll_load_pass(const courier_gpu_ep_ll_dispatch_v1& job, uint32_t t,
                                             uint32_t base, RowPass* p) {
  const uint32_t elem = job.x_dtype_bits / 8;
  const std::byte* x = static_cast<const std::byte*>(job.x) + uint64_t{t} * job.hidden * elem;
  if (ll_fp8<kSpec>(job)) {
    const uint32_t c = base + threadIdx.x * 16;
#pragma unroll
    for (int i = 0; i < 16; ++i) p->v[i] = 0.0f;
    if (c < job.hidden) {
#pragma unroll
      for (int i = 0; i < 16; i += 4) load4(x, job.x_dtype_bits, c + i, p->v + i);
    }
    return;
  }
#pragma unroll
  for (uint32_t q = 0; q < kChunks; ++q) {
    const uint64_t at = base + uint64_t{q * blockDim.x + threadIdx.x} * 16;
    if (at < uint64_t{job.hidden} * elem) p->w[q] = *reinterpret_cast<const int4*>(x + at);
  }
}

// Stores a pass (ll_load_pass's) to each of the token's destinations:
// quantized once (FP8: kFp8Lanes lanes per scale) and stored K times.
template <uint32_t kSpec>
__device__ __forceinline__ void ll_store_pass(const courier_gpu_ep_ll_dispatch_v1& job,
                                              const courier_gpu_ep_ll_receive_v1& own,
                                              uint32_t base, const RowPass& p,
                                              const TokenDests& dests) {
  const uint32_t K = job.topk;
  if (ll_fp8<kSpec>(job)) {
    const bool pow2 = (job.fp8 & COURIER_GPU_EP_FP8_POW2_SCALES) != 0;
    const uint32_t c = base + threadIdx.x * 16;
    float amax = 0.0f;
#pragma unroll
    for (int i = 0; i < 16; ++i) amax = fmaxf(amax, fabsf(p.v[i]));
    amax = lanes8_max(amax);  // every lane of the warp (the shuffles need all)
    if (c >= job.hidden) return;
    const float scale = fp8_scale(amax, pow2);
    const Fp8Divisor divide(scale);
    uint32_t word[4];
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      float q[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) q[i] = divide(p.v[4 * w + i]);
      word[w] = float4_to_e4m3(q);
    }
    const uint4 packed{word[0], word[1], word[2], word[3]};
    const bool scale_lane = threadIdx.x % kFp8Lanes == 0;
    const uint32_t col = c / kFp8Channels, cols = job.hidden / kFp8Channels;
    for (uint32_t k = 0; k < K; ++k) {
      std::byte* row = dests.row[k];
      if (row == nullptr) continue;
      *reinterpret_cast<uint4*>(row + c) = packed;
      if (!scale_lane) continue;
      if (dests.scales[k] != nullptr) {
        dests.scales[k][col] = scale;
      } else if (dests.layout_l[k] >= 0) {  // an own row under a scales layout
        const uint64_t rows = uint64_t{job.num_ranks} * job.max_tokens;
        const auto l = static_cast<uint32_t>(dests.layout_l[k]);
        const auto slot = static_cast<uint32_t>(dests.layout_slot[k]);
        store_scale(own.scales, own.scales_layout, cols, rows, l, slot, col, float_bits(scale));
        // UE8M0's padding bytes past the last scale (four per word).
        const bool ue8m0 = (own.scales_layout & COURIER_GPU_EP_SCALES_UE8M0) != 0;
        for (uint32_t pad = cols; ue8m0 && col + 1 == cols && pad % 4 != 0; ++pad) {
          store_scale(own.scales, own.scales_layout, cols, rows, l, slot, pad, 0u);
        }
      }
    }
    return;
  }
  const uint64_t out_row_bytes = uint64_t{job.hidden} * (job.x_dtype_bits / 8);
#pragma unroll
  for (uint32_t q = 0; q < kChunks; ++q) {
    const uint64_t at = base + uint64_t{q * blockDim.x + threadIdx.x} * 16;
    if (at >= out_row_bytes) continue;
    for (uint32_t k = 0; k < K; ++k) {
      std::byte* row = dests.row[k];
      if (row != nullptr) *reinterpret_cast<int4*>(row + at) = p.w[q];
    }
  }
}

// The rest of token t after its first pass (stored by the caller), its
// source and k: to each of its destinations.
template <uint32_t kSpec>
__device__ __forceinline__ void ll_store_rest(const courier_gpu_ep_ll_dispatch_v1& job,
                                              const courier_gpu_ep_ll_receive_v1& own,
                                              bool own_rows, uint32_t t, const int32_t* expert,
                                              const int32_t* slot, const TokenDests& dests) {
  const uint32_t R = job.num_ranks, K = job.topk, L = job.num_experts / R;
  const uint32_t elem = job.x_dtype_bits / 8;
  const uint64_t out_row_bytes = ll_fp8<kSpec>(job) ? job.hidden : uint64_t{job.hidden} * elem;
  if (ll_row_vectors<kSpec>(job)) {
    const uint32_t span = ll_pass_span<kSpec>(job);
    const uint64_t end = ll_fp8<kSpec>(job) ? job.hidden : out_row_bytes;
    for (uint64_t base = span; base < end; base += span) {
      RowPass p;
      ll_load_pass<kSpec>(job, t, static_cast<uint32_t>(base), &p);
      ll_store_pass<kSpec>(job, own, static_cast<uint32_t>(base), p, dests);
    }
  } else {
    const std::byte* x = static_cast<const std::byte*>(job.x) + uint64_t{t} * job.hidden * elem;
    for (uint32_t k = 0; k < K; ++k) {
      if (dests.row[k] != nullptr)
        group_copy(dests.row[k], x, out_row_bytes, threadIdx.x, blockDim.x);
    }
  }
  if (threadIdx.x < K && expert[threadIdx.x] >= 0) {
    const uint32_t k = threadIdx.x, to = static_cast<uint32_t>(expert[k]) / L;
    if (to == job.rank && own_rows) {  // an own row: its source in the outputs
      const uint64_t row = ll_own_row(job, static_cast<uint32_t>(expert[k]) % L, slot[k]);
      own.src[row] = static_cast<int32_t>(t);
      own.k[row] = static_cast<int32_t>(k);
      return;
    }
    const uint64_t row = ll_staging_row(job, expert[k], slot[k]);
    reinterpret_cast<int32_t*>(window(job.peers, to, job.src_off))[row] = static_cast<int32_t>(t);
    reinterpret_cast<int32_t*>(window(job.peers, to, job.k_off))[row] = static_cast<int32_t>(k);
  }
}

// FUSE_SIGNAL, by the last block: the count per expert (a shared histogram,
// kHistogram experts at a time) into the window of the expert's rank, then
// this rank's data flag everywhere.
// `histogram`: kHistogram u32 of shared memory; `counted`: it already
// holds every expert's count (ll_send counted early); `refused`: a block
// of the launch failed (last_block's arrivals say so).
inline constexpr uint32_t kHistogram = 1024;
__device__ __forceinline__ void ll_signal_counts(const courier_gpu_ep_ll_dispatch_v1& job,
                                                 uint32_t* histogram, bool counted, bool refused) {
  const uint32_t R = job.num_ranks, E = job.num_experts, L = E / R;
  const uint32_t pairs = job.tokens * job.topk;
  for (uint32_t e = threadIdx.x; counted && e < E; e += blockDim.x) {
    reinterpret_cast<uint32_t*>(window(job.peers, e / L, job.record_off))[e] = histogram[e];
  }
  for (uint32_t first = 0; !counted && first < E; first += kHistogram) {
    for (uint32_t i = threadIdx.x; i < kHistogram; i += blockDim.x) histogram[i] = 0;
    __syncthreads();
    for (uint32_t i = threadIdx.x; i < pairs; i += blockDim.x) {
      const int64_t e = job.topk_idx[i];
      if (e >= static_cast<int64_t>(first) && e < static_cast<int64_t>(E) &&
          e < static_cast<int64_t>(first) + kHistogram) {
        atomicAdd(&histogram[e - first], 1u);
      }
    }
    __syncthreads();
    for (uint32_t e = first + threadIdx.x; e < E && e < first + kHistogram; e += blockDim.x) {
      reinterpret_cast<uint32_t*>(window(job.peers, e / L, job.record_off))[e] =
          histogram[e - first];
    }
    __syncthreads();
  }
  // Every thread's records before the release stores below, so that they
  // order them all.
  device::fence_before_block_release();
  raise_flags(job.peers, R, job.flag_off, epoch_of(job.epoch_word, job.epoch), refused);
}

// ---- ep_ll_dispatch: a block per token at a time (its experts' slots,
// the row quantized once and stored to each); first each block waits for
// the ranks' release flags (what it stored two calls ago was read). With
// FUSE_SIGNAL the last block to finish counts and signals.
template <uint32_t kSpec>
__device__ __forceinline__ void ll_send(const courier_gpu_ep_ll_dispatch_v1& job,
                                        const courier_gpu_ep_ll_receive_v1& own, bool own_rows,
                                        uint64_t* stamps) {
  if constexpr (kSpec != kLlGeneral) own_rows = (kSpec & kLlOwnRows) != 0;
  __shared__ int32_t expert[kMaxTopk];
  __shared__ int32_t slot[kMaxTopk];
  __shared__ uint32_t before[kMaxTopk];
  __shared__ TokenDests dests;
  __shared__ uint32_t failed;
  // FUSE_SIGNAL: every block counts the pairs per expert while its rows go
  // out (the loads issued before the stores, added up after them), so the
  // last block has the counts when it arrives.
  __shared__ uint32_t histogram[kHistogram];
  // The pairs before a token per expert (ll_token_slots), zero to begin with.
  __shared__ uint32_t earlier_pairs[kHistogram];
  uint32_t* earlier = (job.fuse & COURIER_GPU_EP_FUSE_ROUTE) != 0 && job.num_experts <= kHistogram
                          ? earlier_pairs
                          : nullptr;
  for (uint32_t e = threadIdx.x; earlier != nullptr && e < job.num_experts; e += blockDim.x) {
    earlier[e] = 0;  // (ordered before the adds by ll_token_slots' first barrier)
  }
  constexpr uint32_t kCountAhead = 4;  // pairs per thread
  const uint32_t E = job.num_experts, pairs = job.tokens * job.topk;
  const bool count_early = (job.fuse & COURIER_GPU_EP_FUSE_SIGNAL) != 0 && E <= kHistogram &&
                           pairs <= kCountAhead * blockDim.x;
  for (uint32_t e = threadIdx.x; count_early && e < E; e += blockDim.x) histogram[e] = 0;
  int32_t ahead[kCountAhead];
  bool to_count = count_early;
  auto load_counts = [&] {
#pragma unroll
    for (uint32_t q = 0; q < kCountAhead; ++q) {
      const uint32_t i = q * blockDim.x + threadIdx.x;
      const int64_t e = i < pairs ? job.topk_idx[i] : -1;
      ahead[q] = e >= 0 && e < static_cast<int64_t>(E) ? static_cast<int32_t>(e) : -1;
    }
  };
  auto add_counts = [&] {
#pragma unroll
    for (uint32_t q = 0; q < kCountAhead; ++q) {
      if (ahead[q] >= 0) atomicAdd(&histogram[ahead[q]], 1u);
    }
    to_count = false;
  };
  // (The epoch word read as volatile: a plain load there would let hipcc
  // merge the two loads into one from a chosen address, and a kernel
  // parameter whose field's address is chosen is copied into scratch.)
  const uint64_t released = job.epoch_word != nullptr
                                ? *const_cast<const volatile uint64_t*>(job.epoch_word)
                                : job.released_epoch;
  if (threadIdx.x == 0) failed = status_of(job.status);
  bool bad = false;  // this thread found a bad expert index
  // The ranks' release flags, waited for once, before the first store (the
  // first token's loads and slots go first, so their memory round trips
  // overlap the wait); a wait that timed out stores nothing. Not this
  // rank's own when its rows go straight into the outputs (`own_rows`): nothing
  // goes into its own staging then (at EP1 no flag is read at all).
  bool waited = false;
  auto wait_release = [&] {
    if (threadIdx.x < job.num_ranks && !(own_rows && threadIdx.x == job.rank) &&
        !wait_released(job.released + threadIdx.x, released, job.timeout_ns, job.status,
                       threadIdx.x)) {
      failed = 1;
    }
    __syncthreads();
    stamp(stamps, kStampReleased);
    waited = true;
  };
  // No barrier here: `failed` and the histogram are first read after
  // ll_token_slots' barriers, so the status read overlaps the first row's
  // loads, which go out whatever the status (x is this call's: harmless).
  const bool vectors = ll_row_vectors<kSpec>(job);
  for (uint32_t t = blockIdx.x; t < job.tokens; t += gridDim.x) {
    RowPass first;  // loaded while the slots are found
    if (vectors) ll_load_pass<kSpec>(job, t, 0, &first);
    ll_token_slots<kSpec>(job, own, own_rows, t, expert, slot, before, earlier, &dests, &bad,
                          stamps);
    if (t == blockIdx.x) stamp(stamps, kStampRouted);
    if (to_count) load_counts();
    if (!waited) wait_release();
    if (failed == 0) {
      if (vectors) ll_store_pass<kSpec>(job, own, 0, first, dests);
      ll_store_rest<kSpec>(job, own, own_rows, t, expert, slot, dests);
    }
    if (to_count) add_counts();
    __syncthreads();  // expert, slot and dests are the next token's
  }
  if (to_count) {  // a block without a token
    load_counts();
    __syncthreads();  // the histogram's zeros first (no token's barriers here)
    add_counts();
  }
  if (!waited) wait_release();  // the last block stores the counts
  stamp(stamps, kStampSent);
  if ((job.fuse & COURIER_GPU_EP_FUSE_SIGNAL) == 0) {
    __threadfence_system();  // an ep_signal follows
    return;
  }
  // This rank refuses the call when a block found the status set (at its
  // start: an earlier failure, or the host's refusal), timed out waiting
  // for a release flag, or found a bad index.
  bool refused = false;
  if (last_block(job.done, failed != 0 || bad, &refused)) {
    stamp(stamps, kStampArrived);
    ll_signal_counts(job, histogram, count_early, refused);
    stamp(stamps, kStampSignalled);
  }
}

// ---- ep_ll_receive: (with wait.flags, each block first waits for the
// ranks' data flags) with at most kBalancedPairs (local expert, source
// rank) pairs, every block reads all their counts, and packs an equal
// share of all the rows with block-wide copies; with more, a block takes
// its local experts (l = block, block + grid, ...) kPassExperts at a time
// and packs their staging blocks with one block-wide copy of all their
// rows (the experts one after another would cost a chain of memory round
// trips each). The last block to finish raises the release flags.
inline constexpr uint32_t kPassExperts = 8;

// A pass of a block's local experts: expert i is l = first + i * gridDim.x;
// how many there are (at most kPassExperts, below L).
__device__ __forceinline__ uint32_t pass_experts(uint32_t first, uint32_t L) {
  uint32_t n = 0;
  while (n < kPassExperts && first + n * gridDim.x < L) ++n;
  return n;
}
// The pass's rows end to end: row_begin[i] is where expert i's begin[i][R]
// rows start; returns the total. Every thread calls it.
__device__ __forceinline__ uint32_t pass_rows(const uint32_t (*begin)[COURIER_GPU_EP_MAX_RANKS + 1],
                                              uint32_t n, uint32_t R, uint32_t* row_begin) {
  __syncthreads();
  if (threadIdx.x == 0) {
    row_begin[0] = 0;
    for (uint32_t i = 0; i < n; ++i) row_begin[i + 1] = row_begin[i] + begin[i][R];
  }
  __syncthreads();
  return row_begin[n];
}
// Row j of a pass: its expert i, its row within the expert, and the rank
// whose rows hold it (begin[i][s] <= within < begin[i][s + 1]).
__device__ __forceinline__ void pass_locate(uint32_t j, uint32_t n, const uint32_t* row_begin,
                                            const uint32_t (*begin)[COURIER_GPU_EP_MAX_RANKS + 1],
                                            uint32_t R, uint32_t* i, uint32_t* within,
                                            uint32_t* s) {
  *i = 0;
  while (*i + 1 < n && j >= row_begin[*i + 1]) ++*i;
  *within = j - row_begin[*i];
  *s = 0;
  while (*s + 1 < R && *within >= begin[*i][*s + 1]) ++*s;
}

// `own_rows`: the send half of this launch stored this rank's own rows in
// place (ll_own_rows): each expert's block of rows from this rank comes
// first and is not moved, the other ranks' follow in the order rank + 1,
// rank + 2, ... (mod R); without, ranks 0, 1, ... in turn.
// `after_send`: the send half ran first in this launch: its blocks wait for
// this rank's own data flag before the others' (see reduce_half).
template <uint32_t kSpec>
__device__ __forceinline__ void ll_receive_half(const courier_gpu_ep_ll_receive_v1& job,
                                                bool own_rows, uint64_t* stamps,
                                                bool after_send = false) {
  if constexpr (kSpec != kLlGeneral) own_rows = (kSpec & kLlOwnRows) != 0;
  __shared__ uint32_t begin[kPassExperts][COURIER_GPU_EP_MAX_RANKS + 1];  // per rank, then total
  __shared__ uint32_t row_begin[kPassExperts + 1];  // the pass's rows per expert, cumulative
  __shared__ uint32_t failed;
  __shared__ const std::byte* from_row[kBlockRows];
  __shared__ std::byte* to_row[kBlockRows];
  __shared__ const std::byte* from_scales[kBlockRows];
  __shared__ std::byte* to_scales[kBlockRows];
  const uint32_t R = job.num_ranks, L = job.local_experts;
  const uint64_t rows_per_expert = uint64_t{R} * job.max_tokens;
  // Read before any block can finish the call (the last one moves it on).
  const uint64_t epoch = epoch_of(job.epoch_word, job.epoch);
  if (after_send && job.wait.flags != nullptr && job.wait.num_ranks > 1) {
    if (threadIdx.x == 0) wait_for(job.wait, job.rank);
    __syncthreads();
  }
  if (job.wait.flags != nullptr) {
    const bool seen = after_send && job.wait.num_ranks > 1 && threadIdx.x == job.rank;
    if (threadIdx.x < job.wait.num_ranks && !seen) wait_for(job.wait, threadIdx.x);
    __syncthreads();
  }
  stamp(stamps, kStampFlagsSeen);
  const uint64_t scale_bytes = job.scale_cols * 4ull;
  const bool vectors = kSpec != kLlGeneral || ((job.row_bytes | reinterpret_cast<uintptr_t>(job.x) |
                                                reinterpret_cast<uintptr_t>(job.staging_x)) &
                                               15u) == 0;
  // Plain scales are rows too (with a layout, store_scales below).
  const bool plain_scales = vectors && job.scale_cols > 0 && job.scales_layout == 0 &&
                            ((scale_bytes | reinterpret_cast<uintptr_t>(job.scales) |
                              reinterpret_cast<uintptr_t>(job.staging_scales)) &
                             15u) == 0;
  const uint32_t lane = threadIdx.x % kGroup;
  const uint32_t groups = blockDim.x / kGroup, group = threadIdx.x / kGroup;
  // The rank whose rows come q-th in each expert, and whose rows are moved.
  auto rank_at = [&](uint32_t q) { return own_rows ? (job.rank + q) % R : q; };
  auto moved = [&](uint32_t s) { return !own_rows || s != job.rank; };
  // A row's source and k, and (self_rows) where a row of this rank's own landed.
  auto move_source = [&](uint32_t s, uint64_t from, uint64_t to) {
    const int32_t t = job.staging_src[from], k = job.staging_k[from];
    job.src[to] = t;
    job.k[to] = k;
    if (job.self_rows != nullptr && s == job.rank) {
      job.self_rows[uint64_t(t) * job.topk + static_cast<uint32_t>(k)] = static_cast<int32_t>(to);
    }
  };
  // Rows [lo, hi) of a numbering that locate(j, &l, &within, &from, &to)
  // maps to expert l, its row `within`, where it was staged (from) and
  // where it goes (to), returning the rank it came from: the whole block
  // on them, kBlockRows at a time, each row's source and k on the way.
  auto move_rows = [&](uint32_t lo, uint32_t hi, auto&& locate) {
    for (uint32_t chunk = lo; vectors && chunk < hi; chunk += kBlockRows) {
      const uint32_t m = hi - chunk < kBlockRows ? hi - chunk : kBlockRows;
      for (uint32_t r = threadIdx.x; r < m; r += blockDim.x) {
        uint32_t l = 0, within = 0;
        uint64_t from = 0, to = 0;
        const uint32_t s = locate(chunk + r, &l, &within, &from, &to);
        from_row[r] = static_cast<const std::byte*>(job.staging_x) + from * job.row_bytes;
        // (an own row is in place: NULL skips it in block_copy_rows)
        to_row[r] = moved(s) ? static_cast<std::byte*>(job.x) + to * job.row_bytes : nullptr;
        if (plain_scales) {
          from_scales[r] =
              reinterpret_cast<const std::byte*>(job.staging_scales) + from * scale_bytes;
          to_scales[r] = reinterpret_cast<std::byte*>(job.scales) + to * scale_bytes;
        }
        if (moved(s)) move_source(s, from, to);
      }
      __syncthreads();
      block_copy_rows(m, job.row_bytes, from_row, to_row, plain_scales ? scale_bytes : 0,
                      from_scales, to_scales);
      __syncthreads();
    }
    // What the block-wide copies did not do: a group per row.
    const bool rest = !vectors || (job.scale_cols > 0 && !plain_scales);
    for (uint32_t j = lo + group; rest && j < hi; j += groups) {
      uint32_t l = 0, within = 0;
      uint64_t from = 0, to = 0;
      const uint32_t s = locate(j, &l, &within, &from, &to);
      if (!moved(s)) continue;
      if (!vectors) {
        group_copy(static_cast<std::byte*>(job.x) + to * job.row_bytes,
                   static_cast<const std::byte*>(job.staging_x) + from * job.row_bytes,
                   job.row_bytes, lane, kGroup);
        if (lane == 0) move_source(s, from, to);
      }
      if (job.scale_cols > 0 && job.scales_layout != 0) {
        store_scales(job.scales, job.scales_layout, job.scale_cols, rows_per_expert, l, within,
                     job.staging_scales + from * job.scale_cols, lane, kGroup);
      } else if (job.scale_cols > 0) {
        group_copy(job.scales + to * job.scale_cols, job.staging_scales + from * job.scale_cols,
                   scale_bytes, lane, kGroup);
      }
    }
  };
  const uint32_t P = L * R;  // (expert, source rank) pairs
  const bool balanced = kSpec != kLlGeneral || P <= kBalancedPairs;
  if (balanced) {
    // Every block reads all the pairs' counts and their prefix sums, then
    // takes an equal share of all the rows (experts hold different numbers
    // of rows: a block per expert would wait for the fullest).
    // Pair p = l * R + q holds expert l's rows from rank rank_at(q):
    // pair_begin[p] is where they begin among all the pairs' rows,
    // move_begin[p] among the rows to move (own rows in place are not).
    __shared__ uint32_t pair_begin[kBalancedPairs + 1];
    __shared__ uint32_t move_begin[kBalancedPairs + 1];
    for (uint32_t p = threadIdx.x; p < P; p += blockDim.x) {
      pair_begin[p] =
          job.records[uint64_t{rank_at(p % R)} * job.num_experts + job.rank * L + p / R];
    }
    if (threadIdx.x == 0) failed = status_of(job.status);
    __syncthreads();
    stamp(stamps, kStampCounted);
    const uint32_t per = (P + blockDim.x - 1) / blockDim.x;
    const uint32_t run = threadIdx.x * per < P ? threadIdx.x * per : P;
    const uint32_t run_end = run + per < P ? run + per : P;
    // Both sums in one scan: all rows in the high half, rows to move in
    // the low (which never carries: fewer than 2^32 rows).
    uint64_t sum = 0;
    for (uint32_t p = run; p < run_end; ++p) {
      sum += uint64_t{pair_begin[p]} << 32 | (moved(rank_at(p % R)) ? pair_begin[p] : 0u);
    }
    uint64_t totals = 0;
    uint64_t at = block_exclusive_scan(sum, &totals);  // (its barriers order the reads above)
    for (uint32_t p = run; p < run_end; ++p) {
      const uint32_t count = pair_begin[p];
      pair_begin[p] = static_cast<uint32_t>(at >> 32);
      move_begin[p] = static_cast<uint32_t>(at);
      at += uint64_t{count} << 32 | (moved(rank_at(p % R)) ? count : 0u);
    }
    const uint32_t total = static_cast<uint32_t>(totals);  // rows to move
    if (threadIdx.x == 0) {
      pair_begin[P] = static_cast<uint32_t>(totals >> 32);
      move_begin[P] = total;
    }
    __syncthreads();
    stamp(stamps, kStampScanned);
    // The outputs' counts and ranges, spread over the blocks.
    for (uint64_t p = uint64_t{blockIdx.x} * blockDim.x + threadIdx.x; p < P;
         p += uint64_t{gridDim.x} * blockDim.x) {
      const uint32_t l = static_cast<uint32_t>(p) / R, first = pair_begin[l * R];
      const uint32_t begin_p = pair_begin[p] - first, count = pair_begin[p + 1] - pair_begin[p];
      job.range[uint64_t{l} * R + rank_at(static_cast<uint32_t>(p % R))] =
          static_cast<int64_t>(uint64_t{begin_p} << 32 | count);
      if (p % R == 0) job.count[l] = static_cast<int32_t>(pair_begin[(l + 1) * R] - first);
    }
    auto locate = [&](uint32_t j, uint32_t* l, uint32_t* within, uint64_t* from, uint64_t* to) {
      uint32_t lo = 0, hi = P;  // the last pair whose rows to move begin at or before j
      while (hi - lo > 1) {
        const uint32_t mid = (lo + hi) / 2;
        if (move_begin[mid] <= j) {
          lo = mid;
        } else {
          hi = mid;
        }
      }
      const uint32_t p = lo, in_pair = j - move_begin[p], s = rank_at(p % R);
      *l = p / R;
      *within = pair_begin[p] - pair_begin[*l * R] + in_pair;
      *from = (uint64_t{*l} * R + s) * job.max_tokens + in_pair;
      *to = *l * rows_per_expert + *within;
      return s;
    };
    const uint32_t lo = static_cast<uint32_t>(uint64_t{total} * blockIdx.x / gridDim.x);
    const uint32_t hi = static_cast<uint32_t>(uint64_t{total} * (blockIdx.x + 1) / gridDim.x);
    if (failed == 0) move_rows(lo, hi, locate);
    __syncthreads();  // the block's rows are packed (kStampMoved), as after a pass below
  }
  for (uint32_t first = blockIdx.x; !balanced && first < L; first += gridDim.x * kPassExperts) {
    auto expert_l = [&](uint32_t i) { return first + i * gridDim.x; };
    const uint32_t n = pass_experts(first, L);
    // Every (expert, rank) count at once, then each expert's ranges.
    // begin[i][q]: where the rows of rank rank_at(q) begin in expert i.
    for (uint32_t x = threadIdx.x; x < n * R; x += blockDim.x) {
      const uint32_t i = x / R, q = x % R;
      begin[i][q] =
          job.records[uint64_t{rank_at(q)} * job.num_experts + job.rank * L + expert_l(i)];
    }
    if (threadIdx.x == 0) failed = status_of(job.status);
    __syncthreads();
    if (threadIdx.x < n) {
      const uint32_t i = threadIdx.x, l = expert_l(i);
      uint32_t sum = 0;
      for (uint32_t q = 0; q < R; ++q) {
        const uint32_t count = begin[i][q];
        begin[i][q] = sum;
        job.range[uint64_t{l} * R + rank_at(q)] = static_cast<int64_t>(uint64_t{sum} << 32 | count);
        sum += count;
      }
      begin[i][R] = sum;
      job.count[l] = static_cast<int32_t>(sum);
    }
    const uint32_t rows = pass_rows(begin, n, R, row_begin);
    // Row j of the pass.
    auto locate = [&](uint32_t j, uint32_t* l, uint32_t* within, uint64_t* from, uint64_t* to) {
      uint32_t i = 0, q = 0;
      pass_locate(j, n, row_begin, begin, R, &i, within, &q);
      const uint32_t s = rank_at(q);
      *l = expert_l(i);
      *from = (uint64_t{*l} * R + s) * job.max_tokens + (*within - begin[i][q]);
      *to = *l * rows_per_expert + *within;
      return s;
    };
    if (failed == 0) move_rows(0, rows, locate);
    __syncthreads();  // the shared arrays are the next pass's
  }
  stamp(stamps, kStampMoved);
  // (A block without experts has not read the status yet.)
  if (!balanced && blockIdx.x >= L && threadIdx.x == 0) failed = status_of(job.status);
  if (job.wait.flags != nullptr) tell_failure(job.wait, failed);
  // Every block's reads of the staging are done before the release (the
  // release stores order them, through last_block's chain).
  if (!last_block(job.done)) return;
  stamp(stamps, kStampLast);
  if (threadIdx.x < R) {
    device::store_release(
        reinterpret_cast<uint64_t*>(window(job.peers, threadIdx.x, job.release_off)), epoch);
  }
  if (threadIdx.x == 0 && job.epoch_word != nullptr) *job.epoch_word = epoch;  // call finished
  if (job.wait.flags != nullptr) tell_done(job.done_mark, job.status);
  stamp(stamps, kStampFinished);
}

// ---- ep_combine_send: a group per row, back to the rank it came from.
// Returns whether the status was set (then nothing is sent).
__device__ __forceinline__ bool combine_send_half(const courier_gpu_ep_combine_send_v1& job) {
  __shared__ uint32_t failed;
  if (threadIdx.x == 0) failed = status_of(job.status);
  __syncthreads();
  if (failed != 0) return true;  // (the signal after it has its own barriers)
  const uint32_t lane = threadIdx.x % kGroup;
  const uint32_t groups = gridDim.x * (blockDim.x / kGroup);
  const uint32_t first = blockIdx.x * (blockDim.x / kGroup) + threadIdx.x / kGroup;
  const auto* x = static_cast<const std::byte*>(job.x);
  // LogFMT (minor 5): each row is encoded straight into its slot at the
  // peer, a lane per 128-channel block (coded blocks store 160 bytes).
  const bool logfmt = (job.mode & COURIER_GPU_EP_COMBINE_LOGFMT) != 0;
  const uint32_t hidden = job.row_bytes / 2;
  const uint64_t slot_bytes = logfmt ? COURIER_GPU_EP_LOGFMT_SLOT_BYTES(hidden) : job.row_bytes;
  if ((job.mode & COURIER_GPU_EP_ROUTE_MASK) == COURIER_GPU_EP_ROUTE_RANKS) {
    // Where each source's rows begin in x: from the dispatch's records
    // (minor 16) or the plan's begins.
    // `total`: the rows of x (hipcc: written here rather than chosen
    // between begin[R] and job.rows, whose address it would then take).
    __shared__ uint32_t begin[COURIER_GPU_EP_MAX_RANKS + 1];
    __shared__ uint32_t total;
    const uint32_t R = job.num_ranks;
    if (job.records != nullptr) {
      if (threadIdx.x == 0) {
        uint32_t sum = 0;
        for (uint32_t s = 0; s < R; ++s) {
          begin[s] = sum;
          sum += job.records[uint64_t{s} * job.record_words + job.rank];
        }
        begin[R] = sum;
        total = sum;
      }
    } else {
      for (uint32_t s = threadIdx.x; s <= R; s += blockDim.x) {
        begin[s] = static_cast<uint32_t>(job.begins[s]);
      }
      if (threadIdx.x == 0) total = job.rows;
    }
    __syncthreads();
    const uint32_t rows = total;
    // With skip_self this rank's own rows stay (the reduce reads them in
    // x): the groups take the others only.
    const uint32_t own_begin = begin[job.rank], own = begin[job.rank + 1] - own_begin;
    const bool skip = job.skip_self != 0;
    const uint32_t moved = skip ? rows - own : rows;
    for (uint32_t j = first; j < moved; j += groups) {
      const uint32_t i = skip && j >= own_begin ? j + own : j;
      uint32_t s = 0;
      while (s + 1 < R && i >= begin[s + 1]) ++s;
      const uint64_t slot = uint64_t{job.rank} * job.rows_per_rank + i - begin[s];
      group_copy(window(job.peers, s, job.out_off + slot * job.row_bytes),
                 x + uint64_t{i} * job.row_bytes, job.row_bytes, lane, kGroup);
    }
  } else {
    // A block takes its local experts kPassExperts at a time (as the
    // receive did): all the rows they received go back in one block-wide
    // copy.
    // Per rank, its rows' begin and count, then the total: the ranks' blocks
    // in the order the dispatch packed them (gpu_v1.h: the backend's order,
    // not always 0, 1, ...), so a row's rank is the block that holds it.
    __shared__ uint32_t begin[kPassExperts][COURIER_GPU_EP_MAX_RANKS + 1];
    __shared__ uint32_t count[kPassExperts][COURIER_GPU_EP_MAX_RANKS];
    __shared__ uint32_t row_begin[kPassExperts + 1];
    __shared__ const std::byte* from_row[kBlockRows];
    __shared__ std::byte* to_row[kBlockRows];
    const uint32_t R = job.num_ranks, L = job.local_experts;
    const bool vectors =
        !logfmt && ((job.row_bytes | reinterpret_cast<uintptr_t>(x) | job.out_off) & 15u) == 0;
    for (uint32_t pass = blockIdx.x; pass < L; pass += gridDim.x * kPassExperts) {
      auto expert_l = [&](uint32_t i) { return pass + i * gridDim.x; };
      const uint32_t n = pass_experts(pass, L);
      for (uint32_t v = threadIdx.x; v < n * (R + 1); v += blockDim.x) {
        const uint32_t i = v / (R + 1), s = v % (R + 1), l = expert_l(i);
        if (s == R) {
          begin[i][R] = static_cast<uint32_t>(job.count[l]);
          continue;
        }
        const auto range = static_cast<uint64_t>(job.range[uint64_t{l} * R + s]);
        begin[i][s] = static_cast<uint32_t>(range >> 32);
        count[i][s] = static_cast<uint32_t>(range);
      }
      const uint32_t rows = pass_rows(begin, n, R, row_begin);
      // With skip_self, a pass whose rows all came from this rank (every
      // pass at EP1) sends nothing: no row's source to read.
      __shared__ uint32_t own_rows;
      if (threadIdx.x == 0) {
        own_rows = 0;
        for (uint32_t i = 0; job.skip_self != 0 && i < n; ++i) own_rows += count[i][job.rank];
      }
      __syncthreads();
      for (uint32_t chunk = 0; own_rows < rows && chunk < rows; chunk += kBlockRows) {
        const uint32_t m = rows - chunk < kBlockRows ? rows - chunk : kBlockRows;
        for (uint32_t r = threadIdx.x; r < m; r += blockDim.x) {
          const uint32_t j = chunk + r;
          uint32_t i = 0;
          while (i + 1 < n && j >= row_begin[i + 1]) ++i;
          const uint32_t within = j - row_begin[i];
          uint32_t s = 0;
          while (s + 1 < R && !(within >= begin[i][s] && within - begin[i][s] < count[i][s])) ++s;
          const uint64_t row = uint64_t{expert_l(i)} * job.rows_per_expert + within;
          const uint64_t slot =
              uint64_t(job.src[row]) * job.topk + static_cast<uint32_t>(job.k[row]);
          from_row[r] = x + row * job.row_bytes;
          // skip_self: the reduce reads this rank's own rows in x.
          to_row[r] = job.skip_self != 0 && s == job.rank
                          ? nullptr
                          : window(job.peers, s, job.out_off + slot * slot_bytes);
        }
        __syncthreads();
        if (vectors) {
          block_copy_rows(m, job.row_bytes, from_row, to_row);
        } else {
          for (uint32_t r = threadIdx.x / kGroup; r < m; r += blockDim.x / kGroup) {
            if (to_row[r] == nullptr) continue;
            if (logfmt) {
              logfmt_encode_row(to_row[r], from_row[r], hidden, lane, kGroup);
            } else {
              group_copy(to_row[r], from_row[r], job.row_bytes, lane, kGroup);
            }
          }
        }
        __syncthreads();
      }
      __syncthreads();  // the shared arrays are the next pass's
    }
  }
  return false;
}

// ep_combine_send: the rows, then (with `done`) the last block raises this
// rank's flags; without, an ep_signal follows.
__device__ __forceinline__ void combine_send_signal(const courier_gpu_ep_combine_send_v1& job,
                                                    uint64_t* stamps) {
  stamp(stamps, kStampStart);
  const bool failed = combine_send_half(job);
  stamp(stamps, kStampSent);
  if (job.done == nullptr) {
    __threadfence_system();
    return;
  }
  // Refused when a block found the status set at its start.
  bool refused = false;
  if (!last_block(job.done, failed, &refused)) return;
  raise_flags(job.peers, job.num_ranks, job.flag_off, epoch_of(job.epoch_word, job.epoch), refused);
  stamp(stamps, kStampSignalled);
}

// A bfloat16 token of `terms` rows (term_row[j], NULL: none, weighted by
// term_weight[j]) summed into `out`: each thread 8 channels of `per_step`
// pieces at a time, the loads of all their terms (at most kAhead) issued
// before any is summed, so a token costs one memory round trip per step
// rather than one per term and piece. (kAhead sets the registers, hence
// how many blocks an SM holds: direct_launch.hpp picks it per launch.)
// kTerms: `terms` known at compile time (0: not), so that the unrolled
// loads and sums have no branches on where a piece ends: with them, every
// one of the kAhead steps carried its own copy of a piece's store, and the
// cold kernel stalled on instruction fetches more than on memory.
template <uint32_t kAhead, uint32_t kTerms = 0>
__device__ __forceinline__ void reduce_token_bf16(uint32_t hidden, uint32_t runtime_terms,
                                                  const std::byte* const* term_row,
                                                  const float* term_weight, std::byte* out) {
  static_assert(kTerms <= kAhead, "a step holds every term of a piece");
  const uint32_t terms = kTerms != 0 ? kTerms : runtime_terms;
  const uint32_t per_step = kAhead / terms;  // pieces (of 8 channels) per step
  const uint32_t stride = blockDim.x * 8;    // channels between a thread's pieces
  for (uint32_t c0 = threadIdx.x * 8; c0 < hidden; c0 += per_step * stride) {
    uint4 raw[kAhead];
    // (piece g, term j) of load q, counted along without dividing.
    uint32_t g = 0, j = 0;
#pragma unroll
    for (uint32_t q = 0; q < kAhead; ++q) {
      const uint32_t c = c0 + g * stride;
      raw[q] = make_uint4(0, 0, 0, 0);
      if (g < per_step && c < hidden && term_row[j] != nullptr) {
        raw[q] =
            *reinterpret_cast<const uint4*>(reinterpret_cast<const uint16_t*>(term_row[j]) + c);
      }
      if (++j == terms) {
        j = 0;
        ++g;
      }
    }
    float sum[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    g = 0;
    j = 0;
#pragma unroll
    for (uint32_t q = 0; q < kAhead; ++q) {
      if (g < per_step) {
        const float w = term_row[j] != nullptr ? term_weight[j] : 0.0f;
        const uint32_t words[4] = {raw[q].x, raw[q].y, raw[q].z, raw[q].w};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          sum[2 * i] += w * bf16_to_float(static_cast<uint16_t>(words[i] & 0xFFFFu));
          sum[2 * i + 1] += w * bf16_to_float(static_cast<uint16_t>(words[i] >> 16));
        }
      }
      if (++j == terms) {
        const uint32_t c = c0 + g * stride;
        if (g < per_step && c < hidden) {
          uint4 packed;
          packed.x = uint32_t{float_to_bf16(sum[0])} | uint32_t{float_to_bf16(sum[1])} << 16;
          packed.y = uint32_t{float_to_bf16(sum[2])} | uint32_t{float_to_bf16(sum[3])} << 16;
          packed.z = uint32_t{float_to_bf16(sum[4])} | uint32_t{float_to_bf16(sum[5])} << 16;
          packed.w = uint32_t{float_to_bf16(sum[6])} | uint32_t{float_to_bf16(sum[7])} << 16;
          *reinterpret_cast<uint4*>(reinterpret_cast<uint16_t*>(out) + c) = packed;
        }
#pragma unroll
        for (int i = 0; i < 8; ++i) sum[i] = 0.0f;
        j = 0;
        ++g;
      }
    }
  }
}

// A by-rank term's row: this rank's own rows are read where they are
// (local_rows), a peer's where they arrived (rows, a block of rows_per_term
// slots per term). NULL for a token the term does not hold.
__device__ __forceinline__ const std::byte* by_rank_row(const courier_gpu_ep_reduce_v1& job,
                                                        uint32_t term, int32_t slot,
                                                        uint64_t row_bytes, uint64_t slot_bytes) {
  if (slot < 0) return nullptr;
  if (job.local_rows != nullptr && term == job.local_term) {
    return static_cast<const std::byte*>(job.local_rows) + uint64_t(slot) * row_bytes;
  }
  return static_cast<const std::byte*>(job.rows) +
         (uint64_t{term} * job.rows_per_term + static_cast<uint32_t>(slot)) * slot_bytes;
}

// By rank with many tokens (high-throughput: narrow blocks, a term per
// rank, kTerms of them): every thread reads the token's slots itself (the
// block's threads read the same words: one load a warp) rather than from
// shared memory behind a barrier, so a block has no barrier per token and
// its warps run ahead of each other into the next token's loads. (A barrier
// per row made a 4096-row gather 53.4 us instead of 45.8 on an H100,
// tests/gpu/copy_floor.cu.) The next token's slots load while this one's
// rows are summed.
template <uint32_t kAhead, uint32_t kTerms>
__device__ __forceinline__ void reduce_by_rank(const courier_gpu_ep_reduce_v1& job) {
  static_assert(kTerms <= kAhead, "a step holds every term of a piece");
  const uint64_t row_bytes = uint64_t{job.hidden} * 2;
  auto slots_of = [&](uint32_t t, int32_t(&slot)[kTerms]) {
#pragma unroll
    for (uint32_t j = 0; j < kTerms; ++j) {
      slot[j] = t < job.tokens ? job.slots[uint64_t{t} * kTerms + j] : -1;
    }
  };
  float ones[kTerms];  // by rank, every term's weight
#pragma unroll
  for (uint32_t j = 0; j < kTerms; ++j) ones[j] = 1.0f;
  int32_t next[kTerms];
  slots_of(blockIdx.x, next);
  for (uint32_t t = blockIdx.x; t < job.tokens; t += gridDim.x) {
    const std::byte* row[kTerms];
#pragma unroll
    for (uint32_t j = 0; j < kTerms; ++j)
      row[j] = by_rank_row(job, j, next[j], row_bytes, row_bytes);
    slots_of(t + gridDim.x, next);
    reduce_token_bf16<kAhead, kTerms>(job.hidden, kTerms, row, ones,
                                      static_cast<std::byte*>(job.out) + uint64_t{t} * row_bytes);
  }
}

// ---- ep_reduce: a block per token at a time; each thread 8 channels at a
// time, the token's slots and weights read once into shared memory, the
// terms' loads issued before they are summed. A block with several tokens
// (the launch has fewer blocks than tokens) loads the slots of its next
// token while it sums this one, so a token costs one memory round trip.
template <uint32_t kAhead>
__device__ __forceinline__ void reduce_rows(const courier_gpu_ep_reduce_v1& job) {
  constexpr uint32_t kMaxTerms =
      COURIER_GPU_EP_MAX_RANKS;   // RANKS: a term per rank; EXPERTS: top-k
  constexpr uint32_t kBatch = 4;  // 32 values in flight per thread (registers: occupancy)
  __shared__ const std::byte* term_row[kMaxTerms];  // NULL: no term
  __shared__ float term_weight[kMaxTerms];
  const uint32_t elem = job.dtype_bits / 8;
  const uint64_t row_bytes = uint64_t{job.hidden} * elem;
  // LogFMT (minor 5): the rows are slots to decode (bfloat16 out).
  const bool logfmt = (job.mode & COURIER_GPU_EP_COMBINE_LOGFMT) != 0;
  const uint64_t slot_bytes = logfmt ? COURIER_GPU_EP_LOGFMT_SLOT_BYTES(job.hidden) : row_bytes;
  const bool by_rank = (job.mode & COURIER_GPU_EP_ROUTE_MASK) == COURIER_GPU_EP_ROUTE_RANKS;
  const auto* rows = static_cast<const std::byte*>(job.rows);
  if constexpr (kAhead < 8) {  // the narrow instance: many tokens
    if (by_rank && !logfmt && job.dtype_bits == 16) {
      switch (job.terms) {
        case 1:
          return reduce_by_rank<kAhead, 1>(job);
        case 2:
          return reduce_by_rank<kAhead, 2>(job);
        case 4:
          return reduce_by_rank<kAhead, 4>(job);
        default:
          break;  // the path below, a barrier per token
      }
    }
  }
  // Thread `term` < terms (terms <= kMaxTerms <= blockDim.x) owns that term.
  const uint32_t term = threadIdx.x;
  auto slot_of = [&](uint32_t t) {
    return t < job.tokens && term < job.terms ? job.slots[uint64_t{t} * job.terms + term] : -1;
  };
  int32_t next_slot = slot_of(blockIdx.x);
  for (uint32_t t = blockIdx.x; t < job.tokens; t += gridDim.x) {
    const int32_t slot = next_slot;
    next_slot = slot_of(t + gridDim.x);  // in flight while this token is summed
    if (term < job.terms) {
      const std::byte* row = nullptr;
      float w = 0.0f;
      if (slot >= 0 && by_rank) {
        row = by_rank_row(job, term, slot, row_bytes, slot_bytes);
        w = 1.0f;
      } else if (slot >= 0) {
        const int32_t local = job.local_rows != nullptr && job.local_index != nullptr && !logfmt
                                  ? job.local_index[uint64_t{t} * job.terms + term]
                                  : -1;
        row = local >= 0
                  ? static_cast<const std::byte*>(job.local_rows) + uint64_t(local) * row_bytes
                  : rows + (uint64_t{t} * job.terms + term) * slot_bytes;
        w = job.weights[uint64_t{t} * job.terms + term];
      }
      term_row[term] = row;
      term_weight[term] = w;
    }
    __syncthreads();
    std::byte* out = static_cast<std::byte*>(job.out) + uint64_t{t} * row_bytes;
    if (!logfmt && job.dtype_bits == 16 && job.terms > 0 && job.terms <= kAhead) {
      // The common top-k (low-latency) and rank counts (high-throughput at
      // EP1) with their own code (kTerms).
      if (kAhead >= 8 && job.terms == 8) {
        reduce_token_bf16<kAhead, (kAhead >= 8 ? 8 : 0)>(job.hidden, 8, term_row, term_weight, out);
      } else if (job.terms == 1) {
        reduce_token_bf16<kAhead, 1>(job.hidden, 1, term_row, term_weight, out);
      } else {
        reduce_token_bf16<kAhead>(job.hidden, job.terms, term_row, term_weight, out);
      }
      __syncthreads();  // term_row is the next token's
      continue;
    }
    for (uint32_t c = threadIdx.x * 8; c < job.hidden; c += blockDim.x * 8) {
      float sum[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      for (uint32_t first = 0; first < job.terms; first += kBatch) {
        float v[kBatch][8];
#pragma unroll
        for (uint32_t b = 0; b < kBatch; ++b) {
          const uint32_t j = first + b;
          const std::byte* row = j < job.terms ? term_row[j] : nullptr;
          for (int i = 0; i < 8; ++i) v[b][i] = 0.0f;
          if (row == nullptr) continue;
          if (logfmt) {
            logfmt_load4(row, job.hidden, c, v[b]);
            logfmt_load4(row, job.hidden, c + 4, v[b] + 4);
          } else if (job.dtype_bits == 16) {
            const uint4 w =
                *reinterpret_cast<const uint4*>(reinterpret_cast<const uint16_t*>(row) + c);
            const uint32_t words[4] = {w.x, w.y, w.z, w.w};
            for (int i = 0; i < 4; ++i) {
              v[b][2 * i] = bf16_to_float(static_cast<uint16_t>(words[i] & 0xFFFFu));
              v[b][2 * i + 1] = bf16_to_float(static_cast<uint16_t>(words[i] >> 16));
            }
          } else {
            load4(row, 32, c, v[b]);
            load4(row, 32, c + 4, v[b] + 4);
          }
        }
#pragma unroll
        for (uint32_t b = 0; b < kBatch; ++b) {
          const float w = first + b < job.terms ? term_weight[first + b] : 0.0f;
          for (int i = 0; i < 8; ++i) sum[i] += w * v[b][i];
        }
      }
      if (job.dtype_bits == 16) {
        uint4 packed;
        packed.x = uint32_t{float_to_bf16(sum[0])} | uint32_t{float_to_bf16(sum[1])} << 16;
        packed.y = uint32_t{float_to_bf16(sum[2])} | uint32_t{float_to_bf16(sum[3])} << 16;
        packed.z = uint32_t{float_to_bf16(sum[4])} | uint32_t{float_to_bf16(sum[5])} << 16;
        packed.w = uint32_t{float_to_bf16(sum[6])} | uint32_t{float_to_bf16(sum[7])} << 16;
        *reinterpret_cast<uint4*>(reinterpret_cast<uint16_t*>(out) + c) = packed;
      } else {
        auto* o = reinterpret_cast<float4*>(reinterpret_cast<float*>(out) + c);
        o[0] = make_float4(sum[0], sum[1], sum[2], sum[3]);
        o[1] = make_float4(sum[4], sum[5], sum[6], sum[7]);
      }
    }
    __syncthreads();  // term_row is the next token's
  }
}

// The flag an EP1 combine raises to itself (reduce_half's `own_flag`).
struct OwnFlag {
  uint64_t* flag = nullptr;  // this rank's flag in its own window
  const uint64_t* epoch_word = nullptr;
  uint64_t epoch = 0;
};

// With wait.flags, every block first waits for the ranks' combine flags and
// the last one finishes the call.
// `after_send`: the send half ran first in this launch (and stamped the
// start); `rank`: then this rank, whose own flag its blocks wait for
// before any other. (That order kept a peer's refusal, seen by an early
// block, out of the status before this rank's last sender read it to
// raise its flags; since the senders' arrivals carry the refusal instead,
// last_block's kFailedArrival, it no longer matters for refusals, and is
// kept until a two-GPU run can time dropping it.)
// `alone`: one rank whose send half would skip its own rows, so has
// nothing to send (and does not run): the reduce reads only x and this
// rank's rows, which the stream ordered before the launch, and its blocks do not
// wait for the flag the last sender still raises (the epochs stay as they
// are; a refusal at one rank is in the status before the launch).
// Alone, the send half did not run (nothing to send; the blocks' meeting
// after it cost the reduce's start 1-2 us): block 0 raises its flag,
// `own_flag`, once it has read the status.
template <uint32_t kAhead>
__device__ __forceinline__ void reduce_half(const courier_gpu_ep_reduce_v1& job, uint64_t* stamps,
                                            bool after_send = false, uint32_t rank = 0,
                                            bool alone = false, OwnFlag own_flag = {}) {
  __shared__ uint32_t failed;
  if (!after_send || alone) stamp(stamps, kStampStart);
  if (after_send && job.wait.flags != nullptr && job.wait.num_ranks > 1) {
    if (threadIdx.x == 0) wait_for(job.wait, rank);
    __syncthreads();
  }
  if (job.wait.flags != nullptr) {
    const bool seen = after_send && job.wait.num_ranks > 1 && threadIdx.x == rank;  // (above)
    if (threadIdx.x < job.wait.num_ranks && !seen && !alone) wait_for(job.wait, threadIdx.x);
  } else if (job.epoch_word != nullptr && blockIdx.x == 0 && threadIdx.x == 0) {
    *job.epoch_word += 1;  // the combine's last job: no block here reads the word
  }
  // (Thread 0 may read the status before another thread's wait fails: the
  // rows are then summed in vain, and the last block tells the failure.)
  if (threadIdx.x == 0) failed = status_of(job.status);
  __syncthreads();
  if (alone && blockIdx.x == 0) {
    if (threadIdx.x == 0) {
      device::store_release(own_flag.flag, epoch_of(own_flag.epoch_word, own_flag.epoch) |
                                               (failed != 0 ? COURIER_GPU_EP_REFUSED_FLAG : 0));
    }
    stamp(stamps, kStampSignalled);
  }
  stamp(stamps, kStampFlagsSeen);
  if (failed == 0) reduce_rows<kAhead>(job);
  stamp(stamps, kStampMoved);
  if (job.wait.flags == nullptr || !last_block(job.done)) return;
  if (threadIdx.x == 0) {  // the call is finished: the blocks read the word before
    if (job.epoch_word != nullptr) *job.epoch_word += 1;
    if (job.wait.status_host != nullptr) {
      *const_cast<volatile uint32_t*>(job.wait.status_host) = status_of(job.status);
    }
  }
  tell_done(job.done_mark, job.status);
  stamp(stamps, kStampFinished);
}

// Low-latency dispatch's two halves are one kernel named `dispatch`, and
// combine's (also high-throughput's) one named `combine`: profilers, the
// field's tests among them, look for one kernel of each name. `dispatch`
// runs the send half, the receive half or (FUSE_RECEIVE, blocks resident
// together) both; `combine` the send half, the reduce half or (the send
// job's `reduce`, minor 17, blocks resident together) both. (The proxy
// path's are ep::proxy::dispatch and ep::proxy::combine.)
// (kSendHalf, kReceiveHalf and kOwnRows: ll_dispatch_spec.hpp.)
// The most threads a block of these kernels has (registers are sized for it).
inline constexpr uint32_t kMaxBlockThreads = 512;
namespace direct {
// `stamps`: NULL, or where each block records the device clock at the
// points it passes (gpu/ep/stamps.hpp; gpu-cuda's COURIER_CUDA_EP_TIMELINE).
// (`received`'s address goes to the send half: COURIER_KERNEL_PARAM.)
template <uint32_t kSpec>
__global__ void __launch_bounds__(kMaxBlockThreads, 1)
    dispatch(COURIER_KERNEL_PARAM courier_gpu_ep_ll_dispatch_v1 send,
             COURIER_KERNEL_PARAM courier_gpu_ep_ll_receive_v1 received, uint32_t halves,
             uint64_t* stamps) {
  stamp(stamps, kStampStart);
  const bool own_rows = (halves & kOwnRows) != 0;
  if ((halves & kSendHalf) != 0) ll_send<kSpec>(send, received, own_rows, stamps);
  if ((halves & kReceiveHalf) != 0) {
    ll_receive_half<kSpec>(received, own_rows, stamps, (halves & kSendHalf) != 0);
  }
}
// kReduceAhead 0: the send half; otherwise the reduce half with that many
// loads in flight per thread (reduce_token_bf16), after the send half when
// `halves` has kSendHalf (kCombineFused). One instance per half, and the
// fused one, so that each has only its own registers.
// The fused instance of the narrow reduce (many tokens: 256-thread blocks)
// keeps three blocks per SM, as the narrow reduce alone does: registers for
// that, rather than for the send half's few rows.
template <uint32_t kReduceAhead, bool kFused>
inline constexpr bool kNarrowFused = kFused&& kReduceAhead < 16;
template <uint32_t kReduceAhead, bool kFused = false>
__global__ void __launch_bounds__((kNarrowFused<kReduceAhead, kFused> ? 256 : kMaxBlockThreads),
                                  (kNarrowFused<kReduceAhead, kFused> ? 3 : 1))
    combine(courier_gpu_ep_combine_send_v1 send, courier_gpu_ep_reduce_v1 reduce,
            uint64_t* stamps) {
  if constexpr (kReduceAhead == 0) {
    combine_send_signal(send, stamps);
  } else {
    const bool alone = kFused && send.skip_self != 0 && send.num_ranks == 1;
    // Alone, the send half has nothing to send: no block runs it or meets
    // the others after it; the reduce's block 0 raises the flag instead.
    // (Its fields by value: a kernel parameter's address passed on puts the
    // whole parameter in every thread's stack on HIP.)
    if (kFused && !alone) combine_send_signal(send, stamps);
    OwnFlag own_flag{};
    if (alone) {
      own_flag = {reinterpret_cast<uint64_t*>(window(send.peers, 0, send.flag_off)),
                  send.epoch_word, send.epoch};
    }
    reduce_half<kReduceAhead>(reduce, stamps, kFused, send.rank, alone, own_flag);
  }
}
}  // namespace direct

}  // namespace courier::device::ep
