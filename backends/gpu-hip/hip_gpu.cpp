// gpu-hip: Courier's backend for AMD GPUs through the ROCm HIP runtime.
// FIFO rings live in pinned, fine-grained host memory mapped into the
// device, device memory comes from hipMalloc, and peers on the host share
// it through HIP IPC handles. libamdhip64 is linked normally: loading it
// needs no GPU (it opens /dev/kfd only when first used), so on a machine
// without one the plugin loads and reports the runtime's "no device".
#include <hip/hip_runtime_api.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include "courier/abi/gpu_v1.h"
#include "gpu/ep_counters.hpp"
#include "gpu/ep_streams.hpp"
#include "gpu/plugin_table.hpp"
#include "hip_ep_kernels.hpp"
#include "hip_selftest_kernels.hpp"
#include "hip_status.hpp"

namespace {

using courier::hip_gpu::fail;

struct HipBackend {
  int device_count = 0;
  int warp_size = 64;  // CDNA wavefront; replaced by device 0's when there is one
  std::string no_device_reason;
  std::string device_name;
  // Per device, the EP kernels' stream: the backend's own or the caller's
  // (ep_set_stream). Made once the device count is known.
  std::unique_ptr<courier::device::EpStreams<hipStream_t>> ep_streams;
  // Per device, the EP launches' shape, asked when its EP stream is made.
  std::vector<courier::device::ep::LaunchShape> ep_shapes;
  // Per device, what the EP entries cost and ep_stamp's events (GPU ABI 1.12).
  std::unique_ptr<courier::device::EpCounters<hipEvent_t>> ep_counters;
};

HipBackend* as_backend(void* backend) { return static_cast<HipBackend*>(backend); }

// The runtime's event calls, for gpu/ep_counters.hpp.
struct HipEvents {
  using Event = hipEvent_t;
  using Stream = hipStream_t;
  static constexpr hipError_t kOk = hipSuccess;
  static hipError_t create(Event* event) { return hipEventCreate(event); }
  static hipError_t destroy(Event event) { return hipEventDestroy(event); }
  static hipError_t record(Event event, Stream stream) { return hipEventRecord(event, stream); }
  static hipError_t synchronize(Event event) { return hipEventSynchronize(event); }
  static hipError_t elapsed_ms(float* ms, Event from, Event to) {
    return hipEventElapsedTime(ms, from, to);
  }
  static int fail(int status, std::string message) {
    return courier::hip_gpu::fail(status, std::move(message));
  }
  static int fail(hipError_t error, const std::string& what) {
    return courier::hip_gpu::fail(error, what);
  }
};

int select_device(const HipBackend* b, int device) {
  if (device < 0 || device >= b->device_count) {
    return fail(-ENODEV, "HIP device " + std::to_string(device) + " does not exist (" +
                             std::to_string(b->device_count) + " visible)");
  }
  hipError_t rc = hipSetDevice(device);
  return rc == hipSuccess ? 0 : fail(rc, "hipSetDevice(" + std::to_string(device) + ")");
}

int hip_init(const courier_host_services_v1* host, void** backend) {
  if (host == nullptr || backend == nullptr) return fail(-EINVAL, "init: NULL argument");
  auto* b = new (std::nothrow) HipBackend;
  if (b == nullptr) return fail(-ENOMEM, "init: out of memory");
  // The first runtime call opens the kernel driver; without a GPU it
  // reports hipErrorNoDevice, which is "no device", not an init failure.
  hipError_t rc = hipGetDeviceCount(&b->device_count);
  if (rc != hipSuccess) {
    b->device_count = 0;
    b->no_device_reason = "hipGetDeviceCount: " + courier::hip_gpu::describe(rc);
    if (access("/dev/kfd", F_OK) != 0)
      b->no_device_reason += "; no /dev/kfd (amdgpu kernel driver not loaded)";
    (void)hipGetLastError();  // clear it so later calls start clean
  } else if (b->device_count == 0) {
    b->no_device_reason = "the HIP runtime reports no device";
  } else {
    hipDeviceProp_t props{};
    if (hipGetDeviceProperties(&props, 0) == hipSuccess) {
      b->device_name = std::string(props.name) + " (" + props.gcnArchName + ")";
      if (props.warpSize > 0) b->warp_size = props.warpSize;
    }
  }
  b->ep_streams = std::make_unique<courier::device::EpStreams<hipStream_t>>(b->device_count);
  b->ep_shapes.resize(static_cast<size_t>(b->device_count));
  b->ep_counters = std::make_unique<courier::device::EpCounters<hipEvent_t>>(b->device_count);
  *backend = b;
  return 0;
}

void hip_fini(void* backend) {
  HipBackend* b = as_backend(backend);
  for (hipStream_t stream : b->ep_streams->own()) {
    if (stream != nullptr) (void)hipStreamDestroy(stream);
  }
  courier::device::destroy_ep_stamps<HipEvents>(*b->ep_counters);
  delete b;
}

const char* hip_last_error(void*) { return courier::hip_gpu::last_error(); }

int hip_query(void* backend, courier_gpu_props_v1* props) {
  if (props == nullptr || props->struct_size < sizeof(courier_gpu_props_v1)) {
    return fail(-EINVAL, "query: props is NULL or its struct_size is too small");
  }
  const HipBackend* b = as_backend(backend);
  props->device_count = static_cast<uint32_t>(b->device_count);
  props->warp_size = static_cast<uint32_t>(b->warp_size);
  props->mem_kind = COURIER_MEM_ROCM;
  props->caps = 0;
  if (b->device_count > 0) {
    props->caps = COURIER_GPU_CAP_MAPPED_HOST | COURIER_GPU_CAP_IPC | COURIER_GPU_CAP_FIFO_KERNELS |
                  COURIER_GPU_CAP_GRAPHS | COURIER_GPU_CAP_EP_KERNELS | COURIER_GPU_CAP_EP_DIRECT |
                  COURIER_GPU_CAP_EP_PROXY | COURIER_GPU_CAP_EP_FP8_POW2 |
                  COURIER_GPU_CAP_EP_LOGFMT | COURIER_GPU_CAP_EP_FUSED |
                  COURIER_GPU_CAP_EP_LOCAL_ROWS | COURIER_GPU_CAP_EP_HT_FUSED |
                  COURIER_GPU_CAP_EP_COMBINE_FUSED | COURIER_GPU_CAP_EP_DONE_MARK;
    // dmabuf only where HIP can export (see hip_dmabuf_export); the runtime
    // has no device attribute to ask, so an export refused by the driver
    // fails at the call.
    if (COURIER_HIP_HAS_DMABUF_EXPORT) props->caps |= COURIER_GPU_CAP_DMABUF;
  }
  std::snprintf(props->device_name, sizeof props->device_name, "%s", b->device_name.c_str());
  std::snprintf(props->no_device_reason, sizeof props->no_device_reason, "%s",
                b->no_device_reason.c_str());
  return 0;
}

int hip_mem_alloc(void* backend, int device, size_t bytes, void** ptr) {
  if (ptr == nullptr) return fail(-EINVAL, "mem_alloc: output pointer is NULL");
  if (int rc = select_device(as_backend(backend), device); rc != 0) return rc;
  hipError_t rc = hipMalloc(ptr, bytes == 0 ? 1 : bytes);
  if (rc != hipSuccess) {
    return fail(
        rc, "hipMalloc(" + std::to_string(bytes) + " bytes) on device " + std::to_string(device));
  }
  // Device memory starts zeroed, like the host backend's.
  rc = hipMemset(*ptr, 0, bytes);
  return rc == hipSuccess ? 0 : fail(rc, "hipMemset of a new allocation");
}

int hip_mem_free(void* backend, int device, void* ptr) {
  if (ptr == nullptr) return 0;
  if (int rc = select_device(as_backend(backend), device); rc != 0) return rc;
  hipError_t rc = hipFree(ptr);
  return rc == hipSuccess ? 0 : fail(rc, "hipFree");
}

int hip_host_alloc_mapped(void* backend, size_t bytes, void** host_ptr, void** device_ptr) {
  if (host_ptr == nullptr || device_ptr == nullptr) {
    return fail(-EINVAL, "host_alloc_mapped: NULL output pointer");
  }
  if (as_backend(backend)->device_count == 0) return fail(-ENODEV, "no HIP device");
  // Mapped: the device addresses it; portable: every device of the process
  // does; coherent: fine-grained, so the device's system-scope atomics and
  // fences reach the CPU while the kernel runs (ROCm's default for
  // hipHostMalloc is coarse-grained unless HIP_HOST_COHERENT=1).
  hipError_t rc =
      hipHostMalloc(host_ptr, bytes == 0 ? 1 : bytes,
                    hipHostMallocMapped | hipHostMallocPortable | hipHostMallocCoherent);
  if (rc != hipSuccess) return fail(rc, "hipHostMalloc(" + std::to_string(bytes) + " bytes)");
  std::memset(*host_ptr, 0, bytes);
  rc = hipHostGetDevicePointer(device_ptr, *host_ptr, 0);
  if (rc != hipSuccess) {
    (void)hipHostFree(*host_ptr);
    return fail(rc, "hipHostGetDevicePointer");
  }
  return 0;
}

int hip_host_free_mapped(void*, void* host_ptr) {
  if (host_ptr == nullptr) return 0;
  hipError_t rc = hipHostFree(host_ptr);
  return rc == hipSuccess ? 0 : fail(rc, "hipHostFree");
}

// hipPointerAttribute_t's memory type: `memoryType` before ROCm 6,
// `type` from ROCm 6 on.
template <class Attributes>
hipMemoryType memory_type(const Attributes& attributes) {
  if constexpr (requires { attributes.type; }) {
    return attributes.type;
  } else {
    return attributes.memoryType;
  }
}

int hip_memcpy(void* backend, void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return 0;
  if (dst == nullptr || src == nullptr) return fail(-EINVAL, "memcpy: NULL pointer");
  hipError_t rc = hipMemcpy(dst, src, bytes, hipMemcpyDefault);
  // The wait counts on the device that owns the memory (dst's, else src's).
  int device = -1;
  for (const void* p : {static_cast<const void*>(dst), src}) {
    hipPointerAttribute_t attributes{};
    if (hipPointerGetAttributes(&attributes, p) != hipSuccess) {
      (void)hipGetLastError();  // host memory: not HIP's
    } else if (device < 0 && memory_type(attributes) == hipMemoryTypeDevice) {
      device = attributes.device;
    }
  }
  if (device < 0 && hipGetDevice(&device) != hipSuccess) device = -1;
  as_backend(backend)->ep_counters->waited(device);
  return rc == hipSuccess ? 0 : fail(rc, "hipMemcpy(" + std::to_string(bytes) + " bytes)");
}

int hip_launch_host_kernel(void*, const courier_host_kernel_launch_v1*) {
  return fail(-ENOTSUP, "gpu-hip runs device kernels, not host kernels");
}

int hip_ipc_export(void*, void* ptr, courier_gpu_ipc_handle_v1* handle) {
  if (ptr == nullptr || handle == nullptr) return fail(-EINVAL, "ipc_export: NULL argument");
  static_assert(sizeof(hipIpcMemHandle_t) <= sizeof handle->bytes);
  hipIpcMemHandle_t h{};
  hipError_t rc = hipIpcGetMemHandle(&h, ptr);
  if (rc != hipSuccess) return fail(rc, "hipIpcGetMemHandle");
  std::memset(handle->bytes, 0, sizeof handle->bytes);
  std::memcpy(handle->bytes, &h, sizeof h);
  return 0;
}

int hip_ipc_import(void* backend, int device, const courier_gpu_ipc_handle_v1* handle, void** ptr) {
  if (ptr == nullptr || handle == nullptr) return fail(-EINVAL, "ipc_import: NULL argument");
  if (int rc = select_device(as_backend(backend), device); rc != 0) return rc;
  hipIpcMemHandle_t h{};
  std::memcpy(&h, handle->bytes, sizeof h);
  hipError_t rc = hipIpcOpenMemHandle(ptr, h, hipIpcMemLazyEnablePeerAccess);
  return rc == hipSuccess ? 0 : fail(rc, "hipIpcOpenMemHandle on device " + std::to_string(device));
}

int hip_ipc_close(void*, void* ptr) {
  hipError_t rc = hipIpcCloseMemHandle(ptr);
  return rc == hipSuccess ? 0 : fail(rc, "hipIpcCloseMemHandle");
}

std::string hex(uintptr_t address) {
  char text[24];
  std::snprintf(text, sizeof text, "0x%llx", static_cast<unsigned long long>(address));
  return text;
}

// The dmabuf covers the host pages holding [ptr, ptr + bytes), as on
// gpu-cuda; *offset is ptr's offset from the first page. Export needs
// hipMemGetHandleForAddressRange (ROCm 6); COURIER_HIP_HAS_DMABUF_EXPORT
// says whether the HIP headers this backend was built with have it
// (CMakeLists.txt checks). The checks before it run on every ROCm, so the
// errors for host memory and bad ranges are the same everywhere.
int hip_dmabuf_export(void* backend, void* ptr, size_t bytes, int* fd, uint64_t* offset) {
  const HipBackend* b = as_backend(backend);
  if (ptr == nullptr || fd == nullptr || offset == nullptr || bytes == 0) {
    return fail(-EINVAL, "dmabuf_export: NULL argument or zero size");
  }
  const auto address = reinterpret_cast<uintptr_t>(ptr);
  const std::string range = "[" + hex(address) + ", +" + std::to_string(bytes) + ")";
  if (bytes > UINTPTR_MAX - address) {
    return fail(-EINVAL, "dmabuf_export: " + range + " wraps around the address space");
  }
  hipPointerAttribute_t attributes{};
  if (hipPointerGetAttributes(&attributes, ptr) != hipSuccess) {
    (void)hipGetLastError();  // an unknown pointer is host memory; clear the error
    return fail(-EOPNOTSUPP, "dmabuf_export: " + range +
                                 " is not HIP memory (host memory is "
                                 "not exported)");
  }
  if (memory_type(attributes) != hipMemoryTypeDevice) {
    return fail(-EOPNOTSUPP, "dmabuf_export: " + range +
                                 " is not HIP device memory (host or managed memory is not "
                                 "exported)");
  }
  if (int rc = select_device(b, attributes.device); rc != 0) return rc;
  hipDeviceptr_t base = nullptr;
  size_t size = 0;
  if (hipError_t rc = hipMemGetAddressRange(&base, &size, ptr); rc != hipSuccess) {
    return fail(-EINVAL, "dmabuf_export: hipMemGetAddressRange(" + hex(address) +
                             ") found no allocation: " + courier::hip_gpu::describe(rc));
  }
  const auto allocation = reinterpret_cast<uintptr_t>(base);
  if (address + bytes > allocation + size) {
    return fail(-EINVAL, "dmabuf_export: " + range + " runs past the end of its allocation [" +
                             hex(allocation) + ", +" + std::to_string(size) + ")");
  }
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t start = address & ~(page - 1);
  const uintptr_t end = (address + bytes + page - 1) & ~(page - 1);
#if COURIER_HIP_HAS_DMABUF_EXPORT
  int handle = -1;
  hipError_t rc = hipMemGetHandleForAddressRange(&handle, reinterpret_cast<hipDeviceptr_t>(start),
                                                 end - start, hipMemRangeHandleTypeDmaBufFd, 0);
  if (rc != hipSuccess) {
    return fail(rc, "dmabuf_export: hipMemGetHandleForAddressRange([" + hex(start) + ", +" +
                        std::to_string(end - start) + ") on device " +
                        std::to_string(attributes.device) + ")");
  }
  *fd = handle;
  *offset = address - start;
  return 0;
#else
  (void)start;
  (void)end;
  return fail(-EOPNOTSUPP, "HIP runtime has no hipMemGetHandleForAddressRange (ROCm < 6)");
#endif
}

int hip_run_fifo_producers(void*, courier_gpu_fifo_producers_v1* job) {
  return courier::hip_gpu::run_fifo_producers(job);
}

int hip_run_fifo_round_trips(void*, courier_gpu_fifo_round_trips_v1* job) {
  return courier::hip_gpu::run_fifo_round_trips(job);
}

int hip_run_ep_layout(void* backend, const courier_gpu_ep_layout_v1* job) {
  const int rc = courier::hip_gpu::run_ep_layout(job);
  if (rc == 0 && job->num_tokens > 0) {  // a kernel, then a wait for it
    as_backend(backend)->ep_counters->launched(job->device, 1);
    as_backend(backend)->ep_counters->waited(job->device);
  }
  return rc;
}

int hip_run_command_lists(void*, courier_gpu_command_lists_v1* job) {
  return courier::hip_gpu::run_command_lists(job);
}

// The EP stream of `device` (the caller's where one was chosen: NULL is
// HIP's default stream), the device current on this thread; *ok false
// after fail(). Making the backend's own stream also asks the device's
// launch shape (ep_shapes, written under the streams' lock: read after).
hipStream_t ep_stream(void* backend, int device, bool* ok) {
  HipBackend* b = as_backend(backend);
  hipStream_t stream = nullptr;
  auto make = [b](int d, hipStream_t* made) {
    return courier::hip_gpu::make_ep_stream(d, made, &b->ep_shapes[static_cast<size_t>(d)]);
  };
  *ok = select_device(b, device) == 0 && b->ep_streams->get(device, make, &stream);
  return stream;
}

int hip_ep_set_stream(void* backend, int device, int caller, void* stream) {
  HipBackend* b = as_backend(backend);
  if (caller != 0 && caller != 1) {
    return fail(-EINVAL, "ep_set_stream: caller must be 0 (the backend's stream) or 1, got " +
                             std::to_string(caller));
  }
  if (select_device(b, device) != 0) return -ENODEV;
  b->ep_streams->choose(device, caller == 1, static_cast<hipStream_t>(stream));
  return 0;
}

// One entry point per direct-path kernel: the job's device's EP stream.
template <class Job,
          int (*Enqueue)(const Job*, hipStream_t, const courier::device::ep::LaunchShape&)>
int enqueue_ep(void* backend, const Job* job) {
  if (job == nullptr) return fail(-EINVAL, "EP kernel: job is NULL");
  bool ok = false;
  hipStream_t stream = ep_stream(backend, job->device, &ok);
  if (!ok) return -EIO;
  const int rc =
      Enqueue(job, stream, as_backend(backend)->ep_shapes[static_cast<size_t>(job->device)]);
  if (rc == 0) as_backend(backend)->ep_counters->launched(job->device, 1);  // one kernel each
  return rc;
}

// One entry point per proxy-path job (several kernels each).
template <class Job, int (*Enqueue)(const Job*, hipStream_t, uint32_t*)>
int enqueue_proxy(void* backend, const Job* job) {
  if (job == nullptr) return fail(-EINVAL, "EP kernel: job is NULL");
  bool ok = false;
  hipStream_t stream = ep_stream(backend, job->device, &ok);
  if (!ok) return -EIO;
  uint32_t kernels = 0;
  const int rc = Enqueue(job, stream, &kernels);
  if (rc == 0) as_backend(backend)->ep_counters->launched(job->device, kernels);
  return rc;
}

int hip_ep_sync(void* backend, int device) {
  bool ok = false;
  hipStream_t stream = ep_stream(backend, device, &ok);
  if (!ok) return -EIO;
  const hipError_t rc = hipStreamSynchronize(stream);
  as_backend(backend)->ep_counters->waited(device);
  return rc == hipSuccess ? 0 : fail(rc, "waiting for the EP stream");
}

int hip_ep_counters(void* backend, int device, courier_gpu_ep_counters_v1* out) {
  return courier::device::read_ep_counters<HipEvents>(*as_backend(backend)->ep_counters, device,
                                                      out);
}

// Stamps are HIP events on the EP stream (made at the first stamp).
int hip_ep_stamp(void* backend, int device, uint32_t slot) {
  return courier::device::record_ep_stamp<HipEvents>(*as_backend(backend)->ep_counters, device,
                                                     slot, [&](hipStream_t* stream) {
                                                       bool ok = false;
                                                       *stream = ep_stream(backend, device, &ok);
                                                       return ok;
                                                     });
}

int hip_ep_stamp_elapsed(void* backend, int device, uint64_t* ns) {
  HipBackend* b = as_backend(backend);
  if (int rc = select_device(b, device); rc != 0) return rc;  // says why
  return courier::device::ep_stamp_elapsed_ns<HipEvents>(*b->ep_counters, device, ns);
}

// A spin on the EP stream (benchmarks: the stamps behind it time the GPU
// alone); not one of the EP calls' kernels, so not counted.
int hip_ep_hold(void* backend, int device, uint32_t microseconds) {
  bool ok = false;
  hipStream_t stream = ep_stream(backend, device, &ok);
  if (!ok) return -EIO;
  return courier::hip_gpu::ep_hold(microseconds, stream);
}

int hip_ep_stream_capturing(void* backend, int device, int* capturing) {
  if (capturing == nullptr) return fail(-EINVAL, "ep_stream_capturing: capturing is NULL");
  bool ok = false;
  hipStream_t stream = ep_stream(backend, device, &ok);
  if (!ok) return -EIO;
  hipStreamCaptureStatus status = hipStreamCaptureStatusNone;
  const hipError_t rc = hipStreamIsCapturing(stream, &status);
  if (rc != hipSuccess) return fail(rc, "asking whether the EP stream is being captured");
  *capturing = status != hipStreamCaptureStatusNone ? 1 : 0;
  return 0;
}

int hip_ep_copy(void* backend, int device, void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return 0;
  if (dst == nullptr || src == nullptr) return fail(-EINVAL, "ep_copy: dst or src is NULL");
  bool ok = false;
  hipStream_t stream = ep_stream(backend, device, &ok);
  if (!ok) return -EIO;
  const hipError_t rc = hipMemcpyAsync(dst, src, bytes, hipMemcpyDefault, stream);
  return rc == hipSuccess ? 0 : fail(rc, "copying on the EP stream (ep_copy)");
}

constexpr courier_gpu_runtime_part_v1 kRuntime = {
    sizeof(courier_gpu_runtime_part_v1),
    0,
    hip_mem_alloc,
    hip_mem_free,
    hip_host_alloc_mapped,
    hip_host_free_mapped,
    hip_memcpy,
    hip_launch_host_kernel,
    hip_ipc_export,
    hip_ipc_import,
    hip_ipc_close,
    hip_dmabuf_export,
};

constexpr courier_gpu_selftest_part_v1 kSelftest = {
    sizeof(courier_gpu_selftest_part_v1),
    0,
    hip_run_fifo_producers,
    hip_run_fifo_round_trips,
    hip_run_command_lists,
};

constexpr courier_gpu_ep_part_v1 kEp = {
    sizeof(courier_gpu_ep_part_v1),
    0,
    hip_run_ep_layout,
    enqueue_ep<courier_gpu_ep_route_v1, courier::hip_gpu::ep_route>,
    enqueue_ep<courier_gpu_ep_signal_v1, courier::hip_gpu::ep_signal>,
    enqueue_ep<courier_gpu_ep_wait_v1, courier::hip_gpu::ep_wait>,
    enqueue_ep<courier_gpu_ep_ht_dispatch_v1, courier::hip_gpu::ep_ht_dispatch>,
    enqueue_ep<courier_gpu_ep_ll_dispatch_v1, courier::hip_gpu::ep_ll_dispatch>,
    enqueue_ep<courier_gpu_ep_ll_receive_v1, courier::hip_gpu::ep_ll_receive>,
    enqueue_ep<courier_gpu_ep_combine_send_v1, courier::hip_gpu::ep_combine_send>,
    enqueue_ep<courier_gpu_ep_reduce_v1, courier::hip_gpu::ep_reduce>,
    hip_ep_sync,
    enqueue_proxy<courier_gpu_ep_proxy_refuse_v1, courier::hip_gpu::ep_proxy>,
    enqueue_proxy<courier_gpu_ep_proxy_ht_dispatch_v1, courier::hip_gpu::ep_proxy>,
    enqueue_proxy<courier_gpu_ep_proxy_ht_receive_v1, courier::hip_gpu::ep_proxy>,
    enqueue_proxy<courier_gpu_ep_proxy_ll_dispatch_v1, courier::hip_gpu::ep_proxy>,
    enqueue_proxy<courier_gpu_ep_proxy_ll_receive_v1, courier::hip_gpu::ep_proxy>,
    enqueue_proxy<courier_gpu_ep_proxy_combine_v1, courier::hip_gpu::ep_proxy>,
    enqueue_proxy<courier_gpu_ep_proxy_reduce_v1, courier::hip_gpu::ep_proxy>,
    hip_ep_set_stream,
    hip_ep_stream_capturing,
    hip_ep_copy,
    hip_ep_counters,
    hip_ep_stamp,
    hip_ep_stamp_elapsed,
    hip_ep_hold,
};

constexpr courier_gpu_plugin_v1 kPlugin =
    courier::device::plugin_table({"hip", "AMD GPUs through the ROCm HIP runtime", nullptr, 0,
                                   hip_init, hip_fini, hip_last_error, hip_query},
                                  kRuntime, &kSelftest, &kEp);

}  // namespace

extern "C" __attribute__((visibility("default"))) const courier_gpu_plugin_v1*
courier_gpu_backend_v1(void) {
  return &kPlugin;
}
