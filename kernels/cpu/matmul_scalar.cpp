// Portable kernels: the fallback on CPUs without AVX2, and the plainest statement of each
// format's arithmetic. Straightforward loops; one weight block is decoded once and reused
// for every token, so batched calls still read the weights once, and each output is
// computed the same way whatever the batch (batch invariance).
#include <cstring>
#include <type_traits>

#include "core/half.h"
#include "kernels/cpu/kquant_scales.h"
#include "kernels/cpu/matmul_internal.h"
#include "kernels/cpu/quantize_activations.h"

namespace flashspec::cpu {

namespace {

void quantize_q8_0(const float* x, int64_t b0, int64_t b1, int8_t* qs, float* d, int32_t* zp,
                   int64_t stride, int32_t zp_mul) {
  for (int64_t b = b0; b < b1; ++b) {
    int8_t* q = qs + b * QK8_0;
    d[b * stride] = fp16_to_float(quantize_block_q8_0(x + b * QK8_0, q));
    int32_t s = 0;
    for (int i = 0; i < QK8_0; ++i) s += q[i];
    zp[b * stride] = -zp_mul * s;
  }
}

void quantize_q8_k(const float* x, int64_t b0, int64_t b1, int8_t* qs, float* d, int64_t stride,
                   int16_t* bsums) {
  for (int64_t b = b0; b < b1; ++b)
    d[b * stride] = quantize_block_q8_k(x + b * QK_K, qs + b * QK_K, bsums + b * (QK_K / 16));
}

// Shared skeleton of the Q8_0-activation kernels: decode(row block, int8 out[32]) gives
// the block's integer weights and returns its scale. With kMin, decode returns {scale,
// min} of a block w = d * q + m, and m multiplies the activation block's sum.
struct ScaleMin {
  float d, m;
};

template <class Block, bool kMin = false, class Decode>
void gemm_q8_0_act(const WeightMatrix& w, const ActQ8_0& a, int64_t r0, int64_t r1, float* y,
                   Decode decode) {
  const int64_t nb = w.cols / 32;
  const int64_t T = a.T;
  const int64_t stride = row_bytes(w.type, w.cols);
  float acc[8];
  int8_t q[32];
  for (int64_t r = r0; r < r1; ++r) {
    const auto* row = reinterpret_cast<const Block*>(static_cast<const char*>(w.data) + r * stride);
    for (int64_t t0 = 0; t0 < T; t0 += 8) {
      const int64_t nt = T - t0 < 8 ? T - t0 : 8;
      for (int64_t t = 0; t < nt; ++t) acc[t] = 0.0f;
      for (int64_t b = 0; b < nb; ++b) {
        const auto dw = decode(row[b], q);
        for (int64_t t = 0; t < nt; ++t) {
          const int8_t* xq = a.qs + (t0 + t) * a.cols + b * 32;
          int s = 0;
          for (int i = 0; i < 32; ++i) s += int(q[i]) * int(xq[i]);
          const float dx = a.d[b * T + t0 + t];
          if constexpr (kMin) {
            const int32_t sum_x = -a.zp[b * T + t0 + t] / 8;
            acc[t] += dw.d * dx * float(s) + dw.m * dx * float(sum_x);
          } else {
            acc[t] += dw * dx * float(s);
          }
        }
      }
      for (int64_t t = 0; t < nt; ++t) y[(t0 + t) * w.rows + r] = acc[t];
    }
  }
}

void gemm_q4_0(const WeightMatrix& w, const ActQ8_0& a, int64_t r0, int64_t r1, float* y) {
  gemm_q8_0_act<BlockQ4_0>(w, a, r0, r1, y, [](const BlockQ4_0& blk, int8_t* q) {
    for (int i = 0; i < 16; ++i) {
      q[i] = int8_t((blk.qs[i] & 0x0f) - 8);
      q[i + 16] = int8_t((blk.qs[i] >> 4) - 8);
    }
    return fp16_to_float(blk.d);
  });
}

// Q5_0 / Q5_1: the 5-bit q of weight i is its nibble plus bit i of qh as bit 4.
template <class Block>
void decode_q5(const Block& blk, int8_t* q, int offset) {
  uint32_t h;
  std::memcpy(&h, blk.qh, 4);
  for (int i = 0; i < 16; ++i) {
    q[i] = int8_t(((blk.qs[i] & 0x0f) | (((h >> i) & 1) << 4)) - offset);
    q[i + 16] = int8_t(((blk.qs[i] >> 4) | (((h >> (i + 16)) & 1) << 4)) - offset);
  }
}

void gemm_q5_0(const WeightMatrix& w, const ActQ8_0& a, int64_t r0, int64_t r1, float* y) {
  gemm_q8_0_act<BlockQ5_0>(w, a, r0, r1, y, [](const BlockQ5_0& blk, int8_t* q) {
    decode_q5(blk, q, 16);
    return fp16_to_float(blk.d);
  });
}

void gemm_q5_1(const WeightMatrix& w, const ActQ8_0& a, int64_t r0, int64_t r1, float* y) {
  gemm_q8_0_act<BlockQ5_1, true>(w, a, r0, r1, y, [](const BlockQ5_1& blk, int8_t* q) {
    decode_q5(blk, q, 0);
    return ScaleMin{fp16_to_float(blk.d), fp16_to_float(blk.m)};
  });
}

void gemm_iq4_nl(const WeightMatrix& w, const ActQ8_0& a, int64_t r0, int64_t r1, float* y) {
  gemm_q8_0_act<BlockIQ4_NL>(w, a, r0, r1, y, [](const BlockIQ4_NL& blk, int8_t* q) {
    for (int i = 0; i < 16; ++i) {
      q[i] = kIQ4NLValues[blk.qs[i] & 0x0f];
      q[i + 16] = kIQ4NLValues[blk.qs[i] >> 4];
    }
    return fp16_to_float(blk.d);
  });
}

// MXFP4: IQ4_NL with its own grid and the E8M0 scale. The block's term is ggml's
// vec_dot_mxfp4_q8_0's, (scale * dx) * sum, added block after block.
void gemm_mxfp4(const WeightMatrix& w, const ActQ8_0& a, int64_t r0, int64_t r1, float* y) {
  gemm_q8_0_act<BlockMXFP4>(w, a, r0, r1, y, [](const BlockMXFP4& blk, int8_t* q) {
    for (int i = 0; i < 16; ++i) {
      q[i] = kMXFP4Values[blk.qs[i] & 0x0f];
      q[i + 16] = kMXFP4Values[blk.qs[i] >> 4];
    }
    return e8m0_half_to_float(blk.e);
  });
}

void gemm_q8_0(const WeightMatrix& w, const ActQ8_0& a, int64_t r0, int64_t r1, float* y) {
  gemm_q8_0_act<BlockQ8_0>(w, a, r0, r1, y, [](const BlockQ8_0& blk, int8_t* q) {
    std::memcpy(q, blk.qs, 32);
    return fp16_to_float(blk.d);
  });
}

// Q8_K skeleton: kernel(weight block, activation qs, activation bsums) returns the
// block's dot product in units of the activation block scale.
template <class Block, class Kernel>
void gemm_q8_k_act(const WeightMatrix& w, const ActQ8_K& a, int64_t r0, int64_t r1, float* y,
                   Kernel kernel) {
  const int64_t nb = w.cols / QK_K;
  const int64_t T = a.T;
  const int64_t stride = row_bytes(w.type, w.cols);
  for (int64_t r = r0; r < r1; ++r) {
    const auto* row = reinterpret_cast<const Block*>(static_cast<const char*>(w.data) + r * stride);
    for (int64_t t = 0; t < T; ++t) {
      float acc = 0.0f;
      for (int64_t b = 0; b < nb; ++b)
        acc += a.d[b * T + t] * kernel(row[b], a.qs + t * a.cols + b * QK_K,
                                       a.bsums + t * (a.cols / 16) + b * (QK_K / 16));
      y[t * w.rows + r] = acc;
    }
  }
}

// Q4_K / Q5_K (Q5_K: bit 4 of sub-block s's weight l from bit s of qh[l]): returns
// d*sum(sc*q*x) - dmin*sum(m*bsum) of one block, integer sums exact.
template <class Block>
float dot_q4_5_k(const Block& blk, const int8_t* x, const int16_t* bsums) {
  const KQuantScales s = unpack_q4_k_scales(blk.scales);
  int32_t sumi = 0, summ = 0;
  for (int j = 0; j < 4; ++j) {
    const uint8_t* q = blk.qs + 32 * j;
    int32_t lo = 0, hi = 0;
    for (int l = 0; l < 32; ++l) {
      if constexpr (std::is_same_v<Block, BlockQ5_K>) {
        const int h1 = (blk.qh[l] >> (2 * j)) & 1, h2 = (blk.qh[l] >> (2 * j + 1)) & 1;
        lo += int((q[l] & 0x0f) | (h1 << 4)) * int(x[64 * j + l]);
        hi += int((q[l] >> 4) | (h2 << 4)) * int(x[64 * j + 32 + l]);
      } else {
        lo += int(q[l] & 0x0f) * int(x[64 * j + l]);
        hi += int(q[l] >> 4) * int(x[64 * j + 32 + l]);
      }
    }
    sumi += lo * s.sc[2 * j] + hi * s.sc[2 * j + 1];
  }
  for (int sb = 0; sb < 8; ++sb) summ += int(s.m[sb]) * (bsums[2 * sb] + bsums[2 * sb + 1]);
  return fp16_to_float(blk.d) * float(sumi) - fp16_to_float(blk.dmin) * float(summ);
}

// Q2_K / Q3_K: the integer sums of the 2-bit fields of each 16-weight sub-block; the
// field of weight 128h + 32j + l is bits 2j..2j+1 of qs[32h + l] (see ggml_type.h).
// With hmask, bit e / 32 of hmask[e % 32] adds 4 (Q3_K's third bit).
inline void kquant_2bit_sums(const uint8_t* qs, const uint8_t* hmask, const int8_t* x,
                             int32_t* part) {
  for (int h = 0; h < 2; ++h)
    for (int j = 0; j < 4; ++j)
      for (int g = 0; g < 2; ++g) {  // the run's two sub-blocks
        int32_t s = 0;
        for (int l = 16 * g; l < 16 * g + 16; ++l) {
          int q = (qs[32 * h + l] >> (2 * j)) & 3;
          if (hmask != nullptr) q |= ((hmask[l] >> (4 * h + j)) & 1) << 2;
          s += q * int(x[128 * h + 32 * j + l]);
        }
        part[8 * h + 2 * j + g] = s;
      }
}

float dot_q2_k(const BlockQ2_K& blk, const int8_t* x, const int16_t* bsums) {
  int32_t part[16];
  kquant_2bit_sums(blk.qs, nullptr, x, part);
  int32_t sumi = 0, summ = 0;
  for (int g = 0; g < 16; ++g) {
    sumi += int(blk.scales[g] & 0x0f) * part[g];
    summ += int(blk.scales[g] >> 4) * bsums[g];
  }
  return fp16_to_float(blk.d) * float(sumi) - fp16_to_float(blk.dmin) * float(summ);
}

float dot_q3_k(const BlockQ3_K& blk, const int8_t* x, const int16_t* bsums) {
  int32_t part[16];
  kquant_2bit_sums(blk.qs, blk.hmask, x, part);
  uint8_t sc[16];
  unpack_q3_k_scales(blk.scales, sc);
  int32_t sumi = 0;
  // The stored q is offset by +4: remove 4 * sum(x) of each group with the bsums.
  for (int g = 0; g < 16; ++g) sumi += (int(sc[g]) - 32) * (part[g] - 4 * bsums[g]);
  return fp16_to_float(blk.d) * float(sumi);
}

float dot_q6_k(const BlockQ6_K& blk, const int8_t* x, const int16_t* bsums) {
  int32_t sumi = 0;
  for (int n = 0; n < 2; ++n) {
    const uint8_t* ql = blk.ql + 64 * n;
    const uint8_t* qh = blk.qh + 32 * n;
    const int8_t* sc = blk.scales + 8 * n;
    const int8_t* xn = x + 128 * n;
    int32_t part[8] = {};  // per 16-weight group of this half
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      part[is + 0] += int((ql[l] & 0x0f) | ((qh[l] & 3) << 4)) * xn[l];
      part[is + 2] += int((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) * xn[l + 32];
      part[is + 4] += int((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) * xn[l + 64];
      part[is + 6] += int((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) * xn[l + 96];
    }
    for (int g = 0; g < 8; ++g) sumi += int(sc[g]) * part[g];
  }
  // The stored q is offset by +32; remove 32 * sum(x) of each group at once.
  for (int g = 0; g < 16; ++g) sumi -= 32 * int(blk.scales[g]) * bsums[g];
  return fp16_to_float(blk.d) * float(sumi);
}

void gemm_q4_k(const WeightMatrix& w, const ActQ8_K& a, int64_t r0, int64_t r1, float* y) {
  gemm_q8_k_act<BlockQ4_K>(w, a, r0, r1, y, dot_q4_5_k<BlockQ4_K>);
}

void gemm_q6_k(const WeightMatrix& w, const ActQ8_K& a, int64_t r0, int64_t r1, float* y) {
  gemm_q8_k_act<BlockQ6_K>(w, a, r0, r1, y, dot_q6_k);
}

void gemm_q5_k(const WeightMatrix& w, const ActQ8_K& a, int64_t r0, int64_t r1, float* y) {
  gemm_q8_k_act<BlockQ5_K>(w, a, r0, r1, y, dot_q4_5_k<BlockQ5_K>);
}

void gemm_q2_k(const WeightMatrix& w, const ActQ8_K& a, int64_t r0, int64_t r1, float* y) {
  gemm_q8_k_act<BlockQ2_K>(w, a, r0, r1, y, dot_q2_k);
}

void gemm_q3_k(const WeightMatrix& w, const ActQ8_K& a, int64_t r0, int64_t r1, float* y) {
  gemm_q8_k_act<BlockQ3_K>(w, a, r0, r1, y, dot_q3_k);
}

template <class Convert>
void gemm_float(const WeightMatrix& w, const float* x, int64_t T, int64_t r0, int64_t r1,
                float* y, Convert convert) {
  const int64_t stride = row_bytes(w.type, w.cols);
  constexpr int64_t kChunk = 256;  // weights converted once per chunk, reused per token
  float wf[kChunk];
  for (int64_t r = r0; r < r1; ++r) {
    const char* row = static_cast<const char*>(w.data) + r * stride;
    for (int64_t t = 0; t < T; ++t) y[t * w.rows + r] = 0.0f;
    for (int64_t c0 = 0; c0 < w.cols; c0 += kChunk) {
      const int64_t n = w.cols - c0 < kChunk ? w.cols - c0 : kChunk;
      for (int64_t i = 0; i < n; ++i) wf[i] = convert(row, c0 + i);
      for (int64_t t = 0; t < T; ++t) {
        const float* xt = x + t * w.cols + c0;
        float s = 0.0f;
        for (int64_t i = 0; i < n; ++i) s += wf[i] * xt[i];
        y[t * w.rows + r] += s;
      }
    }
  }
}

void gemm_f32(const WeightMatrix& w, const float* x, int64_t T, int64_t r0, int64_t r1, float* y) {
  gemm_float(w, x, T, r0, r1, y, [](const char* row, int64_t i) {
    float v;
    std::memcpy(&v, row + 4 * i, 4);
    return v;
  });
}

void gemm_f16(const WeightMatrix& w, const float* x, int64_t T, int64_t r0, int64_t r1, float* y) {
  gemm_float(w, x, T, r0, r1, y, [](const char* row, int64_t i) {
    uint16_t h;
    std::memcpy(&h, row + 2 * i, 2);
    return fp16_to_float(h);
  });
}

void gemm_bf16(const WeightMatrix& w, const float* x, int64_t T, int64_t r0, int64_t r1,
               float* y) {
  gemm_float(w, x, T, r0, r1, y, [](const char* row, int64_t i) {
    uint16_t h;
    std::memcpy(&h, row + 2 * i, 2);
    return bf16_to_float(h);
  });
}

}  // namespace

const IsaKernels& scalar_kernels() {
  static constexpr IsaKernels k{.name = "scalar",
                                .quantize_q8_0 = quantize_q8_0,
                                .quantize_q8_0_pairs = nullptr,
                                .quantize_q8_k = quantize_q8_k,
                                .round_f16 = round_row_f16,
                                .round_bf16 = round_row_bf16,
                                .q8_0_layout = [](GgmlType) { return Q8_0Layout{false, 8}; },
                                .q4_0 = gemm_q4_0,
                                .q5_0 = gemm_q5_0,
                                .q5_1 = gemm_q5_1,
                                .q8_0 = gemm_q8_0,
                                .iq4_nl = gemm_iq4_nl,
                                .mxfp4 = gemm_mxfp4,
                                .q4_0_lanes16 = nullptr,
                                .pack_q4_0_lanes16 = nullptr,
                                .q2_k = gemm_q2_k,
                                .q3_k = gemm_q3_k,
                                .q4_k = gemm_q4_k,
                                .q5_k = gemm_q5_k,
                                .q6_k = gemm_q6_k,
                                .f32 = gemm_f32,
                                .f16 = gemm_f16,
                                .bf16 = gemm_bf16};
  return k;
}

}  // namespace flashspec::cpu
