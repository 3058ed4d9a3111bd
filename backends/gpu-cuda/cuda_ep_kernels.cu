#include <cuda_runtime.h>

#include <cerrno>
#include <string>

#include "cuda_ep_kernels.hpp"
#include "cuda_status.hpp"
#include "gpu/device_atomics.hpp"
#include "gpu/ep/direct_kernels.hpp"
#include "gpu/ep/direct_launch.hpp"
#include "gpu/ep/layout.hpp"
#include "gpu/ep/proxy_jobs.hpp"
#include "gpu/ep/proxy_launch.hpp"

namespace courier::cuda_gpu {

namespace {

__global__ void layout_kernel(courier_gpu_ep_layout_v1 job) {
  for (uint32_t t = blockIdx.x * blockDim.x + threadIdx.x; t < job.num_tokens;
       t += gridDim.x * blockDim.x) {
    device::layout_token(job, t);
  }
}

// ep_hold's kernel: one thread that spins until `ns` have passed on the
// GPU's clock, holding what is queued behind it on its stream.
__global__ void hold_kernel(uint64_t ns) {
  const uint64_t start = device::now_ns();
  while (device::now_ns() - start < ns) {
  }
}

}  // namespace

int run_ep_layout(const courier_gpu_ep_layout_v1* job) {
  if (job == nullptr || job->struct_size < sizeof *job) {
    return fail(-EINVAL, "run_ep_layout: job is NULL or its struct_size is too small");
  }
  cudaError_t rc = cudaSetDevice(job->device);
  if (rc != cudaSuccess) return fail(rc, "cudaSetDevice(" + std::to_string(job->device) + ")");
  if (job->num_tokens == 0) return 0;
  cudaStream_t stream = nullptr;
  rc = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  if (rc != cudaSuccess) return fail(rc, "cudaStreamCreate");
  const uint32_t threads = 256;
  const uint32_t needed = (job->num_tokens + threads - 1) / threads;
  const uint32_t blocks = needed < 1024 ? needed : 1024;
  layout_kernel<<<blocks, threads, 0, stream>>>(*job);
  rc = cudaGetLastError();
  if (rc == cudaSuccess) rc = cudaStreamSynchronize(stream);
  cudaStreamDestroy(stream);
  return rc == cudaSuccess ? 0 : fail(rc, "running the EP layout kernel");
}

namespace {

// The direct path's kernels are loaded when the EP stream is made, not at
// their first launch: a lazily loaded kernel can wait for a wait_kernel
// that spins for a peer.
cudaError_t load_direct_kernels() {
  cudaFuncAttributes attributes{};
  const void* kernels[] = {
      reinterpret_cast<const void*>(device::ep::route_kernel),
      reinterpret_cast<const void*>(device::ep::signal_kernel),
      reinterpret_cast<const void*>(device::ep::wait_kernel),
      reinterpret_cast<const void*>(device::ep::ht_dispatch_kernel),
      reinterpret_cast<const void*>(device::ep::direct::combine<device::ep::kCombineSend>),
      reinterpret_cast<const void*>(device::ep::direct::combine<device::ep::kWideReduceAhead>),
      reinterpret_cast<const void*>(device::ep::direct::combine<device::ep::kNarrowReduceAhead>),
      reinterpret_cast<const void*>(
          device::ep::direct::combine<device::ep::kWideReduceAhead, true>),
      reinterpret_cast<const void*>(
          device::ep::direct::combine<device::ep::kNarrowReduceAhead, true>),
      reinterpret_cast<const void*>(hold_kernel),
  };
  for (const void* kernel : kernels) {
    const cudaError_t rc = cudaFuncGetAttributes(&attributes, kernel);
    if (rc != cudaSuccess) return rc;
  }
  for (const uint32_t spec : device::ep::kLlSpecs) {
    const auto kernel = reinterpret_cast<const void*>(device::ep::ll_dispatch_kernel(spec));
    const cudaError_t rc = cudaFuncGetAttributes(&attributes, kernel);
    if (rc != cudaSuccess) return rc;
  }
  for (const void* kernel : device::ep::kProxyKernels) {
    const cudaError_t rc = cudaFuncGetAttributes(&attributes, kernel);
    if (rc != cudaSuccess) return rc;
  }
  return cudaSuccess;
}

int launched(const char* what) {
  const cudaError_t rc = cudaGetLastError();
  return rc == cudaSuccess ? 0 : fail(rc, std::string("launching ") + what);
}

// Enough groups of 32 lanes to keep every SM busy with row copies.
constexpr uint32_t kRowThreads = 512;
constexpr uint32_t kRowBlocksMax = 132 * 4;

uint32_t row_blocks(uint64_t rows) {
  const uint64_t groups_per_block = kRowThreads / device::ep::kGroup;
  const uint64_t needed = (rows + groups_per_block - 1) / groups_per_block;
  return static_cast<uint32_t>(needed == 0 ? 1 : needed < kRowBlocksMax ? needed : kRowBlocksMax);
}

// The device's multiprocessors (launch shapes, direct_launch.hpp).
uint32_t multiprocessors(int device) {
  int sms = 0;
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) {
    cudaGetLastError();  // not sticky: the launch shape falls back to one block
    return 1;
  }
  return static_cast<uint32_t>(sms);
}

// How many blocks of `threads` of `kernel` an SM holds at once.
template <class Kernel>
uint32_t resident_per_sm(Kernel kernel, uint32_t threads) {
  int resident = 1;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&resident, kernel, static_cast<int>(threads),
                                                    0) != cudaSuccess) {
    cudaGetLastError();  // not sticky: one block per SM then
    return 1;
  }
  return resident > 0 ? static_cast<uint32_t>(resident) : 1u;
}

}  // namespace

int make_ep_stream(int device, cudaStream_t* stream, LaunchShape* shape) {
  cudaError_t rc = cudaSetDevice(device);
  if (rc != cudaSuccess) return fail(rc, "cudaSetDevice(" + std::to_string(device) + ")");
  rc = load_direct_kernels();
  if (rc != cudaSuccess) return fail(rc, "loading the EP kernels");
  shape->sms = multiprocessors(device);
  shape->reduce_resident =
      resident_per_sm(device::ep::direct::combine<device::ep::kNarrowReduceAhead>,
                      device::ep::kNarrowReduceThreads);
  shape->fused_resident =
      resident_per_sm(device::ep::direct::combine<device::ep::kNarrowReduceAhead, true>,
                      device::ep::kNarrowReduceThreads);
  rc = cudaStreamCreateWithFlags(stream, cudaStreamNonBlocking);
  return rc == cudaSuccess ? 0 : fail(rc, "cudaStreamCreate (EP stream)");
}

int ep_hold(uint32_t microseconds, cudaStream_t stream) {
  hold_kernel<<<1, 1, 0, stream>>>(uint64_t{microseconds} * 1000);
  return launched("the EP hold kernel");
}

int ep_route(const courier_gpu_ep_route_v1* job_in, cudaStream_t stream, EpTimeline& timeline,
             const LaunchShape&) {
  courier_gpu_ep_route_v1 job;
  courier_gpu_ep_signal_v1 signal;
  if (const char* wrong = device::ep::take_route_job(job_in, &job, &signal)) {
    return fail(-EINVAL, wrong);
  }
  const uint32_t blocks = device::ep::route_blocks(job);
  uint64_t* stamps = timeline.stamps(stream, "route", blocks);
  device::ep::route_kernel<<<blocks, 1024, 0, stream>>>(job, signal, stamps);
  return launched("the EP route kernel");
}

int ep_signal(const courier_gpu_ep_signal_v1* job_in, cudaStream_t stream, EpTimeline&,
              const LaunchShape&) {
  courier_gpu_ep_signal_v1 job;
  if (!device::ep::complete_job(job_in, &job)) {
    return fail(-EINVAL, "ep_signal: job is NULL or its struct_size too small");
  }
  const uint32_t blocks = job.num_ranks + (job.wait.flags != nullptr ? 1 : 0);
  device::ep::signal_kernel<<<blocks, 256, 0, stream>>>(job);
  return launched("the EP signal kernel");
}

int ep_wait(const courier_gpu_ep_wait_v1* job_in, cudaStream_t stream, EpTimeline&,
            const LaunchShape&) {
  courier_gpu_ep_wait_v1 job;
  if (!device::ep::complete_job(job_in, &job)) {
    return fail(-EINVAL, "ep_wait: job is NULL or its struct_size too small");
  }
  device::ep::wait_kernel<<<1, COURIER_GPU_EP_MAX_RANKS, 0, stream>>>(job);
  return launched("the EP wait kernel");
}

int ep_ht_dispatch(const courier_gpu_ep_ht_dispatch_v1* job_in, cudaStream_t stream,
                   EpTimeline& timeline, const LaunchShape&) {
  courier_gpu_ep_ht_dispatch_v1 job;
  if (const char* wrong = device::ep::take_ht_dispatch_job(job_in, &job)) {
    return fail(-EINVAL, wrong);
  }
  const uint32_t rows = job.tokens > job.pad_rows ? job.tokens : job.pad_rows;
  const uint32_t blocks = row_blocks(rows);
  uint64_t* stamps = timeline.stamps(stream, "ht_dispatch", blocks);
  device::ep::ht_dispatch_kernel<<<blocks, kRowThreads, 0, stream>>>(job, stamps);
  return launched("the EP high-throughput dispatch kernel");
}

int ep_ll_dispatch(const courier_gpu_ep_ll_dispatch_v1* job_in, cudaStream_t stream,
                   EpTimeline& timeline, const LaunchShape& shape, bool general) {
  courier_gpu_ep_ll_dispatch_v1 job;
  courier_gpu_ep_ll_receive_v1 receive{};
  if (!device::ep::complete_job(job_in, &job)) {
    return fail(-EINVAL, "ep_ll_dispatch: job is NULL or its struct_size too small");
  }
  if ((job.fuse & COURIER_GPU_EP_FUSE_RECEIVE) != 0) {
    if (!device::ep::complete_job(job.receive, &receive)) {
      return fail(-EINVAL,
                  "ep_ll_dispatch: FUSE_RECEIVE without a receive job of enough struct_size");
    }
  }
  const uint32_t halves = device::ep::ll_dispatch_halves(job, receive);
  const uint32_t blocks = device::ep::ll_dispatch_blocks(job, receive, shape.sms);
  uint64_t* stamps = timeline.stamps(stream, "ll_dispatch", blocks);
  const auto kernel = device::ep::ll_dispatch_kernel(
      general ? device::ep::kLlGeneral : device::ep::ll_dispatch_spec(job, receive, halves));
  kernel<<<blocks, device::ep::kLlThreads, 0, stream>>>(job, receive, halves, stamps);
  return launched("the EP low-latency dispatch kernel");
}

int ep_ll_receive(const courier_gpu_ep_ll_receive_v1* job_in, cudaStream_t stream,
                  EpTimeline& timeline, const LaunchShape& shape, bool general) {
  courier_gpu_ep_ll_receive_v1 job;
  if (!device::ep::complete_job(job_in, &job)) {
    return fail(-EINVAL, "ep_ll_receive: job is NULL or its struct_size too small");
  }
  const uint32_t blocks = device::ep::ll_receive_blocks(job, shape.sms);
  uint64_t* stamps = timeline.stamps(stream, "ll_receive", blocks);
  const auto kernel = device::ep::ll_dispatch_kernel(
      general ? device::ep::kLlGeneral
              : device::ep::ll_dispatch_spec({}, job, device::ep::kReceiveHalf));
  kernel<<<blocks, device::ep::kLlThreads, 0, stream>>>({}, job, device::ep::kReceiveHalf, stamps);
  return launched("the EP low-latency receive kernel");
}

int ep_combine_send(const courier_gpu_ep_combine_send_v1* job_in, cudaStream_t stream,
                    EpTimeline& timeline, const LaunchShape& shape) {
  courier_gpu_ep_combine_send_v1 job;
  if (!device::ep::complete_job(job_in, &job)) {
    return fail(-EINVAL, "ep_combine_send: job is NULL or its struct_size too small");
  }
  const uint64_t rows = device::ep::combine_send_rows(job);
  const uint32_t sms = shape.sms;
  if (job.reduce != nullptr) {  // send and reduce in one launch (GPU ABI 1.17)
    courier_gpu_ep_reduce_v1 reduce;
    if (const char* wrong = device::ep::take_fused_reduce(job, &reduce)) {
      return fail(-EINVAL, wrong);
    }
    const uint32_t threads = device::ep::reduce_threads(reduce, sms);
    const bool wide = device::ep::wide_reduce(threads);
    const uint32_t blocks = device::ep::combine_fused_blocks(job, reduce, row_blocks(rows), sms,
                                                             wide ? 1 : shape.fused_resident);
    uint64_t* stamps = timeline.stamps(stream, "combine", blocks);
    if (wide) {
      device::ep::direct::combine<device::ep::kWideReduceAhead, true>
          <<<blocks, threads, 0, stream>>>(job, reduce, stamps);
    } else {
      device::ep::direct::combine<device::ep::kNarrowReduceAhead, true>
          <<<blocks, threads, 0, stream>>>(job, reduce, stamps);
    }
    return launched("the EP combine kernel (send and reduce)");
  }
  const uint32_t blocks = device::ep::combine_send_blocks(job, row_blocks(rows), sms);
  uint64_t* stamps = timeline.stamps(stream, "combine_send", blocks);
  device::ep::direct::combine<device::ep::kCombineSend>
      <<<blocks, kRowThreads, 0, stream>>>(job, {}, stamps);
  return launched("the EP combine send kernel");
}

int ep_reduce(const courier_gpu_ep_reduce_v1* job_in, cudaStream_t stream, EpTimeline& timeline,
              const LaunchShape& shape) {
  courier_gpu_ep_reduce_v1 full;
  if (!device::ep::complete_job(job_in, &full)) {
    return fail(-EINVAL, "ep_reduce: job is NULL or its struct_size too small");
  }
  const courier_gpu_ep_reduce_v1* job = &full;
  const uint32_t threads = device::ep::reduce_threads(*job, shape.sms);
  const uint32_t blocks =
      device::ep::reduce_blocks(*job, threads, shape.sms, shape.reduce_resident);
  uint64_t* stamps = timeline.stamps(stream, "reduce", blocks);
  if (device::ep::wide_reduce(threads)) {
    device::ep::direct::combine<device::ep::kWideReduceAhead>
        <<<blocks, threads, 0, stream>>>({}, *job, stamps);
  } else {
    device::ep::direct::combine<device::ep::kNarrowReduceAhead>
        <<<blocks, threads, 0, stream>>>({}, *job, stamps);
  }
  return launched("the EP reduce kernel");
}

template <class Job>
int ep_proxy(const Job* job, cudaStream_t stream, EpTimeline& timeline, const char* name,
             uint32_t* kernels) {
  Job full;
  if (!device::ep::complete_job(job, &full)) {
    return fail(-EINVAL, "ep_proxy_*: job is NULL or its struct_size too small");
  }
  timeline.begin(stream);
  *kernels = device::ep::launch(full, stream, [&](const char* part) {
    if (timeline.on()) timeline.mark(stream, std::string(name) + "." + part);
  });
  timeline.mark(stream, name);
  return launched("an EP proxy kernel");
}

#define COURIER_EP_PROXY_JOB(Job) \
  template int ep_proxy(const Job*, cudaStream_t, EpTimeline&, const char*, uint32_t*);
COURIER_EP_PROXY_JOB(courier_gpu_ep_proxy_refuse_v1)
COURIER_EP_PROXY_JOB(courier_gpu_ep_proxy_ht_dispatch_v1)
COURIER_EP_PROXY_JOB(courier_gpu_ep_proxy_ht_receive_v1)
COURIER_EP_PROXY_JOB(courier_gpu_ep_proxy_ll_dispatch_v1)
COURIER_EP_PROXY_JOB(courier_gpu_ep_proxy_ll_receive_v1)
COURIER_EP_PROXY_JOB(courier_gpu_ep_proxy_combine_v1)
COURIER_EP_PROXY_JOB(courier_gpu_ep_proxy_reduce_v1)
#undef COURIER_EP_PROXY_JOB

}  // namespace courier::cuda_gpu
