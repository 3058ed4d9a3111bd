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
