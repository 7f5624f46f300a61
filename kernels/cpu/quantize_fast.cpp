#include "kernels/cpu/quantize_fast.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "core/error.h"
#include "core/half.h"
#include "kernels/q8_rule.h"

namespace flashspec {

namespace {

// The value of largest magnitude, with its sign: symmetric formats map it to the grid's
// most negative code, which has one more step than the positive side.
float signed_max(const float* x) {
  float best = 0.0f;
  for (int i = 0; i < 32; ++i)
    if (std::fabs(x[i]) > std::fabs(best)) best = x[i];
  return best;
}

int clamp_code(float v, int hi) { return std::clamp(int(v), 0, hi); }

void pack_nibbles(const int* q, uint8_t* qs) {
  for (int i = 0; i < 16; ++i) qs[i] = uint8_t((q[i] & 15) | ((q[i + 16] & 15) << 4));
}

void pack_high_bits(const int* q, uint8_t* qh) {
  uint32_t bits = 0;
  for (int i = 0; i < 32; ++i) bits |= uint32_t((q[i] >> 4) & 1) << i;
  std::memcpy(qh, &bits, 4);
}

// The stored-block rule of kernels/q8_rule.h.
void q8_0(const float* x, BlockQ8_0& b) {
  float amax = 0.0f;
  for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[i]));
  const Q8Scale s = q8_scale(amax);
  b.d = float_to_fp16(s.d);
  for (int i = 0; i < 32; ++i) b.qs[i] = q8_code_ties_away(x[i] * s.id);
}

// Q4_0 and Q5_0: w = d * (q - zero), the block's signed extreme at code 0.
template <class Block, int kLevels>
void symmetric(const float* x, Block& b) {
  constexpr int zero = kLevels / 2;
  const float d = signed_max(x) / -float(zero), id = d != 0.0f ? 1.0f / d : 0.0f;
  b.d = float_to_fp16(d);
  int q[32];
  for (int i = 0; i < 32; ++i) q[i] = clamp_code(x[i] * id + float(zero) + 0.5f, kLevels - 1);
  pack_nibbles(q, b.qs);
  if constexpr (kLevels == 32) pack_high_bits(q, b.qh);
}

void q5_1(const float* x, BlockQ5_1& b) {
  const float lo = *std::min_element(x, x + 32), hi = *std::max_element(x, x + 32);
  const float d = (hi - lo) / 31.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
  b.d = float_to_fp16(d);
  b.m = float_to_fp16(lo);
  int q[32];
  for (int i = 0; i < 32; ++i) q[i] = clamp_code((x[i] - lo) * id + 0.5f, 31);
  pack_nibbles(q, b.qs);
  pack_high_bits(q, b.qh);
}

// quantize(x, block) for each block of 32 of the n values at src.
template <class Block, class Quantize>
void each_block(const float* src, void* dst, int64_t n, Quantize quantize) {
  auto* blocks = static_cast<Block*>(dst);
  for (int64_t b = 0; b < n / 32; ++b) quantize(src + b * 32, blocks[b]);
}

}  // namespace

bool can_quantize_fast(GgmlType t) {
  return t == GgmlType::Q8_0 || t == GgmlType::Q4_0 || t == GgmlType::Q5_0 || t == GgmlType::Q5_1;
}

void quantize_row_fast(GgmlType type, const float* src, void* dst, int64_t n) {
  if (!can_quantize_fast(type) || n % 32 != 0)
    throw Error("internal: fast quantization to " + std::string(type_name(type)) + " of " + std::to_string(n) +
                " values");
  switch (type) {
    case GgmlType::Q8_0: return each_block<BlockQ8_0>(src, dst, n, q8_0);
    case GgmlType::Q4_0: return each_block<BlockQ4_0>(src, dst, n, symmetric<BlockQ4_0, 16>);
    case GgmlType::Q5_0: return each_block<BlockQ5_0>(src, dst, n, symmetric<BlockQ5_0, 32>);
    case GgmlType::Q5_1: return each_block<BlockQ5_1>(src, dst, n, q5_1);
    default: return;
  }
}

}  // namespace flashspec
