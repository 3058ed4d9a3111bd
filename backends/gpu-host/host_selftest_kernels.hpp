// The FIFO self-test and benchmark kernels of gpu/fifo_selftest.hpp on CPU
// threads (the gpu-host backend's run_fifo_producers / run_fifo_round_trips).
#pragma once

#include <string>

#include "courier/abi/gpu_v1.h"

namespace courier::host_gpu {

// Both return 0 or -errno with *error set.
int run_fifo_producers(courier_gpu_fifo_producers_v1* job, std::string* error);
int run_fifo_round_trips(courier_gpu_fifo_round_trips_v1* job, std::string* error);
int run_command_lists(courier_gpu_command_lists_v1* job, std::string* error);

}  // namespace courier::host_gpu
