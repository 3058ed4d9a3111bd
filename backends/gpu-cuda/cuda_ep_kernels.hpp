// The expert-parallel kernels of gpu/ep/ compiled for NVIDIA GPUs.
#pragma once

#include <cuda_runtime_api.h>

#include "courier/abi/gpu_v1.h"
#include "cuda_ep_timeline.hpp"
#include "gpu/ep/launch_shape.hpp"

namespace courier::cuda_gpu {

// Returns 0 or a negative status with the reason in last_error().
int run_ep_layout(const courier_gpu_ep_layout_v1* job);

// The direct path (GPU ABI minor 2): a stream per device with the kernels
// loaded and the device's launch shape asked once, and one enqueue function
// per entry point; the timeline gives the kernels that record stamps
// (gpu/ep/stamps.hpp) where to put them, `shape` is the job's device's.
using device::ep::LaunchShape;
int make_ep_stream(int device, cudaStream_t* stream, LaunchShape* shape);
int ep_route(const courier_gpu_ep_route_v1* job, cudaStream_t stream, EpTimeline& timeline,
             const LaunchShape& shape);
int ep_signal(const courier_gpu_ep_signal_v1* job, cudaStream_t stream, EpTimeline& timeline,
              const LaunchShape& shape);
int ep_wait(const courier_gpu_ep_wait_v1* job, cudaStream_t stream, EpTimeline& timeline,
            const LaunchShape& shape);
int ep_ht_dispatch(const courier_gpu_ep_ht_dispatch_v1* job, cudaStream_t stream,
                   EpTimeline& timeline, const LaunchShape& shape);
// `general`: the general instance of the dispatch kernel (LlSpec) whatever
// the job (COURIER_CUDA_EP_GENERAL_KERNELS).
int ep_ll_dispatch(const courier_gpu_ep_ll_dispatch_v1* job, cudaStream_t stream,
                   EpTimeline& timeline, const LaunchShape& shape, bool general);
int ep_ll_receive(const courier_gpu_ep_ll_receive_v1* job, cudaStream_t stream,
                  EpTimeline& timeline, const LaunchShape& shape, bool general);
int ep_combine_send(const courier_gpu_ep_combine_send_v1* job, cudaStream_t stream,
                    EpTimeline& timeline, const LaunchShape& shape);
int ep_reduce(const courier_gpu_ep_reduce_v1* job, cudaStream_t stream, EpTimeline& timeline,
              const LaunchShape& shape);
// ep_hold (GPU ABI minor 14): a one-thread kernel that spins for
// `microseconds`, so benchmarks' stamps behind it time the GPU alone.
int ep_hold(uint32_t microseconds, cudaStream_t stream);

// The proxy path (GPU ABI minor 3): one enqueue per job type (instantiated
// for the seven courier_gpu_ep_proxy_*_v1 jobs); `name` labels its kernels
// in the timeline.
template <class Job>
int ep_proxy(const Job* job, cudaStream_t stream, EpTimeline& timeline, const char* name,
             uint32_t* kernels);

}  // namespace courier::cuda_gpu
