// The expert-parallel kernels of gpu/ep/ on CPU threads (gpu-host).
#pragma once

#include <atomic>
#include <string>

#include "courier/abi/gpu_v1.h"
#include "host_ep_timeline.hpp"

namespace courier::host_gpu {

// How many CPU threads run a proxy kernel: at most `blocks` blocks (fewer
// where a kernel has less work) of `threads` each (COURIER_HOST_EP_BLOCKS,
// COURIER_HOST_EP_THREADS). One thread in all runs on the calling thread.
// Each kernel's times go to `timeline` (COURIER_HOST_EP_TIMELINE) when on.
struct EpOptions {
  uint32_t blocks = 1;
  uint32_t threads = 1;
  EpTimeline* timeline = nullptr;
  std::atomic<uint64_t>* launches = nullptr;  // counted per kernel run (ep_counters), if set
};

// Each returns 0 or -errno with *error set, once the kernel finished (the
// host's "EP stream" is the calling thread).
int run_ep_layout(const courier_gpu_ep_layout_v1* job, std::string* error);
int ep_proxy_refuse(const courier_gpu_ep_proxy_refuse_v1* job, const EpOptions& shape,
                    std::string* error);
int ep_proxy_ht_dispatch(const courier_gpu_ep_proxy_ht_dispatch_v1* job, const EpOptions& shape,
                         std::string* error);
int ep_proxy_ht_receive(const courier_gpu_ep_proxy_ht_receive_v1* job, const EpOptions& shape,
                        std::string* error);
int ep_proxy_ll_dispatch(const courier_gpu_ep_proxy_ll_dispatch_v1* job, const EpOptions& shape,
                         std::string* error);
int ep_proxy_ll_receive(const courier_gpu_ep_proxy_ll_receive_v1* job, const EpOptions& shape,
                        std::string* error);
int ep_proxy_combine(const courier_gpu_ep_proxy_combine_v1* job, const EpOptions& shape,
                     std::string* error);
int ep_proxy_reduce(const courier_gpu_ep_proxy_reduce_v1* job, const EpOptions& shape,
                    std::string* error);

}  // namespace courier::host_gpu
