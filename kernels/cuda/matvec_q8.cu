// The matmul of Q4_0, Q8_0, Q4_K and Q6_K weights on 8-bit activations (q8_dot.cuh says
// why), for any number of activation rows: kMatvecMaxT rows per weight read.
//
// One warp per output row, lane l taking groups l, l + 32, ... of the row (matvec_rows
// says how the row's bytes reach it). Activations
// are laid out as Q8Group fields in three arrays (Q8Rows): the first and the second int4 of
// each group's codes, and its (scale, sum) float2, activation row t's groups at
// [t * groups, (t + 1) * groups): lanes reading consecutive groups read 16-byte strides,
// which shared memory serves without bank conflicts.
//
// For one activation row (decoding) each block quantizes the row into shared memory
// itself and then walks several weight rows: a separate quantizing kernel would add a
// launch to every matmul, which at decode sizes costs about as much as the mat-vec. For
// more rows a quantizing kernel writes the codes to device memory once and every block
// reads them (from L1 / L2: they are small next to the weights). Large batches (prefill)
// stay here rather than going to cuBLAS: 8 rows per weight read already outrun
// dequantizing the weights to f32 for cuBLAS, and the numbers stay the CPU backend's.
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
// bytes per value) beside the staging buffers, within the 48 KiB a block gets without
// opting in; wider rows take the two-kernel path.
constexpr int64_t kFusedMaxCols = 16384;

// 16-byte words of one quantized activation row of `groups` groups in shared memory (codes,
// then scales, rounded up so that the staging buffers after them stay aligned).
__host__ __device__ constexpr int64_t activation_words(int64_t groups) { return 2 * groups + (groups + 1) / 2; }

bool fused(const WeightMatrix& w, int64_t T) { return T == 1 && w.cols <= kFusedMaxCols; }

// Quantized activation rows: group i's codes are the int4s lo[i] and hi[i] (words 0-3 and
// 4-7 of its Q8Group), its scale and the sum of its codes scales[i].
struct Q8Rows {
  int4* lo;
  int4* hi;
  float2* scales;
};

// Quantizes groups [0, n) of x (32 floats each; consecutive rows of `groups_per_row`),
// a warp taking 8 groups (256 values) at a time, warps warp, warp + nwarps, ...: lane l
// holds values [8 l, 8 l + 8) of the 256, so that a warp's loads are one contiguous run and
// each group is 4 lanes, which share its amax (Q8_0 activations) or the whole warp's (Q8_K:
// a K-quant row is a multiple of 256 values, so a run of 256 is one block) and its sum.
// Lane l writes words 2 (l % 4) and 2 (l % 4) + 1 of its group.
template <GgmlType kType>
__device__ void quantize_groups(const float* __restrict__ x, int64_t n, int warp, int nwarps, Q8Rows q) {
  constexpr int kShareLanes = q8_activation_block(kType) / 8;  // lanes under one scale: 4 or 32
  const int lane = int(threadIdx.x) & 31;
  const bool vector_loads = (reinterpret_cast<uintptr_t>(x) & 15) == 0;
  int* words = reinterpret_cast<int*>((lane % 4) < 2 ? q.lo : q.hi);
  for (int64_t run = warp; run * 8 < n; run += nwarps) {
    const int64_t g = run * 8 + lane / 4;
    const bool valid = g < n;  // whole 4-lane groups are valid or not
    const float* src = x + g * 32 + (lane % 4) * 8;
    float v[8] = {};
    if (valid && vector_loads) {
      const float4 a = reinterpret_cast<const float4*>(src)[0], b = reinterpret_cast<const float4*>(src)[1];
      v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
    } else if (valid) {
#pragma unroll
      for (int k = 0; k < 8; ++k) v[k] = src[k];
    }
    float amax = 0.0f;
#pragma unroll
    for (int k = 0; k < 8; ++k) amax = fmaxf(amax, fabsf(v[k]));
#pragma unroll
    for (int off = 1; off < kShareLanes; off <<= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
    const Q8Scale s = q8_activation_scale(kType, amax);
    int packed[2] = {0, 0}, sum = 0;
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      const int8_t c = q8_code_ties_even(v[k] * s.id);
      sum += c;
      packed[k / 4] |= int(uint32_t(uint8_t(c)) << (8 * (k % 4)));
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    if (!valid) continue;
    words[4 * g + 2 * (lane % 2)] = packed[0];
    words[4 * g + 2 * (lane % 2) + 1] = packed[1];
    if (lane % 4 == 0) q.scales[g] = make_float2(s.d, float(sum));
  }
}

template <GgmlType kType>
__global__ void quantize_activations_kernel(const float* __restrict__ x, int64_t n, Q8Rows q) {
  quantize_groups<kType>(x, n, int(blockIdx.x) * kWarps + int(threadIdx.x >> 5), int(gridDim.x) * kWarps, q);
}

__device__ Q8Group load_group(const Q8Rows& q, int64_t i) {
  const int4 a = q.lo[i], b = q.hi[i];
  const float2 s = q.scales[i];
  return Q8Group{{a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w}, s.x, s.y};
}

// A warp reads its weight row in chunks of 32 groups (for K-quants: 4 super-blocks), lane
// l computing group l of a chunk. The chunk's bytes are staged in shared memory first, read
// from device memory 16 bytes per lane in one contiguous run: read in place, an 18-byte
// Q4_0 group costs nine 16-bit loads, and the first GPU runs showed the kernel bound by
// those load instructions (L1 wavefronts), not by the device's bandwidth. The next chunk's
// loads are issued before this chunk's arithmetic, so that they are in flight meanwhile.
template <GgmlType kType>
struct Chunk {
  static constexpr int bytes = kType == GgmlType::Q4_0   ? 32 * 18
                               : kType == GgmlType::Q8_0 ? 32 * 34
                               : kType == GgmlType::Q4_K ? 4 * 144
                                                         : 4 * 210;
  // 16-byte words covering a chunk at any 2-byte alignment (up to 15 bytes either side).
  static constexpr int words = bytes / 16 + 2;
  static constexpr int words_per_lane = (words + 31) / 32;
};

// The 16-byte words of [src, src + n) from the word holding src on, as lanes hold them.
template <GgmlType kType>
__device__ int fetch_chunk(const uint8_t* src, int n, int lane, int4 (&r)[Chunk<kType>::words_per_lane]) {
  const uintptr_t lo = reinterpret_cast<uintptr_t>(src) & ~uintptr_t(15);
  const int count = int((reinterpret_cast<uintptr_t>(src) + uintptr_t(n) + 15 - lo) / 16);
  const int4* from = reinterpret_cast<const int4*>(lo);
#pragma unroll
  for (int k = 0; k < Chunk<kType>::words_per_lane; ++k)
    if (lane + 32 * k < count) r[k] = __ldg(from + lane + 32 * k);
  return count;
}

template <GgmlType kType>
__device__ void store_chunk(int4* buf, int count, int lane, const int4 (&r)[Chunk<kType>::words_per_lane]) {
#pragma unroll
  for (int k = 0; k < Chunk<kType>::words_per_lane; ++k)
    if (lane + 32 * k < count) buf[lane + 32 * k] = r[k];
}

// Shared memory a block's warps stage their chunks in: two buffers per warp.
template <GgmlType kType>
constexpr size_t staging_bytes() {
  return size_t(kWarps) * 2 * Chunk<kType>::words * sizeof(int4);
}
static_assert(activation_words(kFusedMaxCols / 32) * sizeof(int4) + staging_bytes<GgmlType::Q8_0>() <= 48 * 1024,
              "the fused kernel's shared memory (Q8_0 has the largest chunks)");

// y[t * rows + r] for the rows r this warp takes: rows_per_warp rows starting at the
// block's first row plus the warp's index, kWarps apart.
template <GgmlType kType>
__device__ void matvec_rows(const uint8_t* __restrict__ w, int64_t stride, int64_t rows, int64_t groups,
                            Q8Rows q, int T, int rows_per_warp, int4* staging,
                            float* __restrict__ y) {
  const int lane = int(threadIdx.x) & 31;
  const int warp = int(threadIdx.x >> 5);
  int4* bufs = staging + size_t(warp) * 2 * Chunk<kType>::words;
  const int64_t first = int64_t(blockIdx.x) * kWarps * rows_per_warp + warp;
  const int64_t chunks = (groups + 31) / 32;
  for (int k = 0; k < rows_per_warp; ++k) {
    const int64_t r = first + int64_t(k) * kWarps;
    if (r >= rows) return;
    const uint8_t* row = w + r * stride;
    float acc[kMatvecMaxT];
#pragma unroll
    for (int t = 0; t < kMatvecMaxT; ++t) acc[t] = 0.0f;
    int4 next[Chunk<kType>::words_per_lane];
    // stride is the row's bytes: the last chunk may be short
    auto chunk_size = [&](int64_t c) { return int(min(int64_t(Chunk<kType>::bytes), stride - c * Chunk<kType>::bytes)); };
    int count = fetch_chunk<kType>(row, chunk_size(0), lane, next);
    for (int64_t c = 0; c < chunks; ++c) {
      int4* buf = bufs + (c & 1) * Chunk<kType>::words;
      store_chunk<kType>(buf, count, lane, next);
      __syncwarp();
      const uint8_t* at = row + c * Chunk<kType>::bytes;
      if (c + 1 < chunks) count = fetch_chunk<kType>(at + Chunk<kType>::bytes, chunk_size(c + 1), lane, next);
      const int64_t g = c * 32 + lane;
      if (g < groups) {
        const uint8_t* staged = reinterpret_cast<const uint8_t*>(buf) + (reinterpret_cast<uintptr_t>(at) & 15);
        const W8Group wg = q8_weight_group<kType>(staged, lane);
#pragma unroll
        for (int t = 0; t < kMatvecMaxT; ++t)
          if (t < T) acc[t] += q8_dot(wg, load_group(q, int64_t(t) * groups + g));
      }
    }
#pragma unroll
    for (int t = 0; t < kMatvecMaxT; ++t) {
      if (t < T) {
        float v = acc[t];
        for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
        if (lane == 0) y[int64_t(t) * rows + r] = v;
      }
    }
    __syncwarp();  // the next row's first chunk reuses buffer 0
  }
}

// One activation row, quantized by each block into shared memory.
template <GgmlType kType>
__global__ void matvec_q8_fused_kernel(const uint8_t* __restrict__ w, int64_t stride, int64_t rows, int64_t groups,
                                       const float* __restrict__ x, int rows_per_warp, float* __restrict__ y) {
  extern __shared__ int4 smem[];
  const Q8Rows q{smem, smem + groups, reinterpret_cast<float2*>(smem + 2 * groups)};
  int4* staging = smem + activation_words(groups);
  quantize_groups<kType>(x, groups, int(threadIdx.x >> 5), kWarps, q);
  __syncthreads();
  matvec_rows<kType>(w, stride, rows, groups, q, 1, rows_per_warp, staging, y);
}

template <GgmlType kType>
__global__ void matvec_q8_kernel(const uint8_t* __restrict__ w, int64_t stride, int64_t rows, int64_t groups,
                                 Q8Rows q, int T,
                                 float* __restrict__ y) {
  extern __shared__ int4 staging[];
  matvec_rows<kType>(w, stride, rows, groups, q, T, 1, staging, y);
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
                      cudaStream_t s, int blocks_per_sm) {
  const auto* data = static_cast<const uint8_t*>(w.data);
  const int64_t stride = row_bytes(w.type, w.cols), groups = w.cols / 32;
  with_q8_type(w.type, [&]<GgmlType kType>() {
    if (fused(w, T)) {
      // Enough rows per warp that the grid is about blocks_per_sm blocks per
      // multiprocessor: each block quantizes the activations once for all its rows.
      const int64_t warps_wanted = int64_t(std::max(blocks_per_sm, 1)) * std::max(sm_count, 1) * kWarps;
      const int rows_per_warp = int(std::clamp<int64_t>((w.rows + warps_wanted - 1) / warps_wanted, 1, 64));
      const int64_t per_block = int64_t(kWarps) * rows_per_warp;
      const size_t smem = size_t(activation_words(groups)) * sizeof(int4) + staging_bytes<kType>();
      matvec_q8_fused_kernel<kType><<<unsigned((w.rows + per_block - 1) / per_block), kThreads, smem, s>>>(
          data, stride, w.rows, groups, x, rows_per_warp, y);
      check_launch("matvec_q8_fused");
      return;
    }
    const int64_t n = T * groups, runs = (n + 7) / 8;
    auto* codes = static_cast<int4*>(scratch);
    const Q8Rows q{codes, codes + n, reinterpret_cast<float2*>(codes + 2 * n)};
    quantize_activations_kernel<kType><<<unsigned((runs + kWarps - 1) / kWarps), kThreads, 0, s>>>(x, n, q);
    check_launch("quantize_activations");
    for (int64_t t0 = 0; t0 < T; t0 += kMatvecMaxT) {
      const int64_t at = t0 * groups;
      matvec_q8_kernel<kType><<<unsigned((w.rows + kWarps - 1) / kWarps), kThreads, staging_bytes<kType>(), s>>>(
          data, stride, w.rows, groups, Q8Rows{q.lo + at, q.hi + at, q.scales + at}, int(std::min(kMatvecMaxT, T - t0)),
          y + t0 * w.rows);
    }
    check_launch("matvec_q8");
  });
}

}  // namespace flashspec::cuda
