// Uses only the installed public headers: creates a Context over whatever
// the environment names (the install test forces the skeleton NIC backend),
// registers a window with every rank and meets them at a barrier. Prints
// one line per rank; any failure is a courier::Error and exit status 1.
#include <courier/context.hpp>
#include <courier/ep.hpp>  // compiles only when DLPack came with the package
#include <cstdint>
#include <cstdio>
#include <exception>

int main() {
  try {
    courier::Context context;
    courier::DeviceBuffer buffer = context.alloc(4096);
    const uint32_t window = context.register_window(buffer.data(), buffer.size());
    context.barrier();
    context.deregister_window(window);
    std::printf("consumer: rank %d of %d, NIC backend %s, GPU backend %s\n", context.rank(),
                context.world_size(), context.nic_backend().c_str(), context.gpu_backend().c_str());
    return 0;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "consumer: %s\n", error.what());
    return 1;
  }
}
