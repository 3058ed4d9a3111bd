#include "host_kernel_launch.hpp"

#include <barrier>
#include <cerrno>
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
  std::vector<std::unique_ptr<Block>> blocks;
  std::vector<courier_host_thread_v1> coords;
  coords.reserve(total);
  for (uint32_t b = 0; b < launch.grid_dim; ++b) {
    blocks.push_back(std::make_unique<Block>(launch.block_dim));
    for (uint32_t t = 0; t < launch.block_dim; ++t) {
      coords.push_back({b, t, launch.block_dim, launch.grid_dim, blocks.back().get(), sync_block});
    }
  }
  std::vector<std::jthread> threads;
  threads.reserve(total);
  try {
    for (const courier_host_thread_v1& c : coords) {
      threads.emplace_back([&launch, &c] { launch.fn(&c, launch.arg); });
    }
  } catch (const std::system_error& e) {
    // Threads already started finish (jthread joins); a block missing threads
    // would deadlock in sync_block, so this is reported, not retried.
    *error = std::string("launch_host_kernel: could not start thread: ") + e.what();
    threads.clear();
    return -EAGAIN;
  }
  return 0;  // jthreads join here
}

}  // namespace courier::host_gpu
