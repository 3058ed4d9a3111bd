#include "host_kernel_launch.hpp"

#include <pthread.h>
#include <sched.h>
#include <sys/prctl.h>

#include <atomic>
#include <barrier>
#include <cerrno>
#include <latch>
#include <memory>
#include <system_error>
#include <thread>
#include <vector>

namespace courier::host_gpu {

namespace {

struct Block {
  explicit Block(uint32_t threads) : barrier(threads) {}
  std::barrier<> barrier;
};

void sync_block(const courier_host_thread_v1* self) {
  static_cast<Block*>(self->block)->barrier.arrive_and_wait();
}

}  // namespace

int launch_host_kernel(const courier_host_kernel_launch_v1& launch, std::string* error) {
  if (launch.fn == nullptr) {
    *error = "launch_host_kernel: fn is NULL";
    return -EINVAL;
  }
  uint64_t total = uint64_t{launch.grid_dim} * launch.block_dim;
  if (launch.grid_dim == 0 || launch.block_dim == 0 || total > kMaxHostThreads) {
    *error = "launch_host_kernel: grid " + std::to_string(launch.grid_dim) + " x block " +
             std::to_string(launch.block_dim) + " must be non-zero and at most " +
             std::to_string(kMaxHostThreads) + " threads";
    return -EINVAL;
  }
  if (total == 1 && launch.num_cpus == 0) {
    // One thread and no placement: the caller's thread runs it. Starting a
    // thread per launch cost a wake-up on cores the proxies keep busy.
    Block block(1);
    const courier_host_thread_v1 only{0, 0, 1, 1, &block, sync_block};
    const int slack = prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0);
    prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);  // as for the threads below
    launch.fn(&only, launch.arg);
    if (slack > 0) prctl(PR_SET_TIMERSLACK, static_cast<unsigned long>(slack), 0, 0, 0);
    return 0;
  }
  std::vector<std::unique_ptr<Block>> blocks;
  std::vector<courier_host_thread_v1> coords;
  coords.reserve(total);
  for (uint32_t b = 0; b < launch.grid_dim; ++b) {
    blocks.push_back(std::make_unique<Block>(launch.block_dim));
    for (uint32_t t = 0; t < launch.block_dim; ++t) {
      coords.push_back({b, t, launch.block_dim, launch.grid_dim, blocks.back().get(), sync_block});
    }
  }
  // Every thread waits at a start gate, so that a failure to create one of
  // them can release the others without running the kernel (a block missing
  // a thread would never pass sync_block).
  cpu_set_t placement;
  CPU_ZERO(&placement);
  for (uint32_t i = 0; i < launch.num_cpus; ++i) {
    if (launch.cpus[i] < 0 || launch.cpus[i] >= CPU_SETSIZE) {
      *error = "launch_host_kernel: CPU " + std::to_string(launch.cpus[i]) + " does not exist";
      return -EINVAL;
    }
    CPU_SET(launch.cpus[i], &placement);
  }
  std::latch gate(1);
  std::atomic<bool> aborted{false};
  std::vector<std::jthread> threads;
  threads.reserve(total);
  try {
    for (const courier_host_thread_v1& c : coords) {
      threads.emplace_back([&launch, &c, &gate, &aborted, &placement] {
        // Waiting "GPU threads" sleep in microseconds (device_atomics.hpp's
        // Backoff); the default 50 us timer slack would stretch every nap.
        prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
        pthread_setname_np(pthread_self(), "courier-gpu");
        if (launch.num_cpus > 0) {  // best effort: placement is a hint
          pthread_setaffinity_np(pthread_self(), sizeof placement, &placement);
        }
        gate.wait();
        if (!aborted.load()) launch.fn(&c, launch.arg);
      });
    }
  } catch (const std::exception& e) {  // system_error, bad_alloc
    aborted.store(true);
    gate.count_down();
    threads.clear();  // joins the threads started so far; none ran the kernel
    *error = std::string("launch_host_kernel: could not start thread: ") + e.what();
    return -EAGAIN;
  }
  gate.count_down();
  return 0;  // jthreads join here
}

}  // namespace courier::host_gpu
