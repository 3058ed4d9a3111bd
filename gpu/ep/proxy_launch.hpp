// The EP proxy kernels as __global__ functions, and their launch shapes,
// for the device compilers (nvcc for gpu-cuda, hipcc for gpu-hip): each
// backend calls launch(job, stream) and checks its runtime's error.
#pragma once

#include "gpu/ep/proxy_kernels.hpp"

namespace courier::device::ep {

// Threads per block of the kernels that copy rows (a lane group per row).
inline constexpr uint32_t kProxyThreads = 256;
// High-throughput dispatch: a block per SM packs 31 rows of 4096 tokens;
// 512 threads took its kernel from 122 to 101 us on an H200 (the receive
// and reduce kernels, with more blocks, were slower at 512).
inline constexpr uint32_t kHtDispatchThreads = 512;
// High-throughput rows: a block finds the runs of this many tokens (a
// WRITE each per destination): 4096 tokens to one rank go as 8.
inline constexpr uint32_t kHtRunTokens = kHtDispatchThreads;
// Enough blocks to keep an H100/H200-class GPU's 132 SMs busy.
inline constexpr uint32_t kProxyBlocksMax = 132;
// The reduce: at most four blocks per SM, a warp per token beyond (at 4096
// blocks, one per token, the blocks' own start and end cost more).
inline constexpr uint32_t kReduceBlocksMax = 4 * kProxyBlocksMax;

__global__ void proxy_refuse_kernel(COURIER_KERNEL_PARAM courier_gpu_ep_proxy_refuse_v1 job) {
  refuse_body(job, this_thread());
}
__global__ void proxy_ht_pack_kernel(COURIER_KERNEL_PARAM courier_gpu_ep_proxy_ht_dispatch_v1 job) {
  __shared__ ProxyShared shared;
  ht_pack_body(job, this_thread(), &shared, true);
}
__global__ void proxy_ht_rows_kernel(COURIER_KERNEL_PARAM courier_gpu_ep_proxy_ht_dispatch_v1 job) {
  __shared__ ProxyShared shared;
  ht_rows_body(job, this_thread(), &shared, kHtRunTokens, true);
}
// One block waits for the phase's signals; the kernel after it on the
// stream does the work (see wait_all).
// `epoch` (GPU ABI 1.10): not NULL, the target comes from it (target_of,
// `ahead` calls ahead).
__global__ void proxy_wait_kernel(courier_gpu_ep_proxy_v1 fifo, uint64_t signal_off,
                                  uint64_t record_off, uint64_t target, bool sends,
                                  int64_t* wait_cost, const uint64_t* epoch, uint32_t ahead) {
  wait_all(this_thread(), fifo, signal_off, record_off, target_of(epoch, target, ahead), sends,
           wait_cost);
}
__global__ void proxy_send_wait_kernel(courier_gpu_ep_proxy_v1 fifo, bool release,
                                       uint64_t release_off, uint64_t release_target,
                                       const uint64_t* epoch) {
  send_wait(this_thread(), fifo, release, release_off, target_of(epoch, release_target));
}
__global__ void proxy_ht_receive_kernel(
    COURIER_KERNEL_PARAM courier_gpu_ep_proxy_ht_receive_v1 job) {
  __shared__ ProxyShared shared;
  ht_receive_body(job, this_thread(), &shared, true);
}
// Low-latency dispatch's two halves are one kernel named `dispatch`, and
// combine's (also high-throughput's) one named `combine`, a half per launch
// (`receive` says which): profilers, the field's tests among them, look for
// one kernel of each name, launched once per half (the wait kernels apart).
namespace proxy {
__global__ void dispatch(COURIER_KERNEL_PARAM courier_gpu_ep_proxy_ll_dispatch_v1 send,
                         COURIER_KERNEL_PARAM courier_gpu_ep_proxy_ll_receive_v1 received,
                         bool receive) {
  __shared__ ProxyShared shared;
  if (receive) {
    ll_receive_body(received, this_thread(), &shared, true);
  } else {
    ll_dispatch_body(send, this_thread(), &shared, true);
  }
}
__global__ void combine(COURIER_KERNEL_PARAM courier_gpu_ep_proxy_combine_v1 send,
                        COURIER_KERNEL_PARAM courier_gpu_ep_proxy_reduce_v1 reduce, bool receive) {
  __shared__ ProxyShared shared;
  if (receive) {
    reduce_body(reduce, this_thread(), &shared, true);
  } else {
    combine_body(send, this_thread(), &shared, true);
  }
}
}  // namespace proxy

// Called between a job's kernels with the name of the one just launched
// (gpu-cuda's timeline records an event there); by default nothing.
struct NoMark {
  void operator()(const char*) const {}
};

inline uint32_t blocks_for(uint64_t items, uint32_t most) {
  return items == 0 ? 1 : items < most ? static_cast<uint32_t>(items) : most;
}

// Every kernel, for loading them before the first launch (a lazily loaded
// kernel could wait behind one that spins for a peer).
inline const void* const kProxyKernels[] = {
    reinterpret_cast<const void*>(proxy_refuse_kernel),
    reinterpret_cast<const void*>(proxy_ht_pack_kernel),
    reinterpret_cast<const void*>(proxy_ht_rows_kernel),
    reinterpret_cast<const void*>(proxy_wait_kernel),
    reinterpret_cast<const void*>(proxy_send_wait_kernel),
    reinterpret_cast<const void*>(proxy_ht_receive_kernel),
    reinterpret_cast<const void*>(proxy::dispatch),
    reinterpret_cast<const void*>(proxy::combine),
};

// Each launch returns the number of kernels it queued (ep_counters).
template <class Stream, class Mark = NoMark>
uint32_t launch(const courier_gpu_ep_proxy_refuse_v1& job, Stream stream, Mark = {}) {
  proxy_refuse_kernel<<<1, 64, 0, stream>>>(job);
  return 1;
}
template <class Stream, class Mark = NoMark>
uint32_t launch(const courier_gpu_ep_proxy_ht_dispatch_v1& job, Stream stream, Mark mark = {}) {
  if (job.sends_settled == 0) {
    proxy_send_wait_kernel<<<1, 64, 0, stream>>>(job.fifo, false, 0, 0, nullptr);
    mark("send_wait");
  }
  // Blocks of at least 16 tokens: each block's records of where it starts
  // cost a pass over the tokens before it.
  proxy_ht_pack_kernel<<<blocks_for((job.tokens + 15) / 16, kProxyBlocksMax), kHtDispatchThreads, 0,
                         stream>>>(job);
  mark("pack");
  proxy_wait_kernel<<<1, 64, 0, stream>>>(job.fifo, job.notify_signal_off, job.notify_record_off,
                                          job.notify_target, false, nullptr, job.epoch, 1);
  mark("wait_counts");
  // Enough blocks to find the runs, and all SMs for the rows this rank
  // keeps (none with loopback: each block costs the last one's wait).
  const uint32_t run_blocks = (job.tokens + kHtRunTokens - 1) / kHtRunTokens;
  const uint32_t blocks = run_blocks > kProxyBlocksMax || job.fifo.loopback != 0
                              ? (run_blocks > 0 ? run_blocks : 1)
                              : kProxyBlocksMax;
  proxy_ht_rows_kernel<<<blocks, kHtDispatchThreads, 0, stream>>>(job);
  return job.sends_settled == 0 ? 4 : 3;
}
// `sends`: the wait also covers this rank's own WRITEs (they read the
// caller's memory: wait_all).
// `wait_cost` and `epoch`: the job's, where it has them (GPU ABI 1.9, 1.10).
template <class Job, class Stream>
void wait_first(const Job& job, Stream stream, bool sends = false, int64_t* wait_cost = nullptr,
                const uint64_t* epoch = nullptr) {
  proxy_wait_kernel<<<1, 64, 0, stream>>>(job.fifo, job.signal_off, job.record_off, job.target,
                                          sends, wait_cost, epoch, 0);
}
template <class Stream, class Mark = NoMark>
uint32_t launch(const courier_gpu_ep_proxy_ht_receive_v1& job, Stream stream, Mark mark = {}) {
  wait_first(job, stream, job.wait_sends != 0, nullptr, job.epoch);
  mark("wait");
  proxy_ht_receive_kernel<<<2 * kProxyBlocksMax, kProxyThreads, 0, stream>>>(job);
  return 2;
}
template <class Stream, class Mark = NoMark>
uint32_t launch(const courier_gpu_ep_proxy_ll_dispatch_v1& job, Stream stream, Mark mark = {}) {
  proxy_send_wait_kernel<<<1, 64, 0, stream>>>(job.fifo, true, job.release_off, job.release_target,
                                               job.epoch);
  mark("send_wait");
  proxy::dispatch<<<blocks_for(job.tokens, kProxyBlocksMax), kProxyThreads, 0, stream>>>(
      job, courier_gpu_ep_proxy_ll_receive_v1{}, false);
  return 2;
}
template <class Stream, class Mark = NoMark>
uint32_t launch(const courier_gpu_ep_proxy_ll_receive_v1& job, Stream stream, Mark mark = {}) {
  wait_first(job, stream, false, job.wait_cost, job.epoch);
  mark("wait");
  proxy::dispatch<<<blocks_for(job.local_experts, 4 * kProxyBlocksMax), kProxyThreads, 0, stream>>>(
      courier_gpu_ep_proxy_ll_dispatch_v1{}, job, true);
  return 2;
}
template <class Stream, class Mark = NoMark>
uint32_t launch(const courier_gpu_ep_proxy_combine_v1& job, Stream stream, Mark mark = {}) {
  if (job.sends_settled == 0) {
    proxy_send_wait_kernel<<<1, 64, 0, stream>>>(job.fifo, false, 0, 0, nullptr);
    mark("send_wait");
  }
  // x read in place with loopback: no block moves a row, one pushes.
  const bool nothing_moves =
      (job.mode & (COURIER_GPU_EP_COMBINE_FROM_WINDOW | COURIER_GPU_EP_COMBINE_LOGFMT)) ==
          COURIER_GPU_EP_COMBINE_FROM_WINDOW &&
      job.fifo.loopback != 0;
  const uint32_t blocks = (job.mode & COURIER_GPU_EP_ROUTE_MASK) == COURIER_GPU_EP_ROUTE_EXPERTS
                              ? blocks_for(job.local_experts, 2 * kProxyBlocksMax)
                          : nothing_moves ? 1
                                          : kProxyBlocksMax;
  proxy::combine<<<blocks, kProxyThreads, 0, stream>>>(job, courier_gpu_ep_proxy_reduce_v1{},
                                                       false);
  return job.sends_settled == 0 ? 2 : 1;
}
template <class Stream, class Mark = NoMark>
uint32_t launch(const courier_gpu_ep_proxy_reduce_v1& job, Stream stream, Mark mark = {}) {
  wait_first(job, stream, job.wait_sends != 0, job.wait_cost, job.epoch);
  mark("wait");
  proxy::combine<<<blocks_for(job.tokens, kReduceBlocksMax), kProxyThreads, 0, stream>>>(
      courier_gpu_ep_proxy_combine_v1{}, job, true);
  return 2;
}

}  // namespace courier::device::ep
