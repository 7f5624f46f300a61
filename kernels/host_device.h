#pragma once
// FS_HD marks a small function compiled for the host and, under nvcc, for the GPU too, so
// that the CPU backend and the host tests run the very arithmetic the CUDA kernels run.
#ifdef __CUDACC__
#define FS_HD __host__ __device__ __forceinline__
#else
#define FS_HD inline
#endif
