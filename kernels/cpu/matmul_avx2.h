#pragma once
// The AVX2 kernels, spread over several *_avx2.cpp files and gathered into one table by
// matmul_avx2.cpp. Declarations only: safe to include from any file.
#include "kernels/cpu/matmul_internal.h"

namespace flashspec::cpu::avx2 {

void quantize_q8_0(const float* x, int64_t b0, int64_t b1, int8_t* qs, float* d, int32_t* zp,
                   int64_t stride, int32_t zp_mul);
void quantize_q8_0_pairs(const float* x, int64_t t, int64_t nb, int64_t b0, int64_t b1,
                         int8_t* pair_qs, float* pair_d, int32_t* pair_zp);
void quantize_q8_k(const float* x, int64_t b0, int64_t b1, int8_t* qs, float* d, int64_t stride,
                   int16_t* bsums);

void round_f16(const float* x, float* out, int64_t n);
void round_bf16(const float* x, float* out, int64_t n);

void gemm_q4_0(const WeightMatrix& w, const ActQ8_0& a, int64_t r0, int64_t r1, float* y);
void gemm_q5_0(const WeightMatrix& w, const ActQ8_0& a, int64_t r0, int64_t r1, float* y);
void gemm_q5_1(const WeightMatrix& w, const ActQ8_0& a, int64_t r0, int64_t r1, float* y);
void gemm_iq4_nl(const WeightMatrix& w, const ActQ8_0& a, int64_t r0, int64_t r1, float* y);
void gemm_mxfp4(const WeightMatrix& w, const ActQ8_0& a, int64_t r0, int64_t r1, float* y);

void gemm_q2_k(const WeightMatrix& w, const ActQ8_K& a, int64_t r0, int64_t r1, float* y);
void gemm_q3_k(const WeightMatrix& w, const ActQ8_K& a, int64_t r0, int64_t r1, float* y);
void gemm_q4_k(const WeightMatrix& w, const ActQ8_K& a, int64_t r0, int64_t r1, float* y);
void gemm_q5_k(const WeightMatrix& w, const ActQ8_K& a, int64_t r0, int64_t r1, float* y);
void gemm_q6_k(const WeightMatrix& w, const ActQ8_K& a, int64_t r0, int64_t r1, float* y);
void gemm_f32(const WeightMatrix& w, const float* x, int64_t T, int64_t r0, int64_t r1, float* y);
void gemm_f16(const WeightMatrix& w, const float* x, int64_t T, int64_t r0, int64_t r1, float* y);
void gemm_bf16(const WeightMatrix& w, const float* x, int64_t T, int64_t r0, int64_t r1, float* y);

}  // namespace flashspec::cpu::avx2
