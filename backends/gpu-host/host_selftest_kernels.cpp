#include "host_selftest_kernels.hpp"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <vector>

#include "gpu/channel_descriptor.hpp"
#include "gpu/fifo_selftest.hpp"
#include "host_kernel_launch.hpp"

namespace courier::host_gpu {

namespace {

struct ProducersArgs {
  std::vector<DeviceChannel> channels;
  const courier_gpu_fifo_producers_v1* job;
  std::atomic<int> status{0};
  std::atomic<uint64_t> first_ns{~0ull};
  std::atomic<uint64_t> last_ns{0};
};

void producers_kernel(const courier_host_thread_v1* thread, void* arg) {
  auto* a = static_cast<ProducersArgs*>(arg);
  const uint32_t producer = thread->block_idx * thread->block_dim + thread->thread_idx;
  const DeviceChannel& ch = a->channels[thread->block_idx % a->channels.size()];
  uint64_t start = device::now_ns();
  uint64_t seen = a->first_ns.load();
  while (start < seen && !a->first_ns.compare_exchange_weak(seen, start)) {
  }
  PushStatus status =
      device::selftest_produce(ch, producer, a->job->commands_per_thread, a->job->dst_rank,
                               a->job->mode == COURIER_GPU_PUSH_WARP);
  int expected = 0;
  if (status != PushStatus::ok)
    a->status.compare_exchange_strong(expected, static_cast<int>(status));
  uint64_t end = device::now_ns();
  seen = a->last_ns.load();
  while (end > seen && !a->last_ns.compare_exchange_weak(seen, end)) {
  }
}

struct RoundTripArgs {
  const courier_gpu_fifo_round_trips_v1* job;
  int status = 0;
};

void round_trips_kernel(const courier_host_thread_v1*, void* arg) {
  auto* a = static_cast<RoundTripArgs*>(arg);
  const courier_gpu_fifo_round_trips_v1& job = *a->job;
  const DeviceChannel ch = from_abi(job.channel);
  PushStatus status = job.mode == COURIER_GPU_ROUND_TRIP_COMMAND
                          ? device::selftest_command_round_trips(ch, job.iterations, job.samples)
                          : device::selftest_flag_round_trips(
                                job.ping, job.pong, job.iterations, job.samples,
                                ch.timeout_ns != 0 ? ch.timeout_ns : 60'000'000'000ull);
  a->status = static_cast<int>(status);
}

void command_lists_kernel(const courier_host_thread_v1* thread, void* arg) {
  auto* job = static_cast<courier_gpu_command_lists_v1*>(arg);
  courier_gpu_command_list_v1& list = job->lists[thread->block_idx];
  list.push_status = static_cast<int>(device::push_command_list(
      from_abi(list.channel), static_cast<const TransferCmd*>(list.commands), list.count));
}

courier_host_kernel_launch_v1 launch_of(uint32_t grid, uint32_t block, courier_host_kernel_fn fn,
                                        void* arg) {
  courier_host_kernel_launch_v1 launch{};
  launch.struct_size = sizeof launch;
  launch.grid_dim = grid;
  launch.block_dim = block;
  launch.fn = fn;
  launch.arg = arg;
  return launch;
}

}  // namespace

int run_fifo_producers(courier_gpu_fifo_producers_v1* job, std::string* error) {
  if (job == nullptr || job->struct_size < sizeof *job || job->channels == nullptr ||
      job->num_channels == 0) {
    *error = "run_fifo_producers: job is NULL, too small or has no channels";
    return -EINVAL;
  }
  if (job->commands_per_thread > 0xFFFFFFFFull) {
    *error = "run_fifo_producers: commands_per_thread exceeds 32 bits";
    return -EINVAL;
  }
  if (job->use_graph != 0) {
    *error = "run_fifo_producers: the host backend has no graphs";
    return -ENOTSUP;
  }
  ProducersArgs args;
  args.job = job;
  for (uint32_t c = 0; c < job->num_channels; ++c) {
    args.channels.push_back(from_abi(job->channels[c]));
  }
  int rc = launch_host_kernel(launch_of(job->blocks, job->threads, producers_kernel, &args), error);
  if (rc != 0) return rc;
  job->push_status = args.status.load();
  job->elapsed_ns = args.last_ns > args.first_ns ? args.last_ns - args.first_ns : 0;
  return 0;
}

int run_fifo_round_trips(courier_gpu_fifo_round_trips_v1* job, std::string* error) {
  if (job == nullptr || job->struct_size < sizeof *job || job->samples == nullptr ||
      job->iterations == 0) {
    *error = "run_fifo_round_trips: job is NULL, too small, or has no samples";
    return -EINVAL;
  }
  if (job->mode != COURIER_GPU_ROUND_TRIP_COMMAND &&
      (job->mode != COURIER_GPU_ROUND_TRIP_FLAG || job->ping == nullptr || job->pong == nullptr)) {
    *error = "run_fifo_round_trips: unknown mode, or FLAG mode without ping and pong";
    return -EINVAL;
  }
  RoundTripArgs args;
  args.job = job;
  int rc = launch_host_kernel(launch_of(1, 1, round_trips_kernel, &args), error);
  if (rc != 0) return rc;
  job->push_status = args.status;
  return 0;
}

int run_command_lists(courier_gpu_command_lists_v1* job, std::string* error) {
  if (job == nullptr || job->struct_size < sizeof *job || job->lists == nullptr ||
      job->num_lists == 0) {
    *error = "run_command_lists: job is NULL, too small or has no lists";
    return -EINVAL;
  }
  for (uint32_t i = 0; i < job->num_lists; ++i) {
    if (job->lists[i].count > 0 && job->lists[i].commands == nullptr) {
      *error = "run_command_lists: list " + std::to_string(i) + " has no commands";
      return -EINVAL;
    }
  }
  return launch_host_kernel(launch_of(job->num_lists, 1, command_lists_kernel, job), error);
}

}  // namespace courier::host_gpu
