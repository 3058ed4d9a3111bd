// The FIFO self-test and benchmark kernels of gpu/fifo_selftest.hpp,
// compiled for AMD GPUs (hip_selftest_kernels.hip, built by hipcc).
#pragma once

#include "courier/abi/gpu_v1.h"

namespace courier::hip_gpu {

// Both return 0 or a negative status with the reason in last_error().
int run_fifo_producers(courier_gpu_fifo_producers_v1* job);
int run_fifo_round_trips(courier_gpu_fifo_round_trips_v1* job);
int run_command_lists(courier_gpu_command_lists_v1* job);

}  // namespace courier::hip_gpu
