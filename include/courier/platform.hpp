// Portability macros for code compiled both by host compilers and by the
// device compilers of the GPU backends (nvcc, hipcc).
#pragma once

#if defined(__CUDACC__) || defined(__HIPCC__)
#define COURIER_HOST_DEVICE __host__ __device__
#define COURIER_DEVICE_INLINE __host__ __device__ __forceinline__
#else
#define COURIER_HOST_DEVICE
#define COURIER_DEVICE_INLINE inline
#endif

// A kernel's parameter whose address the kernel takes (a job handed on by
// reference or pointer): on CUDA, __grid_constant__ lets it stay in
// parameter memory, where otherwise every thread copies it into its local
// memory at each launch (hundreds of bytes a thread, megabytes a launch).
// HIP has no such qualifier: there a kernel must not choose at run time
// between a parameter's field's address and another (docs/gpu-backends.md,
// "Kernel parameters on HIP").
#if defined(__CUDACC__)
#define COURIER_KERNEL_PARAM __grid_constant__ const
#else
#define COURIER_KERNEL_PARAM const
#endif
