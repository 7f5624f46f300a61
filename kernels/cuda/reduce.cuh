#pragma once
// Block-wide reductions for the CUDA kernels (blockDim.x a multiple of 32, <= 1024).
#include <cuda_runtime.h>

namespace flashspec::cuda {

template <class Op>
__device__ float warp_reduce(float v, Op op) {
  for (int off = 16; off > 0; off >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, off));
  return v;
}

// Every thread gets the reduction of `v` over the block. `scratch` holds 32 floats of
// shared memory; the call synchronises the block (so scratch may be reused after it).
template <class Op>
__device__ float block_reduce(float v, Op op, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = warp_reduce(v, op);
  __syncthreads();  // scratch may still be read by an earlier reduction
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = scratch[0];
  for (int w = 1; w < warps; ++w) v = op(v, scratch[w]);
  return v;
}

struct Sum {
  __device__ float operator()(float a, float b) const { return a + b; }
};
struct Max {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

}  // namespace flashspec::cuda
