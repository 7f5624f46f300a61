// The matmul of Q4_0, Q8_0, Q4_K and Q6_K weights on 8-bit activations (q8_dot.cuh says
// why), for any number of activation rows: kMatvecMaxT rows per weight read.
//
// One warp per output row, lane l taking groups l, l + 32, ... of the row, so that a
// warp's loads of a stretch of 32 groups are one contiguous run of bytes. Activations
// are laid out as Q8Group fields in two arrays: the codes, two int4 per group, and the
// (scale, sum) float2 per group, activation row t's groups at [t * groups, (t + 1) * groups).
//
// For one activation row (decoding) each block quantizes the row into shared memory
// itself and then walks several weight rows: a separate quantizing kernel would cost a
// launch about as long as a 4096 x 4096 Q4_0 mat-vec at full bandwidth. For more rows a
// quantizing kernel writes the codes to device memory once and every block reads them
// (from L1 / L2: they are small next to the weights). Large batches (prefill) stay here
// rather than going to cuBLAS: 8 rows per weight read already outrun dequantizing the
// weights to f32 for cuBLAS, and the numbers stay the CPU backend's.
#include <algorithm>
#include <utility>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/q8_dot.cuh"

namespace flashspec::cuda {

namespace {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
// Shared memory holds one quantized activation row of up to this many values (1.25
// bytes per value, within the 48 KiB a block gets without opting in); wider rows take the
// two-kernel path.
constexpr int64_t kFusedMaxCols = 32768;
static_assert(kFusedMaxCols / 32 * (2 * sizeof(int4) + sizeof(float2)) <= 48 * 1024);

bool fused(const WeightMatrix& w, int64_t T) { return T == 1 && w.cols <= kFusedMaxCols; }

// Quantizes groups [0, n) of x (32 floats each; consecutive rows of `groups_per_row`) by
// threads tid, tid + nthreads, ...; every thread of a warp runs the same trip count, so
// that the Q8_K blocks' amax can be shared by 8 lanes (a row's groups are a multiple of 8
// for K-quants, so a 256-block is 8 aligned lanes).
template <GgmlType kType>
__device__ void quantize_groups(const float* __restrict__ x, int64_t n, int tid, int nthreads, int4* codes,
                                float2* scales) {
  for (int64_t base = 0; base < n; base += nthreads) {
    const int64_t i = base + tid;
    const bool valid = i < n;
    float v[32];
    float amax = 0.0f;
    if (valid) {
#pragma unroll
      for (int k = 0; k < 32; ++k) {
        v[k] = x[i * 32 + k];
        amax = fmaxf(amax, fabsf(v[k]));
      }
    }
    if (q8_activation_block(kType) == 256)
      for (int off = 1; off < 8; off <<= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
    if (!valid) continue;
    const Q8Scale s = q8_activation_scale(kType, amax);
    int words[8];
    const int sum = quantize_q8_group(v, s, words);
    codes[2 * i] = make_int4(words[0], words[1], words[2], words[3]);
    codes[2 * i + 1] = make_int4(words[4], words[5], words[6], words[7]);
    scales[i] = make_float2(s.d, float(sum));
  }
}

template <GgmlType kType>
__global__ void quantize_activations_kernel(const float* __restrict__ x, int64_t n, int4* codes, float2* scales) {
  quantize_groups<kType>(x, n, int(blockIdx.x) * kThreads + int(threadIdx.x), int(gridDim.x) * kThreads, codes,
                         scales);
}

__device__ Q8Group load_group(const int4* codes, const float2* scales, int64_t i) {
  const int4 a = codes[2 * i], b = codes[2 * i + 1];
  const float2 s = scales[i];
  return Q8Group{{a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w}, s.x, s.y};
}

// y[t * rows + r] for the rows r this warp takes: rows_per_warp rows starting at the
// block's first row plus the warp's index, kWarps apart.
template <GgmlType kType>
__device__ void matvec_rows(const uint8_t* __restrict__ w, int64_t stride, int64_t rows, int64_t groups,
                            const int4* codes, const float2* scales, int T, int rows_per_warp, float* __restrict__ y) {
  const int lane = int(threadIdx.x) & 31;
  const int64_t first = int64_t(blockIdx.x) * kWarps * rows_per_warp + (threadIdx.x >> 5);
  for (int k = 0; k < rows_per_warp; ++k) {
    const int64_t r = first + int64_t(k) * kWarps;
    if (r >= rows) return;
    const uint8_t* row = w + r * stride;
    float acc[kMatvecMaxT];
#pragma unroll
    for (int t = 0; t < kMatvecMaxT; ++t) acc[t] = 0.0f;
#pragma unroll 4
    for (int64_t g = lane; g < groups; g += 32) {
      const W8Group wg = q8_weight_group<kType>(row, g);
#pragma unroll
      for (int t = 0; t < kMatvecMaxT; ++t)
        if (t < T) acc[t] += q8_dot(wg, load_group(codes, scales, int64_t(t) * groups + g));
    }
#pragma unroll
    for (int t = 0; t < kMatvecMaxT; ++t) {
      if (t < T) {
        float v = acc[t];
        for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
        if (lane == 0) y[int64_t(t) * rows + r] = v;
      }
    }
  }
}

// One activation row, quantized by each block into shared memory.
template <GgmlType kType>
__global__ void matvec_q8_fused_kernel(const uint8_t* __restrict__ w, int64_t stride, int64_t rows, int64_t groups,
                                       const float* __restrict__ x, int rows_per_warp, float* __restrict__ y) {
  extern __shared__ int4 smem[];
  int4* codes = smem;
  float2* scales = reinterpret_cast<float2*>(smem + 2 * groups);
  quantize_groups<kType>(x, groups, int(threadIdx.x), kThreads, codes, scales);
  __syncthreads();
  matvec_rows<kType>(w, stride, rows, groups, codes, scales, 1, rows_per_warp, y);
}

template <GgmlType kType>
__global__ void matvec_q8_kernel(const uint8_t* __restrict__ w, int64_t stride, int64_t rows, int64_t groups,
                                 const int4* __restrict__ codes, const float2* __restrict__ scales, int T,
                                 float* __restrict__ y) {
  matvec_rows<kType>(w, stride, rows, groups, codes, scales, T, 1, y);
}

template <class F>
void with_q8_type(GgmlType t, F&& f) {
  switch (t) {
    case GgmlType::Q4_0: return f.template operator()<GgmlType::Q4_0>();
    case GgmlType::Q8_0: return f.template operator()<GgmlType::Q8_0>();
    case GgmlType::Q4_K: return f.template operator()<GgmlType::Q4_K>();
    case GgmlType::Q6_K: return f.template operator()<GgmlType::Q6_K>();
    default: throw Error("cuda: no 8-bit-activation mat-vec for this weight type");
  }
}

}  // namespace

bool matvec_q8_applies(const WeightMatrix& w) {
  if (!uses_q8_activations(w.type)) return false;
  const int64_t stride = row_bytes(w.type, w.cols);
  const int a = q8_dot_alignment(w.type);
  return reinterpret_cast<uintptr_t>(w.data) % a == 0 && stride % a == 0;
}

size_t matvec_q8_scratch_bytes(const WeightMatrix& w, int64_t T) {
  return fused(w, T) ? 0 : size_t(T * (w.cols / 32)) * (2 * sizeof(int4) + sizeof(float2));
}

void launch_matvec_q8(const WeightMatrix& w, const float* x, int64_t T, float* y, int sm_count, void* scratch,
                      cudaStream_t s) {
  const auto* data = static_cast<const uint8_t*>(w.data);
  const int64_t stride = row_bytes(w.type, w.cols), groups = w.cols / 32;
  with_q8_type(w.type, [&]<GgmlType kType>() {
    if (fused(w, T)) {
      // Enough rows per warp that the grid is about two blocks per multiprocessor: each
      // block quantizes the activations once for all its rows.
      const int64_t warps_wanted = int64_t(2) * std::max(sm_count, 1) * kWarps;
      const int rows_per_warp = int(std::clamp<int64_t>((w.rows + warps_wanted - 1) / warps_wanted, 1, 64));
      const int64_t per_block = int64_t(kWarps) * rows_per_warp;
      const size_t smem = size_t(groups) * (2 * sizeof(int4) + sizeof(float2));
      matvec_q8_fused_kernel<kType><<<unsigned((w.rows + per_block - 1) / per_block), kThreads, smem, s>>>(
          data, stride, w.rows, groups, x, rows_per_warp, y);
      check_launch("matvec_q8_fused");
      return;
    }
    auto* codes = static_cast<int4*>(scratch);
    auto* scales = reinterpret_cast<float2*>(codes + 2 * T * groups);
    const int64_t n = T * groups;
    quantize_activations_kernel<kType><<<unsigned((n + kThreads - 1) / kThreads), kThreads, 0, s>>>(x, n, codes, scales);
    check_launch("quantize_activations");
    for (int64_t t0 = 0; t0 < T; t0 += kMatvecMaxT)
      matvec_q8_kernel<kType><<<unsigned((w.rows + kWarps - 1) / kWarps), kThreads, 0, s>>>(
          data, stride, w.rows, groups, codes + 2 * t0 * groups, scales + t0 * groups,
          int(std::min(kMatvecMaxT, T - t0)), y + t0 * w.rows);
    check_launch("matvec_q8");
  });
}

}  // namespace flashspec::cuda
