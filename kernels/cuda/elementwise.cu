// Row and element kernels: rmsnorm, rope, store_f16, store_q8_0, silu_mul, swiglu_oai, add, add_bias.
#include <cuda_fp16.h>

#include <string>

#include "core/error.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/reduce.cuh"
#include "kernels/rope_angle.h"
#include "kernels/swiglu_oai.h"
#include "kernels/q8_rule.h"

namespace flashspec::cuda {

namespace {

constexpr int kThreads = 256;

// One block per row. The sum of squares is a float tree reduction (the CPU sums in
// double); the difference is far below the fp16 rounding of the KV cache.
__global__ void rmsnorm_kernel(const float* __restrict__ x, const float* __restrict__ weight, int64_t dim,
                               float eps, float* __restrict__ y) {
  __shared__ float scratch[32];
  const float* xr = x + int64_t(blockIdx.x) * dim;
  float* yr = y + int64_t(blockIdx.x) * dim;
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) ss += xr[i] * xr[i];
  ss = block_reduce(ss, Sum{}, scratch);
  const float scale = 1.0f / sqrtf(ss / float(dim) + eps);
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) yr[i] = xr[i] * scale * weight[i];
}

// One thread per rotated pair (row t, head h, pair p). The angle is built by p repeated
// multiplications from the position, as the CPU (and llama.cpp) build it, so that the
// angles agree to the last bit rather than to powf's rounding; then divided by the pair's
// factor and scaled in the CPU's order.
__global__ void rope_kernel(float* __restrict__ x, const int32_t* __restrict__ positions, int64_t T,
                            int64_t n_heads, int64_t head_dim, RopeParams r, float theta_scale) {
  const int64_t pairs = r.n_rot / 2;
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= T * n_heads * pairs) return;
  const int64_t p = i % pairs, th = i / pairs;  // th = t * n_heads + h
  const int64_t t = th / n_heads;
  float theta = float(positions[t]);
  for (int64_t k = 0; k < p; ++k) theta *= theta_scale;
  if (r.factors) theta = theta / r.factors[p];
  float c, s;
  rope_angle(theta, r.freq_scale, r.ext_factor, r.attn_factor, r.corr, int(p), &c, &s);
  float* v = x + th * head_dim;
  float& a = r.neox ? v[p] : v[2 * p];
  float& b = r.neox ? v[p + pairs] : v[2 * p + 1];
  const float x0 = a, x1 = b;
  a = x0 * c - x1 * s;
  b = x0 * s + x1 * c;
}

__global__ void store_f16_kernel(const float* __restrict__ src, uint16_t* __restrict__ dst, int64_t n) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) dst[i] = __half_as_ushort(__float2half_rn(src[i]));
}

// One warp per 32-value block, the stored-block rule of kernels/q8_rule.h (the CPU's) bit
// for bit: the scale stored as fp16 (round to nearest even), codes with ties away from
// zero. IEEE division (nvcc's default -prec-div) keeps scale and inverse equal to the CPU's.
__global__ void store_q8_0_kernel(const float* __restrict__ src, uint8_t* __restrict__ dst, int64_t n_blocks) {
  const int64_t b = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  if (b >= n_blocks) return;  // a whole warp leaves together (blockDim.x is a multiple of 32)
  const unsigned lane = threadIdx.x & 31u;
  const float x = src[b * 32 + lane];
  float amax = fabsf(x);
  for (int off = 16; off > 0; off >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
  const Q8Scale s = q8_scale(amax);
  uint8_t* block = dst + b * 34;  // 34 bytes: even, so the scale stays 2-byte aligned
  if (lane == 0) *reinterpret_cast<__half*>(block) = __float2half_rn(s.d);
  block[2 + lane] = uint8_t(q8_code_ties_away(x * s.id));
}

__global__ void silu_mul_kernel(float* __restrict__ gate, const float* __restrict__ up, int64_t n) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) {
    const float g = gate[i];
    gate[i] = g / (1.0f + expf(-g)) * up[i];
  }
}

__global__ void swiglu_oai_kernel(float* __restrict__ gate, const float* __restrict__ up, int64_t n) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) gate[i] = swiglu_oai(gate[i], up[i]);
}

__global__ void add_kernel(float* __restrict__ y, const float* __restrict__ x, int64_t n) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] += x[i];
}

__global__ void add_bias_kernel(float* __restrict__ y, const float* __restrict__ bias, int64_t T, int64_t n) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < T * n) y[i] += bias[i % n];
}

unsigned blocks(int64_t n) { return unsigned((n + kThreads - 1) / kThreads); }

}  // namespace

void launch_rmsnorm(const float* x, const float* weight, int64_t T, int64_t dim, float eps, float* y,
                    cudaStream_t s) {
  rmsnorm_kernel<<<unsigned(T), kThreads, 0, s>>>(x, weight, dim, eps, y);
  check_launch("rmsnorm");
}

void launch_rope(float* x, const int32_t* positions, int64_t T, int64_t n_heads, int64_t head_dim,
                 const RopeParams& r, float theta_scale, cudaStream_t s) {
  const int64_t n = T * n_heads * (r.n_rot / 2);
  if (n == 0) return;
  rope_kernel<<<blocks(n), kThreads, 0, s>>>(x, positions, T, n_heads, head_dim, r, theta_scale);
  check_launch("rope");
}

void launch_store_f16(const float* src, uint16_t* dst, int64_t n, cudaStream_t s) {
  if (n == 0) return;
  store_f16_kernel<<<blocks(n), kThreads, 0, s>>>(src, dst, n);
  check_launch("store_f16");
}

void launch_store_q8_0(const float* src, uint8_t* dst, int64_t n, cudaStream_t s) {
  if (n % 32) throw Error("cuda: q8_0 cache rows must hold a multiple of 32 values, not " + std::to_string(n));
  if (n == 0) return;
  store_q8_0_kernel<<<blocks(n), kThreads, 0, s>>>(src, dst, n / 32);
  check_launch("store_q8_0");
}

void launch_silu_mul(float* gate, const float* up, int64_t n, cudaStream_t s) {
  if (n == 0) return;
  silu_mul_kernel<<<blocks(n), kThreads, 0, s>>>(gate, up, n);
  check_launch("silu_mul");
}

void launch_swiglu_oai(float* gate, const float* up, int64_t n, cudaStream_t s) {
  if (n == 0) return;
  swiglu_oai_kernel<<<blocks(n), kThreads, 0, s>>>(gate, up, n);
  check_launch("swiglu_oai");
}

void launch_add(float* y, const float* x, int64_t n, cudaStream_t s) {
  if (n == 0) return;
  add_kernel<<<blocks(n), kThreads, 0, s>>>(y, x, n);
  check_launch("add");
}

void launch_add_bias(float* y, const float* bias, int64_t T, int64_t n, cudaStream_t s) {
  if (T * n == 0) return;
  add_bias_kernel<<<blocks(T * n), kThreads, 0, s>>>(y, bias, T, n);
  check_launch("add_bias");
}

}  // namespace flashspec::cuda
