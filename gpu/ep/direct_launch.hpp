// Launch shapes of the EP direct path's kernels (direct_kernels.hpp), for
// the device compilers' backends (gpu-cuda, gpu-hip): each asks its
// runtime for the multiprocessor count and launches what these say.
#pragma once

#include <algorithm>
#include <cstdint>

#include "courier/abi/gpu_v1.h"
#include "gpu/ep/direct_kernels.hpp"
#include "gpu/ep/ll_dispatch_spec.hpp"
#include "gpu/ep/proxy_jobs.hpp"

namespace courier::device::ep {

// ep_route: a block per group (rank or expert), and in RANKS mode with
// topk_idx one per kRouteExperts experts for their counts (with `signal`:
// one per kRouteSliceTokens tokens).
inline uint32_t route_blocks(const courier_gpu_ep_route_v1& job) {
  const bool by_rank = job.mode == COURIER_GPU_EP_ROUTE_RANKS;
  const bool sliced = job.signal != nullptr;  // route_expert_slice
  const uint32_t counters =
      !by_rank || job.topk_idx == nullptr || job.num_experts == 0 ? 0
      : sliced ? std::max((job.tokens + kRouteSliceTokens - 1) / kRouteSliceTokens, 1u)
               : (job.num_experts + kRouteExperts - 1) / kRouteExperts;
  return std::max((by_rank ? job.num_ranks : job.num_experts) + counters, 1u);
}

// The high-throughput jobs as their kernels take them (complete_job: the
// fields of newer minors zero), and, fused (GPU ABI 1.16), checked for what
// the kernels dereference: nullptr when they can run, else why not (the
// backend refuses the job instead of faulting on the device).
inline const char* take_route_job(const courier_gpu_ep_route_v1* in, courier_gpu_ep_route_v1* job,
                                  courier_gpu_ep_signal_v1* signal) {
  *signal = {};
  if (!complete_job(in, job)) return "ep_route: job is NULL or its struct_size too small";
  if (job->signal == nullptr) return nullptr;
  if (!complete_job(job->signal, signal))
    return "ep_route: a signal job of too small a struct_size";
  if (job->mode != COURIER_GPU_EP_ROUTE_RANKS) return "ep_route: a signal needs RANKS mode";
  if (job->num_ranks == 0 || job->num_ranks > COURIER_GPU_EP_MAX_RANKS ||
      signal->num_ranks != job->num_ranks || signal->wait.num_ranks != job->num_ranks) {
    return "ep_route: the signal's ranks differ from the job's (or are not 1..64)";
  }
  if (signal->wait.flags == nullptr || job->done == nullptr || job->records == nullptr ||
      job->host_counts == nullptr || job->host_mark == nullptr) {
    return "ep_route: a signal needs wait.flags, done, records, host_counts and host_mark";
  }
  // The launch's arrivals count its blocks below last_block's
  // kFailedArrival (2^16): 16M tokens and more would need more.
  if (route_blocks(*job) >= kFailedArrival) {
    return "ep_route: with a signal, tokens must be at most (65535 - num_ranks) * 256";
  }
  return nullptr;
}
inline const char* take_ht_dispatch_job(const courier_gpu_ep_ht_dispatch_v1* in,
                                        courier_gpu_ep_ht_dispatch_v1* job) {
  if (!complete_job(in, job)) return "ep_ht_dispatch: job is NULL or its struct_size too small";
  if (job->done == nullptr) return nullptr;
  if (job->num_ranks == 0 || job->num_ranks > COURIER_GPU_EP_MAX_RANKS ||
      job->wait.num_ranks != job->num_ranks || job->wait.flags == nullptr) {
    return "ep_ht_dispatch: done needs wait.flags for the job's ranks (1..64)";
  }
  return nullptr;
}

// Threads of a low-latency dispatch block: a token's 7168 FP8 channels at
// 16 per thread in one pass; the receive's 16 groups of 32 lanes.
inline constexpr uint32_t kLlThreads = 512;
static_assert(kLlThreads <= kMaxBlockThreads, "the kernels' launch bounds");

// The blocks the receive half can use: with its rows shared out evenly
// (kBalancedPairs), one per SM; otherwise one per local expert.
inline uint32_t ll_receive_want(const courier_gpu_ep_ll_receive_v1& job, uint32_t sms) {
  const uint64_t pairs = uint64_t{job.local_experts} * job.num_ranks;
  return std::max(pairs <= kBalancedPairs ? sms : job.local_experts, 1u);
}

// A block per token at a time; with FUSE_RECEIVE also the receive's
// blocks (ll_receive_want), and no more blocks than the multiprocessors (`sms`),
// so that every block is resident while blocks wait for the last one's
// signal (one 512-thread block fits any SM).
inline uint32_t ll_dispatch_blocks(const courier_gpu_ep_ll_dispatch_v1& send,
                                   const courier_gpu_ep_ll_receive_v1& receive, uint32_t sms) {
  const bool fused = (send.fuse & COURIER_GPU_EP_FUSE_RECEIVE) != 0;
  const uint32_t want = std::max({send.tokens, fused ? ll_receive_want(receive, sms) : 0u, 1u});
  return std::min(want, std::max(sms, 1u) * (fused ? 1u : 2u));
}

// The dispatch kernel's instance for `spec` (ll_dispatch_spec.hpp).
using LlDispatchKernel = void (*)(courier_gpu_ep_ll_dispatch_v1, courier_gpu_ep_ll_receive_v1,
                                  uint32_t, uint64_t*);
inline LlDispatchKernel ll_dispatch_kernel(uint32_t spec) {
  switch (spec) {
    case kLlFp8:
      return direct::dispatch<kLlFp8>;
    case kLlFp8 | kLlOwnRows:
      return direct::dispatch<kLlFp8 | kLlOwnRows>;
    case kLlVectors:
      return direct::dispatch<kLlVectors>;
    case kLlVectors | kLlOwnRows:
      return direct::dispatch<kLlVectors | kLlOwnRows>;
    default:
      return direct::dispatch<kLlGeneral>;
  }
}
inline constexpr uint32_t kLlSpecs[] = {kLlGeneral, kLlFp8, kLlFp8 | kLlOwnRows, kLlVectors,
                                        kLlVectors | kLlOwnRows};

// The receive launched alone (a receive hook's launch).
inline uint32_t ll_receive_blocks(const courier_gpu_ep_ll_receive_v1& job, uint32_t sms) {
  return std::min(ll_receive_want(job, sms), std::max(sms, 1u) * 4u);
}

// The rows the combine's send stores, which size its launch: by rank,
// those of x (with records, minor 16: those that leave x); by expert,
// every expert's slots.
inline uint64_t combine_send_rows(const courier_gpu_ep_combine_send_v1& job) {
  if ((job.mode & COURIER_GPU_EP_ROUTE_MASK) != COURIER_GPU_EP_ROUTE_RANKS) {
    return uint64_t{job.local_experts} * job.rows_per_expert;
  }
  return job.records != nullptr ? job.moved_rows : job.rows;
}

// The combine's send: by rank, `row_blocks` (a group of lanes per row);
// by expert, a block per local expert at a time and no more blocks than
// the multiprocessors (one wave: blocks beyond it would start only when
// the first ones end).
inline uint32_t combine_send_blocks(const courier_gpu_ep_combine_send_v1& job, uint32_t row_blocks,
                                    uint32_t sms) {
  if ((job.mode & COURIER_GPU_EP_ROUTE_MASK) == COURIER_GPU_EP_ROUTE_RANKS) return row_blocks;
  return std::min(std::max(job.local_experts, 1u), std::max(sms, 1u));
}

// The reduce: a block per token at a time, 8 channels per thread. Few
// tokens (low-latency): wide blocks, one per SM; many (high-throughput):
// narrower ones, several resident per SM (a thread keeps 32 values in
// registers).
inline constexpr uint32_t kNarrowReduceThreads = 256;
inline uint32_t reduce_threads(const courier_gpu_ep_reduce_v1& job, uint32_t sms) {
  return job.tokens <= 2 * std::max(sms, 1u) ? kLlThreads : kNarrowReduceThreads;
}

// The reduce's blocks: a block per token (few tokens), or, with many, as
// many as stay resident together (`resident_per_sm` of the narrow instance,
// from the runtime's occupancy query), each then summing token after
// token: a block that ends and a new one that starts pay the flags' wait,
// the status and the block counter again, per token.
inline uint32_t reduce_blocks(const courier_gpu_ep_reduce_v1& job, uint32_t threads, uint32_t sms,
                              uint32_t resident_per_sm) {
  const uint32_t tokens = std::max(job.tokens, 1u);
  if (threads == kLlThreads) return std::min(tokens, 4096u);
  return std::min(tokens, std::max(sms, 1u) * std::max(resident_per_sm, 1u));
}

// The reduce's loads in flight per thread, which its registers follow (the
// `combine` kernel's instance): wide blocks take a low-latency token's 8
// terms of two pieces in one memory round trip; narrow ones keep three
// blocks per SM.
inline constexpr uint32_t kWideReduceAhead = 16, kNarrowReduceAhead = 4;
inline constexpr uint32_t kCombineSend = 0;  // the combine kernel's send instance
inline bool wide_reduce(uint32_t threads) { return threads == kLlThreads; }

// A combine in one launch (the send job's `reduce`, GPU ABI 1.17): the
// reduce job as the kernel takes it, or why it cannot (the backend refuses
// the job instead of faulting or hanging on the device).
inline const char* take_fused_reduce(const courier_gpu_ep_combine_send_v1& send,
                                     courier_gpu_ep_reduce_v1* reduce) {
  if (!complete_job(send.reduce, reduce))
    return "ep_combine_send: a reduce job of too small a struct_size";
  if (send.done == nullptr || reduce->done == nullptr || reduce->wait.flags == nullptr) {
    return "ep_combine_send: a fused reduce needs the send's done and the reduce's done and "
           "wait.flags";
  }
  if (reduce->device != send.device) return "ep_combine_send: the reduce is for another device";
  return nullptr;
}

// Its blocks, of reduce_threads (the wide or the narrow reduce's fused
// instance): every block waits for the flags the last sender raises, so no
// more than stay resident together (`resident_per_sm` of that instance,
// from the runtime's occupancy query; one for the wide one); the send's
// blocks take their rows or experts, the reduce's loop over the tokens.
inline uint32_t combine_fused_blocks(const courier_gpu_ep_combine_send_v1& send,
                                     const courier_gpu_ep_reduce_v1& reduce, uint32_t row_blocks,
                                     uint32_t sms, uint32_t resident_per_sm) {
  const uint32_t want = std::max({combine_send_blocks(send, row_blocks, sms), reduce.tokens, 1u});
  return std::min(want, std::max(sms, 1u) * std::max(resident_per_sm, 1u));
}

}  // namespace courier::device::ep
