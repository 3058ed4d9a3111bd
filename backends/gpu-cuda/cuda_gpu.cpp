// gpu-cuda: Courier's backend for NVIDIA GPUs. FIFO rings live in pinned
// host memory mapped into the device (unified addressing: the same pointer
// on both sides), device memory comes from cudaMalloc, peers on the host
// share it through CUDA IPC handles, and NICs register it through a dmabuf
// file descriptor. Driver-only calls (dmabuf export, allocation ranges) are
// resolved through the runtime's driver entry points, so nothing links
// against libcuda.
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include "courier/abi/gpu_v1.h"
#include "cuda_ep_kernels.hpp"
#include "cuda_selftest_kernels.hpp"
#include "cuda_status.hpp"
#include "gpu/ep_counters.hpp"
#include "gpu/ep_streams.hpp"
#include "gpu/plugin_table.hpp"
#include "gpu/rank_device.hpp"

namespace {

using courier::cuda_gpu::fail;

struct CudaBackend {
  const courier_host_services_v1* host = nullptr;
  int device_count = 0;
  // The rank's GPU once the core answered (default_device), -1 before.
  std::atomic<int> rank_device{-1};
  std::string no_device_reason;
  // Per device: CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED (and the driver calls
  // below exist); the capability reports the default device's.
  std::vector<bool> dmabuf;
  // Why dmabuf is false, for the errors of dmabuf_export.
  std::string no_dmabuf_reason;
  // Driver calls, when the driver has them (they are not in the runtime).
  CUresult (*get_handle_for_range)(void*, CUdeviceptr, size_t, CUmemRangeHandleType,
                                   unsigned long long) = nullptr;
  CUresult (*get_address_range)(CUdeviceptr*, size_t*, CUdeviceptr) = nullptr;
  CUresult (*get_error_name)(CUresult, const char**) = nullptr;
  // Per device, the EP kernels' stream: the backend's own or the caller's
  // (ep_set_stream). Made once the device count is known.
  std::unique_ptr<courier::device::EpStreams<cudaStream_t>> ep_streams;
  // Per device, the EP launches' shape, asked when its EP stream is made.
  std::vector<courier::device::ep::LaunchShape> ep_shapes;
  // Per device, what the EP entries cost and ep_stamp's events (GPU ABI 1.12).
  std::unique_ptr<courier::device::EpCounters<cudaEvent_t>> ep_counters;
  courier::cuda_gpu::EpTimeline timeline;  // COURIER_CUDA_EP_TIMELINE
  bool ep_general_kernels = false;         // COURIER_CUDA_EP_GENERAL_KERNELS
};

CudaBackend* as_backend(void* backend) { return static_cast<CudaBackend*>(backend); }

// The runtime's event calls, for gpu/ep_counters.hpp.
struct CudaEvents {
  using Event = cudaEvent_t;
  using Stream = cudaStream_t;
  static constexpr cudaError_t kOk = cudaSuccess;
  static cudaError_t create(Event* event) { return cudaEventCreate(event); }
  static cudaError_t destroy(Event event) { return cudaEventDestroy(event); }
  static cudaError_t record(Event event, Stream stream) { return cudaEventRecord(event, stream); }
  static cudaError_t synchronize(Event event) { return cudaEventSynchronize(event); }
  static cudaError_t elapsed_ms(float* ms, Event from, Event to) {
    return cudaEventElapsedTime(ms, from, to);
  }
  static int fail(int status, std::string message) {
    return courier::cuda_gpu::fail(status, std::move(message));
  }
  static int fail(cudaError_t error, const std::string& what) {
    return courier::cuda_gpu::fail(error, what);
  }
};

// A driver function by name, through the runtime (no link against libcuda).
template <class Fn>
Fn driver_entry(const char* name, unsigned int version) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found{};
  if (cudaGetDriverEntryPointByVersion(name, &fn, version, cudaEnableDefault, &found) !=
          cudaSuccess ||
      found != cudaDriverEntryPointSuccess) {
    return nullptr;
  }
  return reinterpret_cast<Fn>(fn);
}

// The device of calls that name none (mapped host memory, copies between
// host buffers) and the one query describes: the rank's GPU, which the core
// chooses and the host services answer (gpu/rank_device.hpp). It is asked
// for here, when needed, not in init: the core chooses only after init and
// the first query, from the device count they report (it queries again
// once it chose). Until the core has chosen, and for ever where no Context
// chooses (courier-info, tools and tests that open the backend alone),
// device 0. Fails when the answer is beyond the visible devices.
int default_device(CudaBackend* b, int* device) {
  *device = b->rank_device.load(std::memory_order_acquire);
  if (*device >= 0) return 0;
  const courier::device::RankDevice rank =
      courier::device::rank_device(b->host, b->device_count, "CUDA");
  if (rank.status == -EAGAIN) {
    *device = 0;
    return 0;
  }
  if (rank.status != 0) return fail(rank.status, rank.error);
  *device = rank.device;
  b->rank_device.store(rank.device, std::memory_order_release);
  return 0;
}

int select_device(const CudaBackend* b, int device) {
  if (device < 0 || device >= b->device_count) {
    return fail(-ENODEV, "CUDA device " + std::to_string(device) + " does not exist (" +
                             std::to_string(b->device_count) + " visible)");
  }
  cudaError_t rc = cudaSetDevice(device);
  return rc == cudaSuccess ? 0 : fail(rc, "cudaSetDevice(" + std::to_string(device) + ")");
}

// Which devices can export dmabuf: the driver must have the calls and the
// device must say so (CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED: open kernel
// modules, Linux >= 5.12).
void find_dmabuf_support(CudaBackend* b) {
  b->dmabuf.assign(static_cast<size_t>(b->device_count), false);
  b->get_handle_for_range =
      driver_entry<decltype(b->get_handle_for_range)>("cuMemGetHandleForAddressRange", 11070);
  b->get_address_range = driver_entry<decltype(b->get_address_range)>("cuMemGetAddressRange", 3020);
  b->get_error_name = driver_entry<decltype(b->get_error_name)>("cuGetErrorName", 6000);
  auto get_attribute =
      driver_entry<CUresult (*)(int*, CUdevice_attribute, CUdevice)>("cuDeviceGetAttribute", 2000);
  if (b->get_handle_for_range == nullptr || b->get_address_range == nullptr ||
      get_attribute == nullptr) {
    b->no_dmabuf_reason =
        "the CUDA driver has no cuMemGetHandleForAddressRange (it needs CUDA 11.7 or later)";
    return;
  }
  b->no_dmabuf_reason =
      "CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED is 0 (dmabuf needs NVIDIA's open kernel modules "
      "and Linux 5.12 or later)";
  for (int device = 0; device < b->device_count; ++device) {
    // The runtime's device ordinals are the driver's CUdevice values.
    int supported = 0;
    if (get_attribute(&supported, CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED, device) == CUDA_SUCCESS) {
      b->dmabuf[static_cast<size_t>(device)] = supported != 0;
    }
  }
}

// A knob of 0 or 1 (unset or empty: 0) into *on; false, with the reason in
// last_error(), when it holds anything else.
bool switch_knob(const courier_host_services_v1* host, const char* name, bool* on) {
  const char* value = host->get_env(host->ctx, name);
  *on = value != nullptr && *value != '\0' && std::strcmp(value, "0") != 0;
  if (!*on || std::strcmp(value, "1") == 0) return true;
  fail(-EINVAL, std::string(name) + "='" + value + "' is invalid: expected 0 or 1");
  return false;
}

int cuda_init(const courier_host_services_v1* host, void** backend) {
  if (host == nullptr || backend == nullptr) return fail(-EINVAL, "init: NULL argument");
  auto* b = new (std::nothrow) CudaBackend;
  if (b == nullptr) return fail(-ENOMEM, "init: out of memory");
  b->host = host;
  // The first runtime call loads the driver; without one it reports
  // cudaErrorInsufficientDriver or cudaErrorNoDevice, which is "no device",
  // not an init failure.
  cudaError_t rc = cudaGetDeviceCount(&b->device_count);
  if (rc != cudaSuccess) {
    b->device_count = 0;
    b->no_device_reason = std::string(cudaGetErrorString(rc)) + " (" + cudaGetErrorName(rc) + ")";
    cudaGetLastError();  // clear the sticky-free error so later calls start clean
  } else if (b->device_count == 0) {
    b->no_device_reason = "the CUDA driver reports no device";
  } else {
    bool timeline = false;
    if (!switch_knob(host, "COURIER_CUDA_EP_TIMELINE", &timeline) ||
        !switch_knob(host, "COURIER_CUDA_EP_GENERAL_KERNELS", &b->ep_general_kernels)) {
      delete b;
      return -EINVAL;
    }
    if (timeline) b->timeline.enable();
    find_dmabuf_support(b);
  }
  b->ep_streams = std::make_unique<courier::device::EpStreams<cudaStream_t>>(b->device_count);
  b->ep_shapes.resize(static_cast<size_t>(b->device_count));
  b->ep_counters = std::make_unique<courier::device::EpCounters<cudaEvent_t>>(b->device_count);
  *backend = b;
  return 0;
}

void cuda_fini(void* backend) {
  CudaBackend* b = as_backend(backend);
  for (cudaStream_t stream : b->ep_streams->own()) {
    if (stream != nullptr) cudaStreamDestroy(stream);
  }
  courier::device::destroy_ep_stamps<CudaEvents>(*b->ep_counters);
  delete b;
}

const char* cuda_last_error(void*) { return courier::cuda_gpu::last_error(); }

int cuda_query(void* backend, courier_gpu_props_v1* props) {
  if (props == nullptr || props->struct_size < sizeof(courier_gpu_props_v1)) {
    return fail(-EINVAL, "query: props is NULL or its struct_size is too small");
  }
  CudaBackend* b = as_backend(backend);
  int device = 0;
  if (b->device_count > 0) {
    if (int rc = default_device(b, &device); rc != 0) return rc;
  }
  props->device_count = static_cast<uint32_t>(b->device_count);
  props->warp_size = 32;
  props->mem_kind = COURIER_MEM_CUDA;
  props->caps = 0;
  props->device_name[0] = '\0';
  if (b->device_count > 0) {
    props->caps = COURIER_GPU_CAP_MAPPED_HOST | COURIER_GPU_CAP_IPC | COURIER_GPU_CAP_FIFO_KERNELS |
                  COURIER_GPU_CAP_GRAPHS | COURIER_GPU_CAP_EP_KERNELS | COURIER_GPU_CAP_EP_DIRECT |
                  COURIER_GPU_CAP_EP_PROXY | COURIER_GPU_CAP_EP_FP8_POW2 |
                  COURIER_GPU_CAP_EP_LOGFMT | COURIER_GPU_CAP_EP_FUSED |
                  COURIER_GPU_CAP_EP_LOCAL_ROWS | COURIER_GPU_CAP_EP_HT_FUSED |
                  COURIER_GPU_CAP_EP_COMBINE_FUSED | COURIER_GPU_CAP_EP_DONE_MARK;
    if (b->dmabuf[static_cast<size_t>(device)]) props->caps |= COURIER_GPU_CAP_DMABUF;
    cudaDeviceProp device_props{};
    if (cudaGetDeviceProperties(&device_props, device) == cudaSuccess) {
      const std::string name = device_props.name;  // cut to fit below
      std::snprintf(props->device_name, sizeof props->device_name, "%s", name.c_str());
    }
  }
  std::snprintf(props->no_device_reason, sizeof props->no_device_reason, "%s",
                b->no_device_reason.c_str());
  return 0;
}

int cuda_mem_alloc(void* backend, int device, size_t bytes, void** ptr) {
  if (ptr == nullptr) return fail(-EINVAL, "mem_alloc: output pointer is NULL");
  if (int rc = select_device(as_backend(backend), device); rc != 0) return rc;
  cudaError_t rc = cudaMalloc(ptr, bytes == 0 ? 1 : bytes);
  if (rc != cudaSuccess) {
    return fail(
        rc, "cudaMalloc(" + std::to_string(bytes) + " bytes) on device " + std::to_string(device));
  }
  // Device memory starts zeroed, like the host backend's. cudaMemset is
  // asynchronous for device memory, and the EP stream (non-blocking) is not
  // ordered after the default stream: wait, so that no kernel on another
  // stream sees the memory before it is zeroed.
  rc = cudaMemset(*ptr, 0, bytes);
  if (rc == cudaSuccess) rc = cudaStreamSynchronize(0);
  return rc == cudaSuccess ? 0 : fail(rc, "cudaMemset of a new allocation");
}

int cuda_mem_free(void* backend, int device, void* ptr) {
  if (ptr == nullptr) return 0;
  if (int rc = select_device(as_backend(backend), device); rc != 0) return rc;
  cudaError_t rc = cudaFree(ptr);
  return rc == cudaSuccess ? 0 : fail(rc, "cudaFree");
}

int cuda_host_alloc_mapped(void* backend, size_t bytes, void** host_ptr, void** device_ptr) {
  if (host_ptr == nullptr || device_ptr == nullptr) {
    return fail(-EINVAL, "host_alloc_mapped: NULL output pointer");
  }
  CudaBackend* b = as_backend(backend);
  if (b->device_count == 0) return fail(-ENODEV, "no CUDA device");
  int rank_device = 0;
  if (int rc = default_device(b, &rank_device); rc != 0) return rc;
  if (int rc = select_device(b, rank_device); rc != 0) return rc;
  // Portable: every device of the process maps it; mapped: at the same
  // address (unified addressing), which the device pointer confirms.
  cudaError_t rc =
      cudaHostAlloc(host_ptr, bytes == 0 ? 1 : bytes, cudaHostAllocMapped | cudaHostAllocPortable);
  if (rc != cudaSuccess) return fail(rc, "cudaHostAlloc(" + std::to_string(bytes) + " bytes)");
  std::memset(*host_ptr, 0, bytes);
  rc = cudaHostGetDevicePointer(device_ptr, *host_ptr, 0);
  if (rc != cudaSuccess) {
    cudaFreeHost(*host_ptr);
    return fail(rc, "cudaHostGetDevicePointer");
  }
  return 0;
}

int cuda_host_free_mapped(void*, void* host_ptr) {
  if (host_ptr == nullptr) return 0;
  cudaError_t rc = cudaFreeHost(host_ptr);
  return rc == cudaSuccess ? 0 : fail(rc, "cudaFreeHost");
}

// The device that owns `ptr`, or -1 for host memory.
int device_of(const void* ptr) {
  cudaPointerAttributes attributes{};
  if (cudaPointerGetAttributes(&attributes, ptr) != cudaSuccess) {
    cudaGetLastError();
    return -1;
  }
  return attributes.type == cudaMemoryTypeDevice ? attributes.device : -1;
}

int cuda_memcpy(void* backend, void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return 0;
  if (dst == nullptr || src == nullptr) return fail(-EINVAL, "memcpy: NULL pointer");
  // On the device that owns the memory, so no context is made elsewhere.
  CudaBackend* b = as_backend(backend);
  int device = device_of(dst);
  if (device < 0) device = device_of(src);
  if (device < 0) {
    if (int rc = default_device(b, &device); rc != 0) return rc;
  }
  if (int rc = select_device(b, device); rc != 0) return rc;
  // cudaMemcpy from pageable host memory to the device returns before the
  // data lands when it is 64 KiB or less (the CUDA programming guide's
  // "asynchronous with respect to the host"), and kernels on the EP stream
  // (non-blocking: not ordered after the default stream) could read the old
  // bytes. memcpy_sync promises a finished copy: wait for the default stream.
  cudaError_t rc = cudaMemcpy(dst, src, bytes, cudaMemcpyDefault);
  if (rc == cudaSuccess) rc = cudaStreamSynchronize(0);
  b->ep_counters->waited(device);
  return rc == cudaSuccess ? 0 : fail(rc, "cudaMemcpy(" + std::to_string(bytes) + " bytes)");
}

int cuda_launch_host_kernel(void*, const courier_host_kernel_launch_v1*) {
  return fail(-ENOTSUP, "gpu-cuda runs device kernels, not host kernels");
}

int cuda_ipc_export(void*, void* ptr, courier_gpu_ipc_handle_v1* handle) {
  if (ptr == nullptr || handle == nullptr) return fail(-EINVAL, "ipc_export: NULL argument");
  static_assert(sizeof(cudaIpcMemHandle_t) <= sizeof handle->bytes);
  cudaIpcMemHandle_t h{};
  cudaError_t rc = cudaIpcGetMemHandle(&h, ptr);
  if (rc != cudaSuccess) return fail(rc, "cudaIpcGetMemHandle");
  std::memset(handle->bytes, 0, sizeof handle->bytes);
  std::memcpy(handle->bytes, &h, sizeof h);
  return 0;
}

int cuda_ipc_import(void* backend, int device, const courier_gpu_ipc_handle_v1* handle,
                    void** ptr) {
  if (ptr == nullptr || handle == nullptr) return fail(-EINVAL, "ipc_import: NULL argument");
  if (int rc = select_device(as_backend(backend), device); rc != 0) return rc;
  cudaIpcMemHandle_t h{};
  std::memcpy(&h, handle->bytes, sizeof h);
  cudaError_t rc = cudaIpcOpenMemHandle(ptr, h, cudaIpcMemLazyEnablePeerAccess);
  return rc == cudaSuccess ? 0
                           : fail(rc, "cudaIpcOpenMemHandle on device " + std::to_string(device));
}

int cuda_ipc_close(void*, void* ptr) {
  cudaError_t rc = cudaIpcCloseMemHandle(ptr);
  return rc == cudaSuccess ? 0 : fail(rc, "cudaIpcCloseMemHandle");
}

std::string hex(uintptr_t address) {
  char text[24];
  std::snprintf(text, sizeof text, "0x%llx", static_cast<unsigned long long>(address));
  return text;
}

// "CUDA_ERROR_INVALID_VALUE", or the number when the driver cannot name it.
std::string driver_error(const CudaBackend* b, CUresult rc) {
  const char* name = nullptr;
  if (b->get_error_name != nullptr && b->get_error_name(rc, &name) == CUDA_SUCCESS &&
      name != nullptr) {
    return name;
  }
  return "CUresult " + std::to_string(static_cast<int>(rc));
}

// The dmabuf covers the host pages holding [ptr, ptr + bytes): the driver
// exports page-aligned ranges only. *offset is ptr's offset from the first
// page.
int cuda_dmabuf_export(void* backend, void* ptr, size_t bytes, int* fd, uint64_t* offset) {
  const CudaBackend* b = as_backend(backend);
  if (ptr == nullptr || fd == nullptr || offset == nullptr || bytes == 0) {
    return fail(-EINVAL, "dmabuf_export: NULL argument or zero size");
  }
  const auto address = reinterpret_cast<uintptr_t>(ptr);
  const std::string range = "[" + hex(address) + ", +" + std::to_string(bytes) + ")";
  if (bytes > UINTPTR_MAX - address) {
    return fail(-EINVAL, "dmabuf_export: " + range + " wraps around the address space");
  }
  cudaPointerAttributes attributes{};
  if (cudaPointerGetAttributes(&attributes, ptr) != cudaSuccess) {
    cudaGetLastError();  // an unknown pointer is host memory; clear the error
    attributes.type = cudaMemoryTypeUnregistered;
  }
  if (attributes.type != cudaMemoryTypeDevice) {
    return fail(-EOPNOTSUPP, "dmabuf_export: " + range +
                                 " is not CUDA device memory (host or managed memory is "
                                 "not exported)");
  }
  const int device = attributes.device;
  if (device < 0 || device >= b->device_count || !b->dmabuf[static_cast<size_t>(device)]) {
    return fail(-EOPNOTSUPP, "dmabuf_export: CUDA device " + std::to_string(device) +
                                 " cannot export dmabuf: " + b->no_dmabuf_reason);
  }
  if (int rc = select_device(b, device); rc != 0) return rc;
  CUdeviceptr base = 0;
  size_t size = 0;
  CUresult rc = b->get_address_range(&base, &size, static_cast<CUdeviceptr>(address));
  if (rc != CUDA_SUCCESS) {
    return fail(-EINVAL, "dmabuf_export: cuMemGetAddressRange(" + hex(address) +
                             ") found no allocation: " + driver_error(b, rc));
  }
  if (address + bytes > base + size) {
    return fail(-EINVAL, "dmabuf_export: " + range + " runs past the end of its allocation [" +
                             hex(base) + ", +" + std::to_string(size) + ")");
  }
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t start = address & ~(page - 1);
  const uintptr_t end = (address + bytes + page - 1) & ~(page - 1);
  int handle = -1;
  rc = b->get_handle_for_range(&handle, static_cast<CUdeviceptr>(start), end - start,
                               CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0);
  if (rc != CUDA_SUCCESS) {
    const int status = rc == CUDA_ERROR_NOT_SUPPORTED   ? -EOPNOTSUPP
                       : rc == CUDA_ERROR_INVALID_VALUE ? -EINVAL
                                                        : -EIO;
    return fail(status, "dmabuf_export: cuMemGetHandleForAddressRange([" + hex(start) + ", +" +
                            std::to_string(end - start) + ") on device " + std::to_string(device) +
                            "): " + driver_error(b, rc));
  }
  *fd = handle;
  *offset = address - start;
  return 0;
}

int cuda_run_fifo_producers(void*, courier_gpu_fifo_producers_v1* job) {
  return courier::cuda_gpu::run_fifo_producers(job);
}

int cuda_run_fifo_round_trips(void*, courier_gpu_fifo_round_trips_v1* job) {
  return courier::cuda_gpu::run_fifo_round_trips(job);
}

int cuda_run_command_lists(void*, courier_gpu_command_lists_v1* job) {
  return courier::cuda_gpu::run_command_lists(job);
}

int cuda_run_ep_layout(void* backend, const courier_gpu_ep_layout_v1* job) {
  const int rc = courier::cuda_gpu::run_ep_layout(job);
  if (rc == 0 && job->num_tokens > 0) {  // a kernel, then a wait for it
    as_backend(backend)->ep_counters->launched(job->device, 1);
    as_backend(backend)->ep_counters->waited(job->device);
  }
  return rc;
}

// The EP stream of `device` (the caller's where one was chosen: NULL is
// CUDA's default stream), the device current on this thread; *ok false
// after fail(). Making the backend's own stream also asks the device's
// launch shape (ep_shapes, written under the streams' lock: read after).
cudaStream_t ep_stream(void* backend, int device, bool* ok) {
  CudaBackend* b = as_backend(backend);
  cudaStream_t stream = nullptr;
  auto make = [b](int d, cudaStream_t* made) {
    return courier::cuda_gpu::make_ep_stream(d, made, &b->ep_shapes[static_cast<size_t>(d)]);
  };
  *ok = select_device(b, device) == 0 && b->ep_streams->get(device, make, &stream);
  return stream;
}

int cuda_ep_set_stream(void* backend, int device, int caller, void* stream) {
  CudaBackend* b = as_backend(backend);
  if (caller != 0 && caller != 1) {
    return fail(-EINVAL, "ep_set_stream: caller must be 0 (the backend's stream) or 1, got " +
                             std::to_string(caller));
  }
  if (select_device(b, device) != 0) return -ENODEV;
  b->ep_streams->choose(device, caller == 1, static_cast<cudaStream_t>(stream));
  return 0;
}

int cuda_ep_stream_capturing(void* backend, int device, int* capturing) {
  if (capturing == nullptr) return fail(-EINVAL, "ep_stream_capturing: capturing is NULL");
  bool ok = false;
  cudaStream_t stream = ep_stream(backend, device, &ok);
  if (!ok) return -EIO;
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  const cudaError_t rc = cudaStreamIsCapturing(stream, &status);
  if (rc != cudaSuccess) return fail(rc, "asking whether the EP stream is being captured");
  *capturing = status != cudaStreamCaptureStatusNone ? 1 : 0;
  return 0;
}

int cuda_ep_copy(void* backend, int device, void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return 0;
  if (dst == nullptr || src == nullptr) return fail(-EINVAL, "ep_copy: dst or src is NULL");
  bool ok = false;
  cudaStream_t stream = ep_stream(backend, device, &ok);
  if (!ok) return -EIO;
  const cudaError_t rc = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream);
  return rc == cudaSuccess ? 0 : fail(rc, "copying on the EP stream (ep_copy)");
}

// One entry point per EP kernel: the job's device's EP stream, the kernel
// in the timeline under `Name`.
// A job's label in the timeline: its entry's name, except a combine send
// that also reduces (GPU ABI 1.17), which is the whole combine.
template <class Job>
const char* timeline_name(const Job*, const char* name) {
  return name;
}
const char* timeline_name(const courier_gpu_ep_combine_send_v1* job, const char* name) {
  const bool fused =
      job->struct_size >= offsetof(courier_gpu_ep_combine_send_v1, reduce) + sizeof job->reduce &&
      job->reduce != nullptr;
  return fused ? "combine" : name;
}

// A direct-path job on the device's EP stream (`enqueue` launches its
// kernel), in the timeline and the counters.
template <class Job, class Enqueue>
int enqueue_direct(void* backend, const Job* job, const char* name, Enqueue enqueue) {
  if (job == nullptr) return fail(-EINVAL, "EP kernel: job is NULL");
  bool ok = false;
  cudaStream_t stream = ep_stream(backend, job->device, &ok);
  if (!ok) return -EIO;
  CudaBackend* b = as_backend(backend);
  courier::cuda_gpu::EpTimeline& timeline = b->timeline;
  timeline.begin(stream);
  const int rc = enqueue(stream, timeline, b->ep_shapes[static_cast<size_t>(job->device)]);
  timeline.mark(stream, timeline_name(job, name));
  if (rc == 0) as_backend(backend)->ep_counters->launched(job->device, 1);  // one kernel each
  return rc;
}
using courier::device::ep::LaunchShape;
template <class Job,
          int (*Enqueue)(const Job*, cudaStream_t, courier::cuda_gpu::EpTimeline&,
                         const LaunchShape&),
          const char* Name>
int enqueue_ep(void* backend, const Job* job) {
  return enqueue_direct(backend, job, Name,
                        [&](cudaStream_t stream, auto& timeline, const LaunchShape& shape) {
                          return Enqueue(job, stream, timeline, shape);
                        });
}
// The low-latency dispatch and receive, which also take the general kernel
// instance when COURIER_CUDA_EP_GENERAL_KERNELS=1.
template <class Job,
          int (*Enqueue)(const Job*, cudaStream_t, courier::cuda_gpu::EpTimeline&,
                         const LaunchShape&, bool),
          const char* Name>
int enqueue_ll(void* backend, const Job* job) {
  const bool general = as_backend(backend)->ep_general_kernels;
  return enqueue_direct(backend, job, Name,
                        [&](cudaStream_t stream, auto& timeline, const LaunchShape& shape) {
                          return Enqueue(job, stream, timeline, shape, general);
                        });
}
constexpr char kRoute[] = "route", kSignal[] = "signal", kWait[] = "wait",
               kHtDispatchDirect[] = "ht_dispatch", kLlDispatchDirect[] = "ll_dispatch",
               kLlReceiveDirect[] = "ll_receive", kCombineSend[] = "combine_send",
               kReduceDirect[] = "reduce";

// A proxy-path job on the device's EP stream, its kernels in the timeline.
template <class Job, const char* Name>
int enqueue_proxy(void* backend, const Job* job) {
  if (job == nullptr) return fail(-EINVAL, "EP kernel: job is NULL");
  bool ok = false;
  cudaStream_t stream = ep_stream(backend, job->device, &ok);
  if (!ok) return -EIO;
  uint32_t kernels = 0;
  const int rc =
      courier::cuda_gpu::ep_proxy(job, stream, as_backend(backend)->timeline, Name, &kernels);
  if (rc == 0) as_backend(backend)->ep_counters->launched(job->device, kernels);
  return rc;
}
constexpr char kRefuse[] = "refuse", kHtDispatch[] = "ht_dispatch", kHtReceive[] = "ht_receive",
               kLlDispatch[] = "ll_dispatch", kLlReceive[] = "ll_receive", kCombine[] = "combine",
               kReduce[] = "reduce";

int cuda_ep_sync(void* backend, int device) {
  bool ok = false;
  cudaStream_t stream = ep_stream(backend, device, &ok);
  if (!ok) return -EIO;
  const cudaError_t rc = cudaStreamSynchronize(stream);
  as_backend(backend)->ep_counters->waited(device);
  if (rc == cudaSuccess) as_backend(backend)->timeline.synced();
  return rc == cudaSuccess ? 0 : fail(rc, "waiting for the EP stream");
}

int cuda_ep_counters(void* backend, int device, courier_gpu_ep_counters_v1* out) {
  return courier::device::read_ep_counters<CudaEvents>(*as_backend(backend)->ep_counters, device,
                                                       out);
}

// Stamps are CUDA events on the EP stream (made at the first stamp).
int cuda_ep_stamp(void* backend, int device, uint32_t slot) {
  return courier::device::record_ep_stamp<CudaEvents>(*as_backend(backend)->ep_counters, device,
                                                      slot, [&](cudaStream_t* stream) {
                                                        bool ok = false;
                                                        *stream = ep_stream(backend, device, &ok);
                                                        return ok;
                                                      });
}

int cuda_ep_stamp_elapsed(void* backend, int device, uint64_t* ns) {
  CudaBackend* b = as_backend(backend);
  if (int rc = select_device(b, device); rc != 0) return rc;  // says why
  return courier::device::ep_stamp_elapsed_ns<CudaEvents>(*b->ep_counters, device, ns);
}

// A spin on the EP stream (benchmarks: the stamps behind it time the GPU
// alone); not one of the EP calls' kernels, so not counted.
int cuda_ep_hold(void* backend, int device, uint32_t microseconds) {
  bool ok = false;
  cudaStream_t stream = ep_stream(backend, device, &ok);
  if (!ok) return -EIO;
  return courier::cuda_gpu::ep_hold(microseconds, stream);
}

constexpr courier_knob_v1 kKnobs[] = {
    {"COURIER_CUDA_EP_TIMELINE", "0", "0|1",
     "1: time every EP proxy-path kernel with CUDA events and print the medians per kernel and "
     "per call to stderr when the backend unloads (for tuning; adds an event per kernel)"},
    {"COURIER_CUDA_EP_GENERAL_KERNELS", "0", "0|1",
     "1: the low-latency dispatch and receive run the general instance of their kernel for "
     "every job instead of the one made for the job's configuration (for comparison and "
     "testing: the general one is slower)"},
};

constexpr courier_gpu_runtime_part_v1 kRuntime = {
    sizeof(courier_gpu_runtime_part_v1),
    0,
    cuda_mem_alloc,
    cuda_mem_free,
    cuda_host_alloc_mapped,
    cuda_host_free_mapped,
    cuda_memcpy,
    cuda_launch_host_kernel,
    cuda_ipc_export,
    cuda_ipc_import,
    cuda_ipc_close,
    cuda_dmabuf_export,
};

constexpr courier_gpu_selftest_part_v1 kSelftest = {
    sizeof(courier_gpu_selftest_part_v1),
    0,
    cuda_run_fifo_producers,
    cuda_run_fifo_round_trips,
    cuda_run_command_lists,
};

constexpr courier_gpu_ep_part_v1 kEp = {
    sizeof(courier_gpu_ep_part_v1),
    0,
    cuda_run_ep_layout,
    enqueue_ep<courier_gpu_ep_route_v1, courier::cuda_gpu::ep_route, kRoute>,
    enqueue_ep<courier_gpu_ep_signal_v1, courier::cuda_gpu::ep_signal, kSignal>,
    enqueue_ep<courier_gpu_ep_wait_v1, courier::cuda_gpu::ep_wait, kWait>,
    enqueue_ep<courier_gpu_ep_ht_dispatch_v1, courier::cuda_gpu::ep_ht_dispatch, kHtDispatchDirect>,
    enqueue_ll<courier_gpu_ep_ll_dispatch_v1, courier::cuda_gpu::ep_ll_dispatch, kLlDispatchDirect>,
    enqueue_ll<courier_gpu_ep_ll_receive_v1, courier::cuda_gpu::ep_ll_receive, kLlReceiveDirect>,
    enqueue_ep<courier_gpu_ep_combine_send_v1, courier::cuda_gpu::ep_combine_send, kCombineSend>,
    enqueue_ep<courier_gpu_ep_reduce_v1, courier::cuda_gpu::ep_reduce, kReduceDirect>,
    cuda_ep_sync,
    enqueue_proxy<courier_gpu_ep_proxy_refuse_v1, kRefuse>,
    enqueue_proxy<courier_gpu_ep_proxy_ht_dispatch_v1, kHtDispatch>,
    enqueue_proxy<courier_gpu_ep_proxy_ht_receive_v1, kHtReceive>,
    enqueue_proxy<courier_gpu_ep_proxy_ll_dispatch_v1, kLlDispatch>,
    enqueue_proxy<courier_gpu_ep_proxy_ll_receive_v1, kLlReceive>,
    enqueue_proxy<courier_gpu_ep_proxy_combine_v1, kCombine>,
    enqueue_proxy<courier_gpu_ep_proxy_reduce_v1, kReduce>,
    cuda_ep_set_stream,
    cuda_ep_stream_capturing,
    cuda_ep_copy,
    cuda_ep_counters,
    cuda_ep_stamp,
    cuda_ep_stamp_elapsed,
    cuda_ep_hold,
};

constexpr courier_gpu_plugin_v1 kPlugin = courier::device::plugin_table(
    {"cuda", "NVIDIA GPUs through the CUDA runtime (driver loaded on first use)", kKnobs,
     sizeof kKnobs / sizeof kKnobs[0], cuda_init, cuda_fini, cuda_last_error, cuda_query},
    kRuntime, &kSelftest, &kEp);

}  // namespace

extern "C" __attribute__((visibility("default"))) const courier_gpu_plugin_v1*
courier_gpu_backend_v1(void) {
  return &kPlugin;
}
