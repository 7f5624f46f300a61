#include "kernels/cpu/quantize_activations.h"

#include <cmath>
#include <cstring>

#include "core/half.h"
#include "kernels/cpu/matmul.h"
#include "kernels/q8_rule.h"

namespace flashspec {

namespace {

inline float block_amax(const float* x, int n) {
  float amax = 0.0f;
  for (int i = 0; i < n; ++i) amax = std::fmax(amax, std::fabs(x[i]));
  return amax;
}

}  // namespace

uint16_t quantize_block_q8_0(const float* x, int8_t* q) {
  const Q8Scale s = q8_scale(block_amax(x, QK8_0));
  for (int i = 0; i < QK8_0; ++i) q[i] = q8_code_ties_even(x[i] * s.id);
  return float_to_fp16(s.d);
}

float quantize_block_q8_k(const float* x, int8_t* q, int16_t* bsums) {
  const Q8Scale s = q8_scale(block_amax(x, QK_K));
  for (int i = 0; i < QK_K; ++i) q[i] = q8_code_ties_even(x[i] * s.id);
  for (int g = 0; g < QK_K / 16; ++g) {
    int sum = 0;
    for (int i = 0; i < 16; ++i) sum += q[16 * g + i];
    bsums[g] = int16_t(sum);
  }
  return s.d;
}

void quantize_row_q8_0(const float* x, BlockQ8_0* y, int64_t n) {
  for (int64_t b = 0; b < n / QK8_0; ++b) y[b].d = quantize_block_q8_0(x + b * QK8_0, y[b].qs);
}

void quantize_row_q8_k(const float* x, BlockQ8K* y, int64_t n) {
  for (int64_t b = 0; b < n / QK_K; ++b)
    y[b].d = quantize_block_q8_k(x + b * QK_K, y[b].qs, y[b].bsums);
}

void dequantize_row_q8_k(const BlockQ8K* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / QK_K; ++b)
    for (int i = 0; i < QK_K; ++i) y[b * QK_K + i] = x[b].d * float(x[b].qs[i]);
}

void round_row_f16(const float* x, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = fp16_to_float(float_to_fp16(x[i]));
}

void round_row_bf16(const float* x, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t u = float_to_bits(x[i]);
    uint32_t r;
    if ((u & 0x7fffffffu) > 0x7f800000u)
      r = (u | 0x00400000u) & 0xffff0000u;  // NaN: kept, made quiet
    else
      r = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;  // nearest even; may carry to inf
    out[i] = bits_to_float(r);
  }
}

void activation_roundtrip(GgmlType weight_type, const float* x, float* out, int64_t n) {
  switch (weight_type) {
    case GgmlType::Q4_0:
    case GgmlType::Q5_0:
    case GgmlType::Q5_1:
    case GgmlType::Q8_0:
    case GgmlType::IQ4_NL:
    case GgmlType::MXFP4:
      for (int64_t b = 0; b < n / QK8_0; ++b) {
        BlockQ8_0 blk;
        blk.d = quantize_block_q8_0(x + b * QK8_0, blk.qs);
        dequantize_row(GgmlType::Q8_0, &blk, out + b * QK8_0, QK8_0);
      }
      return;
    case GgmlType::Q2_K:
    case GgmlType::Q3_K:
    case GgmlType::Q4_K:
    case GgmlType::Q5_K:
    case GgmlType::Q6_K:
      for (int64_t b = 0; b < n / QK_K; ++b) {
        BlockQ8K blk;
        blk.d = quantize_block_q8_k(x + b * QK_K, blk.qs, blk.bsums);
        dequantize_row_q8_k(&blk, out + b * QK_K, QK_K);
      }
      return;
    case GgmlType::F16: return round_row_f16(x, out, n);
    case GgmlType::BF16: return round_row_bf16(x, out, n);
    case GgmlType::F32:
      std::memcpy(out, x, size_t(n) * sizeof(float));
      return;
  }
}

}  // namespace flashspec
