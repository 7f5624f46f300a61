// The matmul of Q4_0, Q8_0, Q4_K, Q6_K and MXFP4 weights on 8-bit activations (q8_dot.cuh says
// why), for any number of activation rows: kMatvecQ8MaxT rows per weight read.
//
// A warp takes a tile of a few output rows at a time, lane l taking groups l, l + 32, ...
// of each (matvec_rows says how the rows' bytes reach it). Activations
// are laid out as Q8Group fields in three arrays (Q8Rows): the first and the second int4 of
// each group's codes, and its (scale, sum) float2, activation row t's groups at
// [t * groups, (t + 1) * groups): lanes reading consecutive groups read 16-byte strides,
// which shared memory serves without bank conflicts.
//
// For one activation row (decoding) each block quantizes the row into shared memory
// itself and then walks its tiles: a separate quantizing kernel would add a
// launch to every matmul, which at decode sizes costs about as much as the mat-vec. For
// more rows a quantizing kernel writes the codes to device memory once and every block
// reads them (from L1 / L2: they are small next to the weights). Large batches (prefill)
// stay here rather than going to cuBLAS: 8 rows per weight read already outrun
// dequantizing the weights to f32 for cuBLAS, and the numbers stay the CPU backend's.
#include <algorithm>
#include <utility>

#include <cuda_pipeline.h>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/matvec_tiles.cuh"
#include "kernels/cuda/q8_dot.cuh"

namespace flashspec::cuda {

namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
// Shared memory holds one quantized activation row of up to this many values (1.25
// bytes per value; an 8B model's widest, its FFN's) beside the staging buffers, within the
// 48 KiB a block gets without opting in; wider rows take the two-kernel path.
constexpr int64_t kFusedMaxCols = 14336;

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

// Shared memory a block's warps stage their steps in.
template <GgmlType kType>
constexpr size_t staging_bytes() {
  return size_t(kWarps) * Tile<kType>::stages * Tile<kType>::step_words * sizeof(int4);
}
template <GgmlType kType>
constexpr bool fused_fits() {
  return activation_words(kFusedMaxCols / 32) * sizeof(int4) + staging_bytes<kType>() <= 48 * 1024;
}
static_assert(fused_fits<GgmlType::Q4_0>() && fused_fits<GgmlType::Q8_0>() && fused_fits<GgmlType::Q4_K>() &&
                  fused_fits<GgmlType::Q6_K>() && fused_fits<GgmlType::MXFP4>(),
              "the fused kernel's shared memory: 48 KiB without opting in");

// Queues the copies of step i into `slot` as one commit group (empty past the last step,
// so that waits count groups alike).
template <GgmlType kType>
__device__ void issue_step(const WarpRows& wr, int64_t i, int4* slot, int lane) {
  if (i < wr.steps) {
    const Step st = step_of(wr, i, Tile<kType>::rows);
#pragma unroll
    for (int k = 0; k < Tile<kType>::rows; ++k) {
      const StepCopy cp = step_copy<kType>(wr, st, k);
      const int4* from = reinterpret_cast<const int4*>(cp.from);
      for (int j = lane; j < cp.count; j += 32) __pipeline_memcpy_async(slot + k * Chunk<kType>::words + j, from + j, 16);
    }
  }
  __pipeline_commit();
}

// A warp multiplies Tile::rows weight rows at once, 32 groups (for K-quants: 4
// super-blocks) of each per step, lane l computing group l of the step's chunk: each
// activation group a lane loads serves every row of the tile, which keeps the shared-memory
// and L1 traffic of the activations below the weights' own (the first GPU runs found the
// kernel bound by load instructions, not by the device's bandwidth). A step's chunks are
// copied from device memory into shared memory with asynchronous 16-byte copies in one
// contiguous run per row (read in place, an 18-byte Q4_0 group costs nine 16-bit loads),
// Tile::stages - 1 steps ahead, so that a warp keeps that many steps' bytes in flight
// while it computes: a kernel that waited for each chunk was bound by the memory latency,
// a warp's chunks running one after another. The steps of all the tiles a warp takes form
// one pipeline, so a warp ramps up once, not once per row (matvec_tiles.cuh: which bytes).
//
// y[t * rows + r] for the rows of wr, T <= kMaxT activation rows. The caller has issued
// steps 0 .. stages - 2 (the fused kernel does so before it quantizes the activations).
template <GgmlType kType, int kMaxT>
__device__ void matvec_rows(const WarpRows& wr, int64_t groups, Q8Rows q, int T, int4* staging,
                            float* __restrict__ y) {
  constexpr int R = Tile<kType>::rows, S = Tile<kType>::stages;
  const int lane = int(threadIdx.x) & 31;
  float acc[R][kMaxT];
  for (int64_t i = 0; i < wr.steps; ++i) {
    issue_step<kType>(wr, i + S - 1, staging + ((i + S - 1) % S) * Tile<kType>::step_words, lane);
    __pipeline_wait_prior(S - 1);  // this lane's copies of step i are done ...
    __syncwarp();                  // ... and every lane's
    const Step st = step_of(wr, i, R);
    const int64_t c = st.chunk;
    if (c == 0) {
#pragma unroll
      for (int k = 0; k < R; ++k)
#pragma unroll
        for (int t = 0; t < kMaxT; ++t) acc[k][t] = 0.0f;
    }
    const int64_t g = c * 32 + lane;
    if (g < groups) {
      const int4* slot = staging + (i % S) * Tile<kType>::step_words;
      W8Group wg[R];
#pragma unroll
      for (int k = 0; k < R; ++k) {
        const int skew = step_copy<kType>(wr, st, k).skew;
        wg[k] = q8_weight_group<kType>(reinterpret_cast<const uint8_t*>(slot + k * Chunk<kType>::words) + skew, lane);
      }
#pragma unroll
      for (int t = 0; t < kMaxT; ++t) {
        if (t < T) {
          const Q8Group a = load_group(q, int64_t(t) * groups + g);
#pragma unroll
          for (int k = 0; k < R; ++k) acc[k][t] += q8_dot(wg[k], a);
        }
      }
    }
    __syncwarp();  // every lane is done with slot i % S before step i + S is copied into it
    if (c + 1 == wr.chunks) {
#pragma unroll
      for (int k = 0; k < R; ++k) {
        const int64_t r = st.row0 + k;
#pragma unroll
        for (int t = 0; t < kMaxT; ++t) {
          if (t < T) {
            float v = acc[k][t];
            for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
            if (lane == 0 && r < wr.rows) y[int64_t(t) * wr.rows + r] = v;
          }
        }
      }
    }
  }
  __pipeline_wait_prior(0);  // no copy outlives the kernel
}

// This warp's rows: tiles spread over the grid's warps in turn.
template <GgmlType kType>
__device__ WarpRows this_warp_rows(const uint8_t* w, int64_t stride, int64_t rows, int64_t groups) {
  return warp_rows<kType>(w, stride, rows, groups, int64_t(blockIdx.x) * kWarps + (threadIdx.x >> 5),
                          int64_t(gridDim.x) * kWarps);
}

template <GgmlType kType>
__device__ int4* warp_staging(int4* staging) {
  return staging + size_t(threadIdx.x >> 5) * Tile<kType>::stages * Tile<kType>::step_words;
}

template <GgmlType kType>
__device__ void issue_first_steps(const WarpRows& wr, int4* staging) {
  for (int s = 0; s + 1 < Tile<kType>::stages; ++s)
    issue_step<kType>(wr, s, staging + s * Tile<kType>::step_words, int(threadIdx.x) & 31);
}

// One activation row, quantized by each block into shared memory while the first weight
// steps are copied.
template <GgmlType kType>
__global__ void matvec_q8_fused_kernel(const uint8_t* __restrict__ w, int64_t stride, int64_t rows, int64_t groups,
                                       const float* __restrict__ x, float* __restrict__ y) {
  extern __shared__ int4 smem[];
  const Q8Rows q{smem, smem + groups, reinterpret_cast<float2*>(smem + 2 * groups)};
  int4* staging = warp_staging<kType>(smem + activation_words(groups));
  const WarpRows wr = this_warp_rows<kType>(w, stride, rows, groups);
  issue_first_steps<kType>(wr, staging);
  quantize_groups<kType>(x, groups, int(threadIdx.x >> 5), kWarps, q);
  __syncthreads();
  matvec_rows<kType, 1>(wr, groups, q, 1, staging, y);
}

template <GgmlType kType>
__global__ void matvec_q8_kernel(const uint8_t* __restrict__ w, int64_t stride, int64_t rows, int64_t groups,
                                 Q8Rows q, int T, float* __restrict__ y) {
  extern __shared__ int4 smem[];
  int4* staging = warp_staging<kType>(smem);
  const WarpRows wr = this_warp_rows<kType>(w, stride, rows, groups);
  issue_first_steps<kType>(wr, staging);
  matvec_rows<kType, kMatvecQ8MaxT>(wr, groups, q, T, staging, y);
}

template <class F>
void with_q8_type(GgmlType t, F&& f) {
  switch (t) {
    case GgmlType::Q4_0: return f.template operator()<GgmlType::Q4_0>();
    case GgmlType::Q8_0: return f.template operator()<GgmlType::Q8_0>();
    case GgmlType::Q4_K: return f.template operator()<GgmlType::Q4_K>();
    case GgmlType::Q6_K: return f.template operator()<GgmlType::Q6_K>();
    case GgmlType::MXFP4: return f.template operator()<GgmlType::MXFP4>();
    default: throw Error("cuda: no 8-bit-activation mat-vec for this weight type");
  }
}

// Blocks of `kernel` that fit on a multiprocessor at once with `smem` bytes of shared memory
// each (registers permitting): a grid past that many per multiprocessor runs a second,
// partial wave, which left part of the device idle while the rest finished.
template <class Kernel>
int resident_per_sm(Kernel kernel, size_t smem) {
  int n = 0;
  check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, kThreads, smem), "occupancy");
  return std::max(n, 1);
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
    // One tile per warp, or fewer warps where the grid would pass blocks_per_sm blocks per
    // multiprocessor (they then take several tiles in turn): each fused block quantizes
    // the activations once for all its tiles.
    // Asked once per kernel (the fused kernel at its largest shared memory).
    static const int fused_resident = resident_per_sm(
        matvec_q8_fused_kernel<kType>, size_t(activation_words(kFusedMaxCols / 32)) * sizeof(int4) + staging_bytes<kType>());
    static const int batched_resident = resident_per_sm(matvec_q8_kernel<kType>, staging_bytes<kType>());
    const int64_t tiles = (w.rows + Tile<kType>::rows - 1) / Tile<kType>::rows;
    const auto blocks_at_most = [&](int resident) {
      const int64_t most = int64_t(std::clamp(blocks_per_sm, 1, resident)) * std::max(sm_count, 1);
      return unsigned(std::clamp<int64_t>((tiles + kWarps - 1) / kWarps, 1, most));
    };
    if (fused(w, T)) {
      const unsigned blocks = blocks_at_most(fused_resident);
      const size_t smem = size_t(activation_words(groups)) * sizeof(int4) + staging_bytes<kType>();
      matvec_q8_fused_kernel<kType><<<blocks, kThreads, smem, s>>>(data, stride, w.rows, groups, x, y);
      check_launch("matvec_q8_fused");
      return;
    }
    const unsigned blocks = blocks_at_most(batched_resident);
    const int64_t n = T * groups, runs = (n + 7) / 8;
    auto* codes = static_cast<int4*>(scratch);
    const Q8Rows q{codes, codes + n, reinterpret_cast<float2*>(codes + 2 * n)};
    quantize_activations_kernel<kType><<<unsigned((runs + kWarps - 1) / kWarps), kThreads, 0, s>>>(x, n, q);
    check_launch("quantize_activations");
    for (int64_t t0 = 0; t0 < T; t0 += kMatvecQ8MaxT) {
      const int64_t at = t0 * groups;
      matvec_q8_kernel<kType><<<blocks, kThreads, staging_bytes<kType>(), s>>>(
          data, stride, w.rows, groups, Q8Rows{q.lo + at, q.hi + at, q.scales + at},
          int(std::min(kMatvecQ8MaxT, T - t0)), y + t0 * w.rows);
    }
    check_launch("matvec_q8");
  });
}

}  // namespace flashspec::cuda
