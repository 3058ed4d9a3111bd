// The FIFO self-test and benchmark kernels: gpu/fifo_selftest.hpp's bodies
// in HIP kernels, launched and waited for on a private stream.
#include "hip_selftest_kernels.hpp"

#include <hip/hip_runtime.h>

#include <cerrno>
#include <string>
#include <vector>

#include "gpu/channel_descriptor.hpp"
#include "gpu/fifo_selftest.hpp"
#include "hip_status.hpp"

namespace courier::hip_gpu {

namespace {

struct ProducerResult {
  int status;
  unsigned long long first_ns;
  unsigned long long last_ns;
};

__global__ void producers_kernel(const DeviceChannel* channels, uint32_t num_channels,
                                 uint64_t count, uint32_t dst_rank, bool warp_mode,
                                 ProducerResult* result) {
  const uint32_t producer = blockIdx.x * blockDim.x + threadIdx.x;
  const DeviceChannel ch = channels[blockIdx.x % num_channels];
  atomicMin(&result->first_ns, static_cast<unsigned long long>(device::now_ns()));
  PushStatus status = device::selftest_produce(ch, producer, count, dst_rank, warp_mode);
  if (status != PushStatus::ok) atomicCAS(&result->status, 0, static_cast<int>(status));
  atomicMax(&result->last_ns, static_cast<unsigned long long>(device::now_ns()));
}

__global__ void command_round_trips_kernel(DeviceChannel ch, uint32_t iterations, uint64_t* samples,
                                           int* status) {
  *status = static_cast<int>(device::selftest_command_round_trips(ch, iterations, samples));
}

__global__ void flag_round_trips_kernel(uint64_t* ping, const uint64_t* pong, uint32_t iterations,
                                        uint64_t* samples, uint64_t timeout_ns, int* status) {
  *status = static_cast<int>(
      device::selftest_flag_round_trips(ping, pong, iterations, samples, timeout_ns));
}

struct DeviceCommandList {
  DeviceChannel channel;
  const TransferCmd* commands;
  uint32_t count;
  int status;
};

__global__ void command_lists_kernel(DeviceCommandList* lists) {
  DeviceCommandList& list = lists[blockIdx.x];
  list.status =
      static_cast<int>(device::push_command_list(list.channel, list.commands, list.count));
}

// A stream, device scratch memory and (when captured) a graph, released on
// every path.
class Launch {
 public:
  Launch() = default;
  Launch(const Launch&) = delete;
  Launch& operator=(const Launch&) = delete;
  ~Launch() {
    if (scratch_ != nullptr) (void)hipFree(scratch_);
    if (exec_ != nullptr) (void)hipGraphExecDestroy(exec_);
    if (graph_ != nullptr) (void)hipGraphDestroy(graph_);
    if (stream_ != nullptr) (void)hipStreamDestroy(stream_);
  }
  int begin(int device, size_t scratch_bytes) {
    hipError_t rc = hipSetDevice(device);
    if (rc != hipSuccess) return fail(rc, "hipSetDevice(" + std::to_string(device) + ")");
    rc = hipStreamCreateWithFlags(&stream_, hipStreamNonBlocking);
    if (rc != hipSuccess) return fail(rc, "hipStreamCreateWithFlags");
    rc = hipMalloc(&scratch_, scratch_bytes);
    if (rc != hipSuccess) return fail(rc, "hipMalloc of kernel scratch");
    return 0;
  }
  hipStream_t stream() const { return stream_; }
  template <class T>
  T* scratch(size_t offset) const {
    return reinterpret_cast<T*>(static_cast<char*>(scratch_) + offset);
  }
  int start_capture() {
    hipError_t rc = hipStreamBeginCapture(stream_, hipStreamCaptureModeThreadLocal);
    return rc == hipSuccess ? 0 : fail(rc, "hipStreamBeginCapture");
  }
  // Ends the capture and launches the graph.
  int launch_captured() {
    hipError_t rc = hipStreamEndCapture(stream_, &graph_);
    if (rc != hipSuccess) return fail(rc, "hipStreamEndCapture");
    rc = hipGraphInstantiate(&exec_, graph_, nullptr, nullptr, 0);
    if (rc != hipSuccess) return fail(rc, "hipGraphInstantiate");
    rc = hipGraphLaunch(exec_, stream_);
    return rc == hipSuccess ? 0 : fail(rc, "hipGraphLaunch");
  }
  int finish(const char* kernel) {
    hipError_t rc = hipGetLastError();
    if (rc == hipSuccess) rc = hipStreamSynchronize(stream_);
    return rc == hipSuccess ? 0 : fail(rc, std::string("running ") + kernel);
  }

 private:
  hipStream_t stream_ = nullptr;
  void* scratch_ = nullptr;
  hipGraph_t graph_ = nullptr;
  hipGraphExec_t exec_ = nullptr;
};

}  // namespace

int run_fifo_producers(courier_gpu_fifo_producers_v1* job) {
  if (job == nullptr || job->struct_size < sizeof *job) {
    return fail(-EINVAL, "run_fifo_producers: job is NULL or its struct_size is too small");
  }
  if (job->channels == nullptr || job->num_channels == 0 || job->blocks == 0 || job->threads == 0 ||
      job->threads > 1024) {
    return fail(-EINVAL, "run_fifo_producers: need channels, blocks >= 1 and 1..1024 threads");
  }
  if (job->commands_per_thread > 0xFFFFFFFFull) {
    return fail(-EINVAL, "run_fifo_producers: commands_per_thread exceeds 32 bits");
  }
  std::vector<DeviceChannel> channels;
  for (uint32_t c = 0; c < job->num_channels; ++c) {
    channels.push_back(from_abi(job->channels[c]));
  }
  const size_t channels_bytes = channels.size() * sizeof(DeviceChannel);
  const size_t result_offset = (channels_bytes + 255) / 256 * 256;
  Launch launch;
  if (int rc = launch.begin(job->device, result_offset + sizeof(ProducerResult)); rc != 0) {
    return rc;
  }
  auto* d_channels = launch.scratch<DeviceChannel>(0);
  auto* d_result = launch.scratch<ProducerResult>(result_offset);
  ProducerResult initial{0, ~0ull, 0};
  hipError_t rc = hipMemcpy(d_channels, channels.data(), channels_bytes, hipMemcpyHostToDevice);
  if (rc == hipSuccess) rc = hipMemcpy(d_result, &initial, sizeof initial, hipMemcpyHostToDevice);
  if (rc != hipSuccess) return fail(rc, "copying the producer job to the device");
  const bool warp_mode = job->mode == COURIER_GPU_PUSH_WARP;
  if (job->use_graph != 0) {
    if (int status = launch.start_capture(); status != 0) return status;
  }
  producers_kernel<<<job->blocks, job->threads, 0, launch.stream()>>>(
      d_channels, job->num_channels, job->commands_per_thread, job->dst_rank, warp_mode, d_result);
  if (job->use_graph != 0) {
    if (int status = launch.launch_captured(); status != 0) return status;
  }
  if (int status = launch.finish("the FIFO producer kernel"); status != 0) return status;
  ProducerResult result{};
  rc = hipMemcpy(&result, d_result, sizeof result, hipMemcpyDeviceToHost);
  if (rc != hipSuccess) return fail(rc, "reading the producer kernel's result");
  job->push_status = result.status;
  job->elapsed_ns = result.last_ns > result.first_ns ? result.last_ns - result.first_ns : 0;
  return 0;
}

int run_fifo_round_trips(courier_gpu_fifo_round_trips_v1* job) {
  if (job == nullptr || job->struct_size < sizeof *job) {
    return fail(-EINVAL, "run_fifo_round_trips: job is NULL or its struct_size is too small");
  }
  if (job->samples == nullptr || job->iterations == 0) {
    return fail(-EINVAL, "run_fifo_round_trips: need samples and iterations >= 1");
  }
  if (job->mode != COURIER_GPU_ROUND_TRIP_COMMAND && job->mode != COURIER_GPU_ROUND_TRIP_FLAG) {
    return fail(-EINVAL, "run_fifo_round_trips: unknown mode " + std::to_string(job->mode));
  }
  if (job->mode == COURIER_GPU_ROUND_TRIP_FLAG && (job->ping == nullptr || job->pong == nullptr)) {
    return fail(-EINVAL, "run_fifo_round_trips: FLAG mode needs ping and pong");
  }
  Launch launch;
  if (int rc = launch.begin(job->device, sizeof(int)); rc != 0) return rc;
  int* d_status = launch.scratch<int>(0);
  const DeviceChannel ch = from_abi(job->channel);
  if (job->mode == COURIER_GPU_ROUND_TRIP_COMMAND) {
    command_round_trips_kernel<<<1, 1, 0, launch.stream()>>>(ch, job->iterations, job->samples,
                                                             d_status);
  } else {
    const uint64_t timeout_ns =
        job->channel.timeout_ns != 0 ? job->channel.timeout_ns : 60'000'000'000ull;
    flag_round_trips_kernel<<<1, 1, 0, launch.stream()>>>(job->ping, job->pong, job->iterations,
                                                          job->samples, timeout_ns, d_status);
  }
  if (int status = launch.finish("the round-trip kernel"); status != 0) return status;
  int status = 0;
  hipError_t rc = hipMemcpy(&status, d_status, sizeof status, hipMemcpyDeviceToHost);
  if (rc != hipSuccess) return fail(rc, "reading the round-trip kernel's status");
  job->push_status = status;
  return 0;
}

int run_command_lists(courier_gpu_command_lists_v1* job) {
  if (job == nullptr || job->struct_size < sizeof *job || job->lists == nullptr ||
      job->num_lists == 0) {
    return fail(-EINVAL, "run_command_lists: job is NULL, too small or has no lists");
  }
  // One device buffer: the list descriptors, then every list's commands.
  const size_t lists_bytes = job->num_lists * sizeof(DeviceCommandList);
  const size_t commands_offset = (lists_bytes + 15) / 16 * 16;
  size_t commands = 0;
  for (uint32_t i = 0; i < job->num_lists; ++i) {
    if (job->lists[i].count > 0 && job->lists[i].commands == nullptr) {
      return fail(-EINVAL, "run_command_lists: list " + std::to_string(i) + " has no commands");
    }
    commands += job->lists[i].count;
  }
  Launch launch;
  if (int rc = launch.begin(job->device, commands_offset + commands * sizeof(TransferCmd));
      rc != 0) {
    return rc;
  }
  auto* d_lists = launch.scratch<DeviceCommandList>(0);
  auto* d_commands = launch.scratch<TransferCmd>(commands_offset);
  std::vector<DeviceCommandList> lists(job->num_lists);
  size_t at = 0;
  for (uint32_t i = 0; i < job->num_lists; ++i) {
    lists[i] = {from_abi(job->lists[i].channel), d_commands + at, job->lists[i].count, 0};
    hipError_t rc = hipMemcpy(d_commands + at, job->lists[i].commands,
                              job->lists[i].count * sizeof(TransferCmd), hipMemcpyHostToDevice);
    if (rc != hipSuccess) return fail(rc, "copying command list " + std::to_string(i));
    at += job->lists[i].count;
  }
  hipError_t rc = hipMemcpy(d_lists, lists.data(), lists_bytes, hipMemcpyHostToDevice);
  if (rc != hipSuccess) return fail(rc, "copying the command lists");
  command_lists_kernel<<<job->num_lists, 1, 0, launch.stream()>>>(d_lists);
  if (int status = launch.finish("the command-list kernel"); status != 0) return status;
  rc = hipMemcpy(lists.data(), d_lists, lists_bytes, hipMemcpyDeviceToHost);
  if (rc != hipSuccess) return fail(rc, "reading the command lists' status");
  for (uint32_t i = 0; i < job->num_lists; ++i) job->lists[i].push_status = lists[i].status;
  return 0;
}

}  // namespace courier::hip_gpu
