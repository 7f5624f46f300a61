// Weight-matrix kernels: the mat-vec that decoding and small trees spend their time in
// (one weight read serves up to kMatvecMaxT activation rows), dequantization of a row
// range to f32 for the cuBLAS path of large batches, and embedding lookup.
#include <algorithm>
#include <iterator>
#include <utility>

#include "kernels/cuda/block_formats.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/kernels.h"

namespace flashspec::cuda {

namespace {

// One output row per warp; the block's warps share each stretch of activations it stages.
constexpr int kWarpsPerBlock = 8;

// One warp per output row. The warps walk their rows 32 groups (1024 weights) at a time:
// lane l decodes group l of the stretch (neighbouring lanes read neighbouring bytes),
// then for each activation row the block stages the matching 1024 activations in shared
// memory once, with coalesced loads, and each lane of each warp takes the dot product of
// its group. Staging per block rather than per warp matters: at T = 1 a row's
// activations are 4 to 8 times its quantized weights, and re-reading them for every row
// held the kernel to a small fraction of the device's bandwidth. The staging is
// padded to 33 floats per group so that lane l's reads (l*33 + i) fall in 32 different
// banks. A shuffle reduction sums the lanes.
template <GgmlType kType>
__global__ void matvec_kernel(const uint8_t* __restrict__ w, int64_t stride, int64_t rows, int64_t cols,
                              const float* __restrict__ x, int T, float* __restrict__ y) {
  __shared__ float xs[32 * 33];
  const int lane = threadIdx.x & 31;
  const int64_t r = int64_t(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  const bool has_row = r < rows;  // a warp past the last row still helps stage activations
  const uint8_t* row = w + (has_row ? r : 0) * stride;
  const int64_t groups = (cols + 31) / 32;
  float acc[kMatvecMaxT];
#pragma unroll
  for (int t = 0; t < kMatvecMaxT; ++t) acc[t] = 0.0f;
  float wv[32];
  for (int64_t g0 = 0; g0 < groups; g0 += 32) {  // the same trip count for every thread
    const int64_t g = g0 + lane;
    const bool mine = has_row && g < groups;
    if (mine) decode_group(kType, row, g, is_plain(kType) ? int(min(int64_t(32), cols - g * 32)) : 32, wv);
#pragma unroll
    for (int t = 0; t < kMatvecMaxT; ++t) {
      if (t < T) {  // T is the same for the whole block, so every thread meets the barriers
        const float* xr = x + t * cols + g0 * 32;
        __syncthreads();  // every warp is done with the last stretch
        // F16 / BF16 weights multiply activations rounded to their type, as on the CPU.
        for (int i = threadIdx.x; i < 32 * 32; i += kWarpsPerBlock * 32)
          xs[(i >> 5) * 33 + (i & 31)] = g0 * 32 + i < cols ? round_activation(kType, xr[i]) : 0.0f;
        __syncthreads();
        if (mine) {
          float s = 0.0f;
#pragma unroll
          for (int i = 0; i < 32; ++i) s += wv[i] * xs[lane * 33 + i];  // wv is 0 past a plain row's end
          acc[t] += s;
        }
      }
    }
  }
  if (!has_row) return;
#pragma unroll
  for (int t = 0; t < kMatvecMaxT; ++t) {
    if (t < T) {
      float v = acc[t];
      for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
      if (lane == 0) y[t * rows + r] = v;
    }
  }
}

// One thread per group of 32 weights of rows [r0, r0 + n).
template <GgmlType kType>
__global__ void dequantize_kernel(const uint8_t* __restrict__ w, int64_t stride, int64_t r0, int64_t n,
                                  int64_t cols, float* __restrict__ out) {
  const int64_t groups = (cols + 31) / 32;
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n * groups) return;
  const int64_t r = i / groups, g = i % groups;
  const int m = int(min(int64_t(32), cols - g * 32));
  float v[32];
  decode_group(kType, w + (r0 + r) * stride, g, m, v);
  float* o = out + r * cols + g * 32;
  for (int k = 0; k < m; ++k) o[k] = v[k];
}

// One block per looked-up row; ids outside the table give a zero row (the forward has
// already refused them; this only keeps a bad id from reading out of bounds).
template <GgmlType kType>
__global__ void get_rows_kernel(const uint8_t* __restrict__ table, int64_t stride, int64_t rows, int64_t cols,
                                const int32_t* __restrict__ ids, float* __restrict__ out) {
  const int32_t id = ids[blockIdx.x];
  float* o = out + int64_t(blockIdx.x) * cols;
  const int64_t groups = (cols + 31) / 32;
  for (int64_t g = threadIdx.x; g < groups; g += blockDim.x) {
    const int m = int(min(int64_t(32), cols - g * 32));
    float v[32];
    if (id >= 0 && id < rows) decode_group(kType, table + int64_t(id) * stride, g, m, v);
    for (int k = 0; k < m; ++k) o[g * 32 + k] = (id >= 0 && id < rows) ? v[k] : 0.0f;
  }
}

// out[i] = round_activation(type, x[i]): what cuBLAS must multiply for F16 / BF16 weights
// (the mat-vec kernel rounds as it stages the activations).
__global__ void round_activations_kernel(GgmlType type, const float* __restrict__ x, int64_t n,
                                         float* __restrict__ out) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = round_activation(type, x[i]);
}

// Calls f.operator()<t>() with the weight type t as a template argument (each type of
// kGgmlTypes gets its own instantiation of the kernels f launches).
template <class F>
void with_type(GgmlType t, F&& f) {
  const bool known = [&]<size_t... i>(std::index_sequence<i...>) {
    return ((t == kGgmlTypes[i] && (f.template operator()<kGgmlTypes[i]>(), true)) || ...);
  }(std::make_index_sequence<std::size(kGgmlTypes)>{});
  if (!known) throw Error("cuda: unsupported weight type");
}

unsigned blocks_for(int64_t n, int64_t per_block) { return unsigned((n + per_block - 1) / per_block); }

}  // namespace

void launch_matvec(const WeightMatrix& w, const float* x, int64_t T, float* y, cudaStream_t s) {
  const auto* data = static_cast<const uint8_t*>(w.data);
  const int64_t stride = row_bytes(w.type, w.cols);
  with_type(w.type, [&]<GgmlType kType>() {
    matvec_kernel<kType><<<blocks_for(w.rows, kWarpsPerBlock), kWarpsPerBlock * 32, 0, s>>>(
        data, stride, w.rows, w.cols, x, int(T), y);
  });
  check_launch("matvec");
}

void launch_dequantize(const WeightMatrix& w, int64_t r0, int64_t n, float* out, cudaStream_t s) {
  const auto* data = static_cast<const uint8_t*>(w.data);
  const int64_t stride = row_bytes(w.type, w.cols);
  const int64_t groups = n * ((w.cols + 31) / 32);
  with_type(w.type, [&]<GgmlType kType>() {
    dequantize_kernel<kType><<<blocks_for(groups, 256), 256, 0, s>>>(data, stride, r0, n, w.cols, out);
  });
  check_launch("dequantize");
}

void launch_round_activations(GgmlType type, const float* x, int64_t n, float* out, cudaStream_t s) {
  if (n == 0) return;
  round_activations_kernel<<<blocks_for(n, 256), 256, 0, s>>>(type, x, n, out);
  check_launch("round_activations");
}

void launch_get_rows(const WeightMatrix& table, const int32_t* ids, int64_t n, float* out, cudaStream_t s) {
  if (n == 0) return;
  const auto* data = static_cast<const uint8_t*>(table.data);
  const int64_t stride = row_bytes(table.type, table.cols);
  with_type(table.type, [&]<GgmlType kType>() {
    get_rows_kernel<kType><<<unsigned(n), 128, 0, s>>>(data, stride, table.rows, table.cols, ids, out);
  });
  check_launch("get_rows");
}

}  // namespace flashspec::cuda
