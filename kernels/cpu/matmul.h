#pragma once
// Batched matrix multiply of a weight matrix in any supported GGML type by T float
// activation rows: the one hot loop of the CPU backend.
#include <cstdint>

#include "core/ggml_type.h"
#include "kernels/weight_matrix.h"
#include "kernels/cpu/thread_pool.h"

namespace flashspec {

// y[t][r] = sum_c W[r][c] * x[t][c] for t < T.  x is T x cols, y is T x rows, both
// row-major and dense.  As in llama.cpp, quantized weights multiply activations quantized
// to 8 bits per block (Q8_0 for Q4_0, Q5_0, Q5_1, Q8_0, IQ4_NL and MXFP4; Q8_K for the K-quants),
// F16 / BF16 weights multiply the activations rounded to fp16 / bf16, and F32 weights the
// f32 activations.  Work is split over the pool's threads.
void matmul(const WeightMatrix& w, const float* x, int64_t T, float* y, ThreadPool& pool);

// Dequantizes n elements (a whole number of blocks) of `type` at src into dst.
void dequantize_row(GgmlType type, const void* src, float* dst, int64_t n);

// Name of the SIMD level matmul dispatches to on this CPU ("amx", "avx512vnni", "avx512",
// "avx2", "scalar").
const char* matmul_isa();

// The layout matmul() multiplies `w` (row layout) fastest in on this CPU: Lanes16 for Q4_0
// where the AVX-512 VNNI kernels run (kernels/cpu/pack_weights.h), else Rows.
WeightLayout fastest_layout(const WeightMatrix& w);

}  // namespace flashspec
