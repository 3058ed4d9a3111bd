// gpu-host: Courier's CPU "GPU". Device memory is host memory, mapped host
// memory is host memory seen at the same address, and a kernel launch is a
// grid of CPU threads. It lets every layer above run and be tested on
// machines without a GPU.
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "courier/abi/gpu_v1.h"
#include "gpu/plugin_table.hpp"
#include "host_ep_kernels.hpp"
#include "host_kernel_launch.hpp"
#include "host_selftest_kernels.hpp"

namespace {

thread_local std::string g_last_error;  // per-thread, as the ABI prescribes

int fail(int status, std::string message) {
  g_last_error = std::move(message);
  return status;
}

constexpr size_t kAlignment = 4096;  // page-aligned, like a device allocation
// From this size on, memory comes straight from mmap: the kernel hands out
// zeroed pages as they are first touched, so an EP Buffer sized for the
// worst case costs only the pages its calls use (memset touched them all:
// seconds for a 4-rank low-latency Buffer of 512 tokens at hidden 7168).
constexpr size_t kMappedFrom = size_t{1} << 20;

constexpr courier_knob_v1 kKnobs[] = {
    {"COURIER_HOST_EP_BLOCKS", "1", "1..64",
     "at most this many blocks per EP proxy kernel on gpu-host (one: the calling thread runs "
     "it, no thread is started; more runs the kernels' cross-block code as a GPU would)"},
    {"COURIER_HOST_EP_THREADS", "1", "1..64",
     "CPU threads per block of gpu-host's EP proxy kernels (more than 1 runs the kernels' "
     "block-level code as a GPU would: scans, barriers, lanes sharing rows)"},
    {"COURIER_HOST_EP_TIMELINE", "0", "0|1",
     "print, when the backend unloads, each EP proxy kernel's median wall time and the part "
     "spent waiting for peers and this rank's own WRITEs (stderr)"},
};

// What an initialized gpu-host keeps.
struct HostBackend {
  courier::host_gpu::EpTimeline timeline;  // COURIER_HOST_EP_TIMELINE
  courier::host_gpu::EpOptions ep;         // COURIER_HOST_EP_BLOCKS, _THREADS; the timeline
  // ep_counters: kernels run and waits asked for; ep_stamp's two stamps.
  std::atomic<uint64_t> launches{0};
  std::atomic<uint64_t> host_waits{0};
  std::atomic<uint64_t> stamps[2] = {0, 0};
  std::mutex mutex;                          // guards mapped
  std::unordered_map<void*, size_t> mapped;  // allocations from mmap, and their sizes

  // Zero-filled, page-aligned memory ("device" and "mapped host" alike).
  int allocate(size_t bytes, void** ptr) {
    if (ptr == nullptr) return fail(-EINVAL, "allocation: output pointer is NULL");
    const size_t rounded = std::max(kAlignment, (bytes + kAlignment - 1) / kAlignment * kAlignment);
    if (rounded >= kMappedFrom) {
      void* p = mmap(nullptr, rounded, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (p == MAP_FAILED) {
        return fail(-ENOMEM,
                    "cannot map " + std::to_string(bytes) + " bytes: " + std::strerror(errno));
      }
      std::lock_guard lock(mutex);
      mapped.emplace(p, rounded);
      *ptr = p;
      return 0;
    }
    void* p = std::aligned_alloc(kAlignment, rounded);
    if (p == nullptr) return fail(-ENOMEM, "cannot allocate " + std::to_string(bytes) + " bytes");
    std::memset(p, 0, rounded);
    *ptr = p;
    return 0;
  }
  void release(void* ptr) {
    {
      std::lock_guard lock(mutex);
      if (auto it = mapped.find(ptr); it != mapped.end()) {
        munmap(ptr, it->second);
        mapped.erase(it);
        return;
      }
    }
    std::free(ptr);
  }
};

HostBackend& as_host(void* backend) { return *static_cast<HostBackend*>(backend); }

// An integer knob in 1..64; unset keeps *value.
int read_count(const courier_host_services_v1* host, const char* name, uint32_t* value) {
  const char* text = host->get_env(host->ctx, name);
  if (text == nullptr) return 0;
  char* end = nullptr;
  const unsigned long v = std::strtoul(text, &end, 10);
  if (end == text || *end != '\0' || v < 1 || v > 64) {
    return fail(-EINVAL,
                std::string(name) + "='" + text + "' is invalid: expected an integer in 1..64");
  }
  *value = static_cast<uint32_t>(v);
  return 0;
}

int host_init(const courier_host_services_v1* host, void** backend) {
  if (host == nullptr || backend == nullptr) return fail(-EINVAL, "init: NULL argument");
  auto b = std::make_unique<HostBackend>();
  if (int rc = read_count(host, "COURIER_HOST_EP_BLOCKS", &b->ep.blocks); rc != 0) return rc;
  if (int rc = read_count(host, "COURIER_HOST_EP_THREADS", &b->ep.threads); rc != 0) return rc;
  if (const char* timeline = host->get_env(host->ctx, "COURIER_HOST_EP_TIMELINE");
      timeline != nullptr && *timeline != '\0' && std::strcmp(timeline, "0") != 0) {
    if (std::strcmp(timeline, "1") != 0) {
      return fail(-EINVAL, std::string("COURIER_HOST_EP_TIMELINE='") + timeline +
                               "' is invalid: expected 0 or 1");
    }
    b->timeline.enable();
  }
  b->ep.timeline = &b->timeline;
  b->ep.launches = &b->launches;
  *backend = b.release();
  return 0;
}

void host_fini(void* backend) {
  const std::string timeline = as_host(backend).timeline.summary();
  if (!timeline.empty()) std::fputs(timeline.c_str(), stderr);
  delete static_cast<HostBackend*>(backend);
}

const char* host_last_error(void*) { return g_last_error.c_str(); }

int host_query(void*, courier_gpu_props_v1* props) {
  if (props == nullptr || props->struct_size < sizeof(courier_gpu_props_v1)) {
    return fail(-EINVAL, "query: props is NULL or its struct_size is too small");
  }
  props->caps = COURIER_GPU_CAP_HOST_KERNELS | COURIER_GPU_CAP_MAPPED_HOST |
                COURIER_GPU_CAP_FIFO_KERNELS | COURIER_GPU_CAP_EP_KERNELS |
                COURIER_GPU_CAP_EP_PROXY | COURIER_GPU_CAP_EP_FP8_POW2 | COURIER_GPU_CAP_EP_LOGFMT;
  props->device_count = 1;
  props->warp_size = 1;
  props->mem_kind = COURIER_MEM_HOST;
  std::snprintf(props->device_name, sizeof props->device_name, "host CPU threads");
  props->no_device_reason[0] = '\0';
  return 0;
}

int host_mem_alloc(void* backend, int device, size_t bytes, void** ptr) {
  if (device != 0) return fail(-ENODEV, "device " + std::to_string(device) + " does not exist");
  return as_host(backend).allocate(bytes, ptr);
}

int host_mem_free(void* backend, int, void* ptr) {
  as_host(backend).release(ptr);
  return 0;
}

int host_alloc_mapped(void* backend, size_t bytes, void** host_ptr, void** device_ptr) {
  if (device_ptr == nullptr) return fail(-EINVAL, "host_alloc_mapped: device_ptr is NULL");
  int rc = as_host(backend).allocate(bytes, host_ptr);
  if (rc == 0) *device_ptr = *host_ptr;
  return rc;
}

int host_free_mapped(void* backend, void* host_ptr) {
  as_host(backend).release(host_ptr);
  return 0;
}

int host_memcpy(void* backend, void* dst, const void* src, size_t bytes) {
  if (bytes > 0 && (dst == nullptr || src == nullptr)) return fail(-EINVAL, "memcpy: NULL");
  if (bytes == 0) return 0;
  std::memmove(dst, src, bytes);
  as_host(backend).host_waits.fetch_add(1, std::memory_order_relaxed);  // a synchronous copy
  return 0;
}

int host_launch(void*, const courier_host_kernel_launch_v1* launch) {
  // A caller built before the CPU list existed passes a shorter struct.
  constexpr size_t kWithoutCpus = offsetof(courier_host_kernel_launch_v1, cpus);
  if (launch == nullptr || launch->struct_size < kWithoutCpus) {
    return fail(-EINVAL, "launch_host_kernel: launch is NULL or too small");
  }
  courier_host_kernel_launch_v1 full{};
  std::memcpy(&full, launch, std::min<size_t>(launch->struct_size, sizeof full));
  if (launch->struct_size < sizeof full) {
    full.cpus = nullptr;
    full.num_cpus = 0;
  }
  std::string error;
  int rc = courier::host_gpu::launch_host_kernel(full, &error);
  if (rc != 0) g_last_error = error;
  return rc;
}

int host_run_fifo_producers(void*, courier_gpu_fifo_producers_v1* job) {
  std::string error;
  int rc = courier::host_gpu::run_fifo_producers(job, &error);
  if (rc != 0) g_last_error = error;
  return rc;
}

int host_run_fifo_round_trips(void*, courier_gpu_fifo_round_trips_v1* job) {
  std::string error;
  int rc = courier::host_gpu::run_fifo_round_trips(job, &error);
  if (rc != 0) g_last_error = error;
  return rc;
}

int host_run_command_lists(void*, courier_gpu_command_lists_v1* job) {
  std::string error;
  int rc = courier::host_gpu::run_command_lists(job, &error);
  if (rc != 0) g_last_error = error;
  return rc;
}

int host_run_ep_layout(void* backend, const courier_gpu_ep_layout_v1* job) {
  std::string error;
  int rc = courier::host_gpu::run_ep_layout(job, &error);
  if (rc != 0) {
    g_last_error = error;
  } else if (job->num_tokens > 0) {  // a kernel, and a wait for it, as the GPU backends count
    as_host(backend).launches.fetch_add(1, std::memory_order_relaxed);
    as_host(backend).host_waits.fetch_add(1, std::memory_order_relaxed);
  }
  return rc;
}

// The proxy path's kernels run before their entry point returns: the EP
// "stream" is always idle.
int host_ep_sync(void* backend, int device) {
  if (device != 0) return fail(-ENODEV, "device " + std::to_string(device) + " does not exist");
  as_host(backend).host_waits.fetch_add(1, std::memory_order_relaxed);
  return 0;
}

// The kernels run on the calling thread before their entries return, which
// keeps the order of any stream: the caller's "stream" is accepted and not
// used (so the core's calls that do not wait run here too).
int host_ep_set_stream(void*, int device, int caller, void*) {
  if (device != 0) return fail(-ENODEV, "device " + std::to_string(device) + " does not exist");
  if (caller != 0 && caller != 1) {
    return fail(-EINVAL, "ep_set_stream: caller must be 0 (the backend's stream) or 1, got " +
                             std::to_string(caller));
  }
  return 0;
}

// No streams, nothing to capture.
int host_ep_stream_capturing(void*, int device, int* capturing) {
  if (device != 0) return fail(-ENODEV, "device " + std::to_string(device) + " does not exist");
  if (capturing == nullptr) return fail(-EINVAL, "ep_stream_capturing: capturing is NULL");
  *capturing = 0;
  return 0;
}

// No streams: the copy is done when the entry returns.
int host_ep_copy(void*, int device, void* dst, const void* src, size_t bytes) {
  if (device != 0) return fail(-ENODEV, "device " + std::to_string(device) + " does not exist");
  if (bytes > 0 && (dst == nullptr || src == nullptr)) {
    return fail(-EINVAL, "ep_copy: dst or src is NULL");
  }
  if (bytes > 0) std::memmove(dst, src, bytes);
  return 0;
}

int host_ep_counters(void* backend, int device, courier_gpu_ep_counters_v1* out) {
  if (device != 0) return fail(-ENODEV, "device " + std::to_string(device) + " does not exist");
  // The fields of minor 12 (written only within out->struct_size).
  constexpr size_t kMinor12 = offsetof(courier_gpu_ep_counters_v1, host_waits) + sizeof(uint64_t);
  if (out == nullptr || out->struct_size < kMinor12) {
    return fail(-EINVAL, "ep_counters: out is NULL or its struct_size is too small");
  }
  const HostBackend& b = as_host(backend);
  out->kernel_launches = b.launches.load(std::memory_order_relaxed);
  out->host_waits = b.host_waits.load(std::memory_order_relaxed);
  return 0;
}

// Kernels run before their entries return: the host's clock at the stamp is
// the EP stream's.
int host_ep_stamp(void* backend, int device, uint32_t slot) {
  if (device != 0) return fail(-ENODEV, "device " + std::to_string(device) + " does not exist");
  if (slot > 1) return fail(-EINVAL, "ep_stamp: slot " + std::to_string(slot) + " is not 0 or 1");
  const auto now = std::chrono::steady_clock::now().time_since_epoch();
  as_host(backend).stamps[slot].store(
      std::chrono::duration_cast<std::chrono::nanoseconds>(now).count(), std::memory_order_relaxed);
  return 0;
}

int host_ep_stamp_elapsed(void* backend, int device, uint64_t* ns) {
  if (device != 0) return fail(-ENODEV, "device " + std::to_string(device) + " does not exist");
  if (ns == nullptr) return fail(-EINVAL, "ep_stamp_elapsed: ns is NULL");
  const HostBackend& b = as_host(backend);
  const uint64_t from = b.stamps[0].load(std::memory_order_relaxed);
  const uint64_t to = b.stamps[1].load(std::memory_order_relaxed);
  if (from == 0 || to == 0) {
    return fail(-EINVAL, std::string("ep_stamp_elapsed: stamp ") + (from == 0 ? "0" : "1") +
                             " was not recorded (ep_stamp)");
  }
  *ns = to > from ? to - from : 0;  // 1 before 0: none
  return 0;
}

// Kernels run before their entries return: there is no stream to hold, and
// the stamps (the host's clock at the entry) have no launch to leave out.
int host_ep_hold(void*, int device, uint32_t) {
  if (device != 0) return fail(-ENODEV, "device " + std::to_string(device) + " does not exist");
  return 0;
}

template <class Job, int (*Run)(const Job*, const courier::host_gpu::EpOptions&, std::string*)>
int host_ep_proxy(void* backend, const Job* job) {
  std::string error;
  const int rc = Run(job, static_cast<HostBackend*>(backend)->ep, &error);
  if (rc != 0) g_last_error = error;
  return rc;
}

constexpr courier_gpu_runtime_part_v1 kRuntime = {
    sizeof(courier_gpu_runtime_part_v1),
    0,
    host_mem_alloc,
    host_mem_free,
    host_alloc_mapped,
    host_free_mapped,
    host_memcpy,
    host_launch,
    nullptr,  // ipc_export: host memory is not shared across processes
    nullptr,  // ipc_import
    nullptr,  // ipc_close
    nullptr,  // dmabuf_export: host memory is no dmabuf; the core answers -EOPNOTSUPP
};

constexpr courier_gpu_selftest_part_v1 kSelftest = {
    sizeof(courier_gpu_selftest_part_v1),
    0,
    host_run_fifo_producers,
    host_run_fifo_round_trips,
    host_run_command_lists,
};

constexpr courier_gpu_ep_part_v1 kEp = {
    sizeof(courier_gpu_ep_part_v1),
    0,
    host_run_ep_layout,
    // ep_*: no direct path (host memory is not shared across processes);
    // EP runs over the proxy path.
    nullptr,
    nullptr,
    nullptr,
    nullptr,
    nullptr,
    nullptr,
    nullptr,
    nullptr,
    host_ep_sync,
    host_ep_proxy<courier_gpu_ep_proxy_refuse_v1, courier::host_gpu::ep_proxy_refuse>,
    host_ep_proxy<courier_gpu_ep_proxy_ht_dispatch_v1, courier::host_gpu::ep_proxy_ht_dispatch>,
    host_ep_proxy<courier_gpu_ep_proxy_ht_receive_v1, courier::host_gpu::ep_proxy_ht_receive>,
    host_ep_proxy<courier_gpu_ep_proxy_ll_dispatch_v1, courier::host_gpu::ep_proxy_ll_dispatch>,
    host_ep_proxy<courier_gpu_ep_proxy_ll_receive_v1, courier::host_gpu::ep_proxy_ll_receive>,
    host_ep_proxy<courier_gpu_ep_proxy_combine_v1, courier::host_gpu::ep_proxy_combine>,
    host_ep_proxy<courier_gpu_ep_proxy_reduce_v1, courier::host_gpu::ep_proxy_reduce>,
    host_ep_set_stream,
    host_ep_stream_capturing,
    host_ep_copy,
    host_ep_counters,
    host_ep_stamp,
    host_ep_stamp_elapsed,
    host_ep_hold,
};

constexpr courier_gpu_plugin_v1 kPlugin = courier::device::plugin_table(
    {"host", "CPU threads standing in for a GPU (development and CI)", kKnobs,
     sizeof kKnobs / sizeof kKnobs[0], host_init, host_fini, host_last_error, host_query},
    kRuntime, &kSelftest, &kEp);

}  // namespace

extern "C" __attribute__((visibility("default"))) const courier_gpu_plugin_v1*
courier_gpu_backend_v1(void) {
  return &kPlugin;
}
