// One atomic on GPU memory, executed by a one-thread kernel on the peer's
// copy stream: stream order puts it after every earlier copy to that peer
// (write-then-atomic), and the GPU carries it out with a system-scope
// atomic over NVLink, atomic with respect to the target GPU's own atomics.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace courier::nic_ce {

// op: one COURIER_NIC_ATOMIC_* bit. The old value is stored to *result
// (device-visible memory, 8 bytes, zero-extended) when result is not null.
cudaError_t launch_atomic(cudaStream_t stream, uint32_t op, void* target, uint64_t operand,
                          uint64_t compare, uint64_t* result);

// Loads the kernel into the current device's context now. With CUDA's lazy
// module loading the first launch would load it, and loading waits for the
// kernels already running, such as a producer spinning until this very
// atomic completes: a deadlock.
cudaError_t prepare_atomic_kernel();

}  // namespace courier::nic_ce
