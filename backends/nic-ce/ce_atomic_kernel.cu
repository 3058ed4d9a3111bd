#include <cuda/atomic>

#include "ce_atomic_kernel.hpp"
#include "courier/abi/nic_v1.h"

namespace courier::nic_ce {

namespace {

template <class T>
__device__ T apply(uint32_t op, T* target, T operand, T compare) {
  cuda::atomic_ref<T, cuda::thread_scope_system> word(*target);
  switch (op) {
    case COURIER_NIC_ATOMIC_ADD_U64:
    case COURIER_NIC_ATOMIC_ADD_U32:
    case COURIER_NIC_ATOMIC_FETCH_ADD_U64:
    case COURIER_NIC_ATOMIC_FETCH_ADD_U32:
      return word.fetch_add(operand, cuda::memory_order_acq_rel);
    default: {  // CAS: the old value either way
      T expected = compare;
      word.compare_exchange_strong(expected, operand, cuda::memory_order_acq_rel);
      return expected;
    }
  }
}

__global__ void atomic_kernel(uint32_t op, uint32_t width, void* target, uint64_t operand,
                              uint64_t compare, uint64_t* result) {
  uint64_t old;
  if (width == 8) {
    old = apply<unsigned long long>(op, static_cast<unsigned long long*>(target), operand, compare);
  } else {
    old =
        apply<unsigned int>(op, static_cast<unsigned int*>(target),
                            static_cast<unsigned int>(operand), static_cast<unsigned int>(compare));
  }
  if (result != nullptr) {
    cuda::atomic_ref<uint64_t, cuda::thread_scope_system>(*result).store(
        old, cuda::memory_order_release);
  }
}

}  // namespace

cudaError_t prepare_atomic_kernel() {
  cudaFuncAttributes attributes{};
  return cudaFuncGetAttributes(&attributes, atomic_kernel);
}

cudaError_t launch_atomic(cudaStream_t stream, uint32_t op, void* target, uint64_t operand,
                          uint64_t compare, uint64_t* result) {
  atomic_kernel<<<1, 1, 0, stream>>>(op, courier_nic_atomic_width(op), target, operand, compare,
                                     result);
  return cudaGetLastError();
}

}  // namespace courier::nic_ce
