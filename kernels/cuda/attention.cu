// Masked (tree) attention over the KV cache, with the CPU backend's rounding: fp16 keys
// round the query to fp16 before its dot products, fp16 values round the probabilities
// (normalised) to fp16 before they weight the value rows; an f32 or q8_0 side rounds
// nothing (q8_0 values read as scale * code, as the CPU dequantizes them); exp() cut to 0
// below -88. Keys and values may have different types (-ctk/-ctv). Sliding windows, their
// rings and sinks as AttentionArgs defines them.
//
// One block per (query row, head), three sweeps over the keys: the maximum score, the
// sum of exponentials, then the weighted sum of value rows in chunks whose
// probabilities are staged in shared memory. Scores are recomputed in each sweep rather
// than stored, so the context length needs no shared memory of its own.
#include <cuda_fp16.h>

#include "core/error.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/reduce.cuh"

namespace flashspec::cuda {

namespace {

constexpr int kThreads = 256;   // also the largest head_dim (one output dim per thread)
constexpr int kChunk = 1024;    // keys whose probabilities are staged at a time

__device__ float round_f16(float v) { return __half2float(__float2half_rn(v)); }

// A cache side's element type: value i of cache row `row` (rows of row_len values), and
// how the other operand of its products (q for keys, p for values) rounds.
struct F16Cache {
  __device__ static float at(const void* base, int64_t row, int64_t i, int64_t row_len) {
    return __half2float(static_cast<const __half*>(base)[row * row_len + i]);
  }
  __device__ static float round(float v) { return round_f16(v); }
};
struct F32Cache {
  __device__ static float at(const void* base, int64_t row, int64_t i, int64_t row_len) {
    return static_cast<const float*>(base)[row * row_len + i];
  }
  __device__ static float round(float v) { return v; }
};
// ggml Q8_0: a row is row_len / 32 blocks of 34 bytes (fp16 scale, 32 int8 codes). Blocks
// are cut from the whole row, so with head_dim 16 one block holds parts of two heads:
// values are addressed by their index in the row, never by head.
struct Q8Cache {
  __device__ static float at(const void* base, int64_t row, int64_t i, int64_t row_len) {
    const uint8_t* block = static_cast<const uint8_t*>(base) + row * (row_len / 32 * 34) + i / 32 * 34;
    const float d = __half2float(*reinterpret_cast<const __half*>(block));
    return d * float(int8_t(block[2 + i % 32]));
  }
  __device__ static float round(float v) { return v; }
};

template <class KCache, class VCache>
__global__ void attention_kernel(AttentionArgs a) {
  __shared__ float q16[kThreads];
  __shared__ float prob[kChunk];
  __shared__ float scratch[32];
  __shared__ int64_t window_lo, window_cut;  // keys before position window_lo, masked rows before window_cut: hidden
  const int64_t h = blockIdx.x, t = blockIdx.y;
  const int64_t hd = a.head_dim, g = h / (a.n_heads / a.n_kv_heads);
  const int64_t kv_stride = a.n_kv_heads * hd, n_keys = a.n_past + a.n_masked;
  const float* q = a.q + (t * a.n_heads + h) * hd;
  const uint8_t* mrow = a.mask ? a.mask + t * a.n_masked : nullptr;
  const int64_t causal_limit = a.n_masked - a.T + t;  // without a mask: the last masked row t sees
  const int64_t first = g * hd;                        // this KV head's first value in a row
  // The cache row of position j: in a window's ring, j mod its rows (a position the
  // window hides may have been overwritten, but is never read).
  auto row = [&](int64_t j) { return a.ring_rows > 0 ? j % a.ring_rows : j; };

  for (int64_t d = threadIdx.x; d < hd; d += blockDim.x) q16[d] = KCache::round(q[d]);
  if (threadIdx.x == 0 && a.window > 0) {
    // The row's position: a causal row's own; a tree row's from its path's length (its
    // masked rows), whose first rows fall out of the window past `window` of them.
    int64_t position = a.n_past + causal_limit, cut = 0;
    if (mrow) {
      int64_t path = 0;
      for (int64_t m = a.n_masked - 1; m >= 0; --m)
        if (mrow[m] && ++path == a.window) cut = m;
      position = a.n_past + path - 1;
    }
    window_lo = position - a.window + 1;
    window_cut = cut;
  }
  __syncthreads();

  // Score of key j, or -inf where the mask or the window hides it.
  auto score = [&](int64_t j) {
    if (j >= a.n_past && (mrow ? !mrow[j - a.n_past] : j - a.n_past > causal_limit)) return -INFINITY;
    if (a.window > 0 && (mrow && j >= a.n_past ? j - a.n_past < window_cut : j < window_lo)) return -INFINITY;
    float s = 0.0f;
    const int64_t r = row(j);
    for (int64_t d = 0; d < hd; ++d) s += q16[d] * KCache::at(a.k, r, first + d, kv_stride);
    return s * a.scale;
  };
  auto weight = [&](float s, float mx) {  // exp(s - mx), 0 below the cut (and for masked keys)
    const float z = s - mx;
    return z >= -88.0f ? expf(z) : 0.0f;
  };

  const float sink = a.sinks ? a.sinks[h] : -INFINITY;  // one more score, with no value
  float mx = -INFINITY;
  for (int64_t j = threadIdx.x; j < n_keys; j += blockDim.x) mx = fmaxf(mx, score(j));
  mx = fmaxf(block_reduce(mx, Max{}, scratch), sink);

  float sum = 0.0f;
  for (int64_t j = threadIdx.x; j < n_keys; j += blockDim.x) sum += weight(score(j), mx);
  sum = block_reduce(sum, Sum{}, scratch) + weight(sink, mx);
  const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;  // a fully masked row attends to nothing

  float acc = 0.0f;  // output dim threadIdx.x
  for (int64_t c0 = 0; c0 < n_keys; c0 += kChunk) {
    const int64_t n = min(int64_t(kChunk), n_keys - c0);
    __syncthreads();  // the previous chunk's probabilities have been used
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      const float p = weight(score(c0 + j), mx);
      prob[j] = p == 0.0f ? 0.0f : VCache::round(p * inv);
    }
    __syncthreads();
    if (threadIdx.x < hd) {
      for (int64_t j = 0; j < n; ++j)
        if (prob[j] != 0.0f) acc += prob[j] * VCache::at(a.v, row(c0 + j), first + threadIdx.x, kv_stride);
    }
  }
  if (threadIdx.x < hd) a.out[(t * a.n_heads + h) * hd + threadIdx.x] = acc;
}

// Calls f(Cache{}) with the Cache struct of type t.
template <class F>
void with_cache(KvType t, const AttentionArgs& a, F&& f) {
  switch (t) {
    case KvType::F32: return f(F32Cache{});
    case KvType::F16: return f(F16Cache{});
    case KvType::Q8_0:
      if (a.n_kv_heads * a.head_dim % 32) throw Error("cuda: q8_0 cache rows must hold a multiple of 32 values");
      return f(Q8Cache{});
  }
}

}  // namespace

void launch_attention(const AttentionArgs& a, cudaStream_t s) {
  if (a.head_dim > kThreads) throw Error("cuda: attention supports head dims up to 256, not " + std::to_string(a.head_dim));
  if (a.n_kv_heads < 1 || a.n_heads % a.n_kv_heads) throw Error("cuda: attention heads do not group into KV heads");
  const dim3 grid(unsigned(a.n_heads), unsigned(a.T));
  with_cache(a.k_type, a, [&](auto k) {
    with_cache(a.v_type, a, [&](auto v) {
      attention_kernel<decltype(k), decltype(v)><<<grid, kThreads, 0, s>>>(a);
    });
  });
  check_launch("attention");
}

}  // namespace flashspec::cuda
