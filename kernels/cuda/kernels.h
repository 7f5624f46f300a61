#pragma once
// Launchers of the CUDA backend's kernels (kernels/cuda/*.cu), each queued on `s`.
// Pointers are device memory; shapes as in kernels/backend.h.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/backend.h"
#include "kernels/backend_buffer.h"

namespace flashspec::cuda {

// The mat-vec kernel reads each weight once for up to this many activation rows.
inline constexpr int64_t kMatvecMaxT = 8;

void launch_get_rows(const WeightMatrix& table, const int32_t* ids, int64_t n, float* out, cudaStream_t s);
// y = W x for T <= kMatvecMaxT rows of x.
void launch_matvec(const WeightMatrix& w, const float* x, int64_t T, float* y, cudaStream_t s);
// The 8-bit-activation matmul (matvec_q8.cu) takes W: Q4_0, Q8_0, Q4_K, Q6_K or MXFP4, aligned
// for its loads.
bool matvec_q8_applies(const WeightMatrix& w);
// Device scratch the 8-bit-activation matmul needs for T activation rows.
size_t matvec_q8_scratch_bytes(const WeightMatrix& w, int64_t T);
// The 8-bit-activation matmul reads each weight once for up to this many activation rows
// (a tree pass of 16 nodes reads its weights once).
inline constexpr int64_t kMatvecQ8MaxT = 16;
// y = W x for any T (in launches of kMatvecQ8MaxT rows); scratch holds
// matvec_q8_scratch_bytes(w, T) bytes (none for one row of up to 14336 values). The grid
// has at most blocks_per_sm blocks per multiprocessor (each fused one quantizes the row).
inline constexpr int kMatvecQ8BlocksPerSm = 4;
void launch_matvec_q8(const WeightMatrix& w, const float* x, int64_t T, float* y, int sm_count, void* scratch,
                      cudaStream_t s, int blocks_per_sm = kMatvecQ8BlocksPerSm);
// n activations rounded as F16 / BF16 weights multiply them (out may not alias x).
void launch_round_activations(GgmlType type, const float* x, int64_t n, float* out, cudaStream_t s);
// Rows [r0, r0 + n) of W as f32, row-major n x cols.
void launch_dequantize(const WeightMatrix& w, int64_t r0, int64_t n, float* out, cudaStream_t s);
void launch_rmsnorm(const float* x, const float* weight, int64_t T, int64_t dim, float eps, float* y,
                    cudaStream_t s);
void launch_rope(float* x, const int32_t* positions, int64_t T, int64_t n_heads, int64_t head_dim,
                 const RopeParams& r, float theta_scale, cudaStream_t s);
void launch_attention(const AttentionArgs& a, cudaStream_t s);
void launch_store_f16(const float* src, uint16_t* dst, int64_t n, cudaStream_t s);
// n floats (a multiple of 32) as ggml Q8_0 blocks, as the CPU backend stores them.
void launch_store_q8_0(const float* src, uint8_t* dst, int64_t n, cudaStream_t s);
void launch_silu_mul(float* gate, const float* up, int64_t n, cudaStream_t s);
void launch_swiglu_oai(float* gate, const float* up, int64_t n, cudaStream_t s);
void launch_add(float* y, const float* x, int64_t n, cudaStream_t s);
void launch_add_bias(float* y, const float* bias, int64_t T, int64_t n, cudaStream_t s);

// rows.cu: Gemma's, the hybrids' and the experts' row ops. Index and weight arrays are
// device memory here (the backend uploads the host's).
void launch_gelu_mul(float* gate, const float* up, int64_t n, cudaStream_t s);
void launch_scale(float* x, float v, int64_t n, cudaStream_t s);
void launch_deinterleave(const float* x, int64_t n_blocks, int64_t width, float* first, float* second,
                         cudaStream_t s);
void launch_sigmoid_mul(float* y, const float* g, int64_t T, int64_t n, bool per_row, cudaStream_t s);
void launch_gather_rows(const float* x, const int32_t* rows, int64_t n, int64_t width, float* y, cudaStream_t s);
void launch_weighted_sum_rows(const float* x, const int32_t* slots, const float* weights, int64_t T, int64_t k,
                              int64_t width, float* y, cudaStream_t s);

// Gated DeltaNet (delta_net.cu). Device scratch reused from call to call: the uploaded
// plan, the rows after the convolution, the gates, the states saved at a tree's branch
// points, a replay's row list.
struct DeltaNetScratch {
  BackendBuffer plan, mixed, gates, slots, replay_rows;
};
// Error (one line) when the device's `max_shared` bytes per block, or the kernels, cannot
// take states of S x S or a convolution of conv_kernel taps.
void check_delta_net_fits(int64_t conv_kernel, int64_t S, size_t max_shared);
// One call (kernels/delta_net.h): every pointer but the parents and the spans of state
// pointers is device memory. Scratch grows through `be` (this backend).
void launch_delta_net(const DeltaNetCall& c, DeltaNetScratch& scratch, Backend& be, size_t max_shared,
                      cudaStream_t s);
void launch_delta_replay(const DeltaReplay& r, DeltaNetScratch& scratch, Backend& be, cudaStream_t s);

}  // namespace flashspec::cuda
