#include "host_ep_kernels.hpp"

#include <algorithm>
#include <cerrno>
#include <string_view>
#include <vector>

#include "gpu/ep/layout.hpp"
#include "gpu/ep/proxy_jobs.hpp"
#include "gpu/ep/proxy_kernels.hpp"
#include "host_kernel_launch.hpp"

namespace courier::host_gpu {

namespace {

void layout_kernel(const courier_host_thread_v1* thread, void* arg) {
  const auto& job = *static_cast<const courier_gpu_ep_layout_v1*>(arg);
  for (uint32_t t = thread->block_idx; t < job.num_tokens; t += thread->grid_dim) {
    device::layout_token(job, t);
  }
}

using device::ep::KernelThread;
using device::ep::ProxyShared;

// Tokens a high-throughput send block packs before it pushes them.
constexpr uint32_t kHtBatch = 64;

struct ProxyLaunch {
  const void* job;
  ProxyShared* shared;  // one per block
  void (*body)(const void* job, const KernelThread& thread, ProxyShared* shared);
  uint64_t* waited_ns;  // one per block (thread 0's waits), or null: no timeline
};

void proxy_kernel(const courier_host_thread_v1* thread, void* arg) {
  const auto& launch = *static_cast<const ProxyLaunch*>(arg);
  KernelThread th;
  th.block = thread->block_idx;
  th.thread = thread->thread_idx;
  th.block_dim = thread->block_dim;
  th.grid_dim = thread->grid_dim;
  th.host = thread;
  if (launch.waited_ns != nullptr && thread->thread_idx == 0) {
    th.waited_ns = launch.waited_ns + thread->block_idx;
  }
  launch.body(launch.job, th, launch.shared + thread->block_idx);
}

template <class Job>
int run_proxy(const Job* job, const char* name, const EpOptions& options, uint32_t blocks,
              void (*body)(const void*, const KernelThread&, ProxyShared*), std::string* error) {
  Job full;
  if (!device::ep::complete_job(job, &full)) {
    *error = std::string(name) + ": job is NULL or its struct_size is too small";
    return -EINVAL;
  }
  const bool timed = options.timeline != nullptr && options.timeline->on();
  std::vector<ProxyShared> shared(blocks);
  std::vector<uint64_t> waited(timed ? blocks : 0, 0);
  ProxyLaunch arg{&full, shared.data(), body, timed ? waited.data() : nullptr};
  courier_host_kernel_launch_v1 launch{};
  launch.struct_size = sizeof launch;
  launch.grid_dim = blocks;
  launch.block_dim = options.threads;
  launch.fn = proxy_kernel;
  launch.arg = &arg;
  const uint64_t start = timed ? device::now_ns() : 0;
  const int rc = launch_host_kernel(launch, error);
  if (rc == 0 && options.launches != nullptr) {
    options.launches->fetch_add(1, std::memory_order_relaxed);
  }
  if (timed) {  // the name without its "ep_proxy_"
    constexpr std::string_view kPrefix = "ep_proxy_";
    std::string_view label(name);
    if (label.starts_with(kPrefix)) label.remove_prefix(kPrefix.size());
    options.timeline->record(std::string(label), device::now_ns() - start,
                             *std::max_element(waited.begin(), waited.end()));
  }
  return rc;
}

template <class Job>
const Job& job_of(const void* job) {
  return *static_cast<const Job*>(job);
}

uint32_t blocks_for(uint32_t items, uint32_t most) {
  return items == 0 ? 1 : items < most ? items : most;
}

}  // namespace

int ep_proxy_refuse(const courier_gpu_ep_proxy_refuse_v1* job, const EpOptions& options,
                    std::string* error) {
  return run_proxy(
      job, "ep_proxy_refuse", options, 1,
      [](const void* j, const KernelThread& th, ProxyShared*) {
        device::ep::refuse_body(job_of<courier_gpu_ep_proxy_refuse_v1>(j), th);
      },
      error);
}

int ep_proxy_ht_dispatch(const courier_gpu_ep_proxy_ht_dispatch_v1* job, const EpOptions& options,
                         std::string* error) {
  // One launch: blocks pack kHtBatch tokens at a time and push them as soon
  // as every rank's counts are in, so the proxies move rows meanwhile.
  return run_proxy(
      job, "ep_proxy_ht_dispatch", options,
      job != nullptr ? blocks_for(job->tokens / kHtBatch, options.blocks) : 1,
      [](const void* j, const KernelThread& th, ProxyShared* sh) {
        device::ep::ht_dispatch_host_body(job_of<courier_gpu_ep_proxy_ht_dispatch_v1>(j), th, sh,
                                          kHtBatch);
      },
      error);
}

int ep_proxy_ht_receive(const courier_gpu_ep_proxy_ht_receive_v1* job, const EpOptions& options,
                        std::string* error) {
  return run_proxy(
      job, "ep_proxy_ht_receive", options, options.blocks,
      [](const void* j, const KernelThread& th, ProxyShared* sh) {
        device::ep::ht_receive_body(job_of<courier_gpu_ep_proxy_ht_receive_v1>(j), th, sh, false);
      },
      error);
}

int ep_proxy_ll_dispatch(const courier_gpu_ep_proxy_ll_dispatch_v1* job, const EpOptions& options,
                         std::string* error) {
  return run_proxy(
      job, "ep_proxy_ll_dispatch", options,
      job != nullptr ? blocks_for(job->tokens / 16, options.blocks) : 1,
      [](const void* j, const KernelThread& th, ProxyShared* sh) {
        device::ep::ll_dispatch_body(job_of<courier_gpu_ep_proxy_ll_dispatch_v1>(j), th, sh, false);
      },
      error);
}

int ep_proxy_ll_receive(const courier_gpu_ep_proxy_ll_receive_v1* job, const EpOptions& options,
                        std::string* error) {
  return run_proxy(
      job, "ep_proxy_ll_receive", options,
      job != nullptr ? blocks_for(job->local_experts, options.blocks) : 1,
      [](const void* j, const KernelThread& th, ProxyShared* sh) {
        device::ep::ll_receive_body(job_of<courier_gpu_ep_proxy_ll_receive_v1>(j), th, sh, false);
      },
      error);
}

int ep_proxy_combine(const courier_gpu_ep_proxy_combine_v1* job, const EpOptions& options,
                     std::string* error) {
  return run_proxy(
      job, "ep_proxy_combine", options, options.blocks,
      [](const void* j, const KernelThread& th, ProxyShared* sh) {
        device::ep::combine_body(job_of<courier_gpu_ep_proxy_combine_v1>(j), th, sh, false);
      },
      error);
}

// The sum is most of what a CPU rank's combine costs: on x86-64 it is also
// built for AVX2 (the loader picks the clone the CPU runs), eight floats per
// instruction instead of SSE2's four. No FMA: every clone rounds alike. Not
// under ThreadSanitizer, whose instrumented clone resolver crashes dlopen.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__SANITIZE_THREAD__)
__attribute__((target_clones("avx2", "default"), flatten))
#endif
void reduce_block(const void* job, const KernelThread& th, ProxyShared* sh) {
  device::ep::reduce_body(job_of<courier_gpu_ep_proxy_reduce_v1>(job), th, sh, false);
}

int ep_proxy_reduce(const courier_gpu_ep_proxy_reduce_v1* job, const EpOptions& options,
                    std::string* error) {
  return run_proxy(job, "ep_proxy_reduce", options,
                   job != nullptr ? blocks_for(job->tokens, options.blocks) : 1, reduce_block,
                   error);
}

int run_ep_layout(const courier_gpu_ep_layout_v1* job, std::string* error) {
  if (job == nullptr || job->struct_size < sizeof *job) {
    *error = "run_ep_layout: job is NULL or its struct_size is too small";
    return -EINVAL;
  }
  if (job->num_tokens == 0) return 0;
  courier_host_kernel_launch_v1 launch{};
  launch.struct_size = sizeof launch;
  launch.grid_dim = std::min<uint32_t>(job->num_tokens, 4);  // a few threads, like a small grid
  launch.block_dim = 1;
  launch.fn = layout_kernel;
  launch.arg = const_cast<courier_gpu_ep_layout_v1*>(job);
  return launch_host_kernel(launch, error);
}

}  // namespace courier::host_gpu
