#pragma once
// Quantization of f32 activation rows to the 8-bit formats the quantized matmul kernels
// multiply (llama.cpp's Q8_0 for Q4_0/Q5_0/Q5_1/Q8_0/IQ4_NL/MXFP4 weights, Q8_K for the
// K-quants), and
// the exact way back, so tests can build references from the very values the kernels use.
//
// Every ISA's quantizer reproduces these scalar functions bit for bit: kernels/q8_rule.h's
// rule with ties to even; Q8_0 keeps d rounded to fp16, Q8_K as float.
#include <cstdint>

#include "core/ggml_type.h"

namespace flashspec {

struct BlockQ8K {  // 256 activations: x ~= d * q
  float d;
  int8_t qs[QK_K];
  int16_t bsums[QK_K / 16];  // sums of each 16 consecutive qs (mins and offsets of K-quants)
};

// One block of 32 into q; returns the fp16 bits of the block scale.
uint16_t quantize_block_q8_0(const float* x, int8_t* q);
// One block of 256 into q and bsums; returns the block scale.
float quantize_block_q8_k(const float* x, int8_t* q, int16_t* bsums);

void quantize_row_q8_0(const float* x, BlockQ8_0* y, int64_t n);
void quantize_row_q8_k(const float* x, BlockQ8K* y, int64_t n);
void dequantize_row_q8_k(const BlockQ8K* x, float* y, int64_t n);

// Each x[i] rounded (to nearest even) to fp16 / bf16 and widened back to float: what
// F16 / BF16 weights multiply. Overflow gives infinity, as the conversions do.
void round_row_f16(const float* x, float* out, int64_t n);
void round_row_bf16(const float* x, float* out, int64_t n);

// What a matmul with weights of `weight_type` actually multiplies x by: x quantized to
// Q8_0 / Q8_K and dequantized back for quantized weights, x rounded to fp16 / bf16 for
// F16 / BF16 weights, x itself for F32.
void activation_roundtrip(GgmlType weight_type, const float* x, float* out, int64_t n);

}  // namespace flashspec
