// MOEJIT_HOST_DEVICE: for the plain index and descriptor functions that compile both for the
// device (NVRTC, nvcc) and for the host tests, which include them without any CUDA header.
#pragma once

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define MOEJIT_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define MOEJIT_HOST_DEVICE inline
#endif
