// The ops of Gemma (gelu_mul, scale), of the hybrid Qwen3.5 models (deinterleave,
// sigmoid_mul) and of mixtures of experts and MTP drafts (gather_rows,
// weighted_sum_rows) on the GPU, so that none of them takes a trip through the host.
// Arithmetic as the host's (kernels/backend.h, gelu.h, expert_rows.h, delta_net.cpp).
#include <cuda_fp16.h>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/kernels.h"

namespace flashspec::cuda {

namespace {

constexpr int kThreads = 256;

unsigned blocks(int64_t n) { return unsigned((n + kThreads - 1) / kThreads); }

__device__ float round_fp16(float x) { return __half2float(__float2half_rn(x)); }

// kernels/gelu.h's gelu_ggml.
__device__ float gelu_ggml(float x) {
  if (x <= -10.0f) return 0.0f;
  if (x >= 10.0f) return x;
  constexpr float kSqrt2OverPi = 0.79788456080286535587989211986876f, kCoef = 0.044715f;
  const float h = round_fp16(x);
  return round_fp16(0.5f * h * (1.0f + tanhf(kSqrt2OverPi * h * (1.0f + kCoef * h * h))));
}

__global__ void gelu_mul_kernel(float* __restrict__ gate, const float* __restrict__ up, int64_t n) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) gate[i] = gelu_ggml(gate[i]) * up[i];
}

__global__ void scale_kernel(float* __restrict__ x, float s, int64_t n) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= s;
}

__global__ void deinterleave_kernel(const float* __restrict__ x, int64_t blocks, int64_t width,
                                    float* __restrict__ first, float* __restrict__ second) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= blocks * width) return;
  const int64_t b = i / width, j = i % width;
  first[i] = x[b * 2 * width + j];
  second[i] = x[b * 2 * width + width + j];
}

__global__ void sigmoid_mul_kernel(float* __restrict__ y, const float* __restrict__ g, int64_t T, int64_t n,
                                   bool per_row) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= T * n) return;
  y[i] *= 1.0f / (1.0f + expf(-(per_row ? g[i / n] : g[i])));
}

__global__ void gather_rows_kernel(const float* __restrict__ x, const int32_t* __restrict__ rows, int64_t n,
                                   int64_t width, float* __restrict__ y) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n * width) y[i] = x[int64_t(rows[i / width]) * width + i % width];
}

// In rank order s = 0, 1, ..., as weighted_sum_rows_host sums.
__global__ void weighted_sum_rows_kernel(const float* __restrict__ x, const int32_t* __restrict__ slots,
                                         const float* __restrict__ weights, int64_t T, int64_t k, int64_t width,
                                         float* __restrict__ y) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= T * width) return;
  const int64_t t = i / width, c = i % width;
  float acc = weights[t * k] * x[int64_t(slots[t * k]) * width + c];
  for (int64_t s = 1; s < k; ++s) acc += weights[t * k + s] * x[int64_t(slots[t * k + s]) * width + c];
  y[i] = acc;
}

}  // namespace

void launch_gelu_mul(float* gate, const float* up, int64_t n, cudaStream_t s) {
  if (n == 0) return;
  gelu_mul_kernel<<<blocks(n), kThreads, 0, s>>>(gate, up, n);
  check_launch("gelu_mul");
}

void launch_scale(float* x, float v, int64_t n, cudaStream_t s) {
  if (n == 0) return;
  scale_kernel<<<blocks(n), kThreads, 0, s>>>(x, v, n);
  check_launch("scale");
}

void launch_deinterleave(const float* x, int64_t n_blocks, int64_t width, float* first, float* second,
                         cudaStream_t s) {
  if (n_blocks * width == 0) return;
  deinterleave_kernel<<<blocks(n_blocks * width), kThreads, 0, s>>>(x, n_blocks, width, first, second);
  check_launch("deinterleave");
}

void launch_sigmoid_mul(float* y, const float* g, int64_t T, int64_t n, bool per_row, cudaStream_t s) {
  if (T * n == 0) return;
  sigmoid_mul_kernel<<<blocks(T * n), kThreads, 0, s>>>(y, g, T, n, per_row);
  check_launch("sigmoid_mul");
}

void launch_gather_rows(const float* x, const int32_t* rows, int64_t n, int64_t width, float* y, cudaStream_t s) {
  if (n * width == 0) return;
  gather_rows_kernel<<<blocks(n * width), kThreads, 0, s>>>(x, rows, n, width, y);
  check_launch("gather_rows");
}

void launch_weighted_sum_rows(const float* x, const int32_t* slots, const float* weights, int64_t T, int64_t k,
                              int64_t width, float* y, cudaStream_t s) {
  if (T * width == 0) return;
  weighted_sum_rows_kernel<<<blocks(T * width), kThreads, 0, s>>>(x, slots, weights, T, k, width, y);
  check_launch("weighted_sum_rows");
}

}  // namespace flashspec::cuda
