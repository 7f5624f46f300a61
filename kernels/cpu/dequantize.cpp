// Scalar dequantization of every supported type: the definition of each format's
// semantics that the matmul kernels (and the tests' references) are held to.
#include <cstring>
#include <string>
#include <type_traits>

#include "core/error.h"
#include "core/half.h"
#include "kernels/cpu/matmul_internal.h"
#include "kernels/cpu/kquant_scales.h"
#include "kernels/cpu/matmul.h"

namespace flashspec {

namespace {

void dequantize_q4_0(const BlockQ4_0* x, float* y, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b, y += QK4_0) {
    const float d = fp16_to_float(x[b].d);
    for (int i = 0; i < QK4_0 / 2; ++i) {
      y[i] = d * float((x[b].qs[i] & 0x0f) - 8);
      y[i + QK4_0 / 2] = d * float((x[b].qs[i] >> 4) - 8);
    }
  }
}

// Bit 4 of the 5-bit quants of Q5_0 / Q5_1: bit i of the little-endian word qh.
inline uint32_t q5_high_bits(const uint8_t* qh) {
  uint32_t h;
  std::memcpy(&h, qh, 4);
  return h;
}

void dequantize_q5_0(const BlockQ5_0* x, float* y, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b, y += QK5_0) {
    const float d = fp16_to_float(x[b].d);
    const uint32_t h = q5_high_bits(x[b].qh);
    for (int i = 0; i < QK5_0 / 2; ++i) {
      const int q0 = int((x[b].qs[i] & 0x0f) | (((h >> i) & 1) << 4));
      const int q1 = int((x[b].qs[i] >> 4) | (((h >> (i + 16)) & 1) << 4));
      y[i] = d * float(q0 - 16);
      y[i + QK5_0 / 2] = d * float(q1 - 16);
    }
  }
}

void dequantize_q5_1(const BlockQ5_1* x, float* y, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b, y += QK5_1) {
    const float d = fp16_to_float(x[b].d);
    const float m = fp16_to_float(x[b].m);
    const uint32_t h = q5_high_bits(x[b].qh);
    for (int i = 0; i < QK5_1 / 2; ++i) {
      const int q0 = int((x[b].qs[i] & 0x0f) | (((h >> i) & 1) << 4));
      const int q1 = int((x[b].qs[i] >> 4) | (((h >> (i + 16)) & 1) << 4));
      y[i] = d * float(q0) + m;
      y[i + QK5_1 / 2] = d * float(q1) + m;
    }
  }
}

void dequantize_iq4_nl(const BlockIQ4_NL* x, float* y, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b, y += QK4_NL) {
    const float d = fp16_to_float(x[b].d);
    for (int i = 0; i < QK4_NL / 2; ++i) {
      y[i] = d * float(kIQ4NLValues[x[b].qs[i] & 0x0f]);
      y[i + QK4_NL / 2] = d * float(kIQ4NLValues[x[b].qs[i] >> 4]);
    }
  }
}

// MXFP4: IQ4_NL's layout with another grid and a power-of-two scale. The product of a
// code (|code| <= 12) and the scale is exact, or infinity for the few that reach 2^128
// (e >= 253 only), as in ggml.
void dequantize_mxfp4(const BlockMXFP4* x, float* y, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b, y += QK_MXFP4) {
    const float d = e8m0_half_to_float(x[b].e);
    for (int i = 0; i < QK_MXFP4 / 2; ++i) {
      y[i] = d * float(kMXFP4Values[x[b].qs[i] & 0x0f]);
      y[i + QK_MXFP4 / 2] = d * float(kMXFP4Values[x[b].qs[i] >> 4]);
    }
  }
}

void dequantize_q8_0(const BlockQ8_0* x, float* y, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b, y += QK8_0) {
    const float d = fp16_to_float(x[b].d);
    for (int i = 0; i < QK8_0; ++i) y[i] = d * float(x[b].qs[i]);
  }
}

// Q4_K and Q5_K: each 32 bytes of qs hold 64 weights, sub-block 2j in the low nibbles, 2j+1
// in the high; Q5_K adds bit 4 of sub-block s's weight l from bit s of qh[l].
template <class Block>
void dequantize_q4_5_k(const Block* x, float* y, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b) {
    const float d = fp16_to_float(x[b].d);
    const float dmin = fp16_to_float(x[b].dmin);
    const KQuantScales s = unpack_q4_k_scales(x[b].scales);
    for (int j = 0; j < 4; ++j) {
      const uint8_t* q = x[b].qs + 32 * j;
      const float d1 = d * float(s.sc[2 * j]), m1 = dmin * float(s.m[2 * j]);
      const float d2 = d * float(s.sc[2 * j + 1]), m2 = dmin * float(s.m[2 * j + 1]);
      if constexpr (std::is_same_v<Block, BlockQ5_K>) {
        for (int l = 0; l < 32; ++l) {
          const int h1 = (x[b].qh[l] >> (2 * j)) & 1, h2 = (x[b].qh[l] >> (2 * j + 1)) & 1;
          y[l] = d1 * float((q[l] & 0x0f) | (h1 << 4)) - m1;
          y[32 + l] = d2 * float((q[l] >> 4) | (h2 << 4)) - m2;
        }
      } else {
        for (int l = 0; l < 32; ++l) y[l] = d1 * float(q[l] & 0x0f) - m1;
        for (int l = 0; l < 32; ++l) y[32 + l] = d2 * float(q[l] >> 4) - m2;
      }
      y += 64;
    }
  }
}

// Q2_K and Q3_K: weight 128h + 32j + l of a super-block (half h, run j, l < 32) takes bits
// 2j..2j+1 of qs[32h + l] and sits in sub-block 8h + 2j + l / 16.
void dequantize_q2_k(const BlockQ2_K* x, float* y, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b) {
    const float d = fp16_to_float(x[b].d);
    const float dmin = fp16_to_float(x[b].dmin);
    for (int e = 0; e < QK_K; e += 16) {
      const uint8_t sm = x[b].scales[e / 16];
      const float dl = d * float(sm & 0x0f), ml = dmin * float(sm >> 4);
      const uint8_t* q = x[b].qs + 32 * (e / 128) + e % 32;
      const int shift = 2 * ((e % 128) / 32);
      for (int l = 0; l < 16; ++l) y[e + l] = dl * float((q[l] >> shift) & 3) - ml;
    }
    y += QK_K;
  }
}

void dequantize_q3_k(const BlockQ3_K* x, float* y, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b) {
    const float d = fp16_to_float(x[b].d);
    uint8_t sc[16];
    unpack_q3_k_scales(x[b].scales, sc);
    for (int e = 0; e < QK_K; e += 16) {
      const float dl = d * float(int(sc[e / 16]) - 32);
      const uint8_t* q = x[b].qs + 32 * (e / 128) + e % 32;
      const uint8_t* hm = x[b].hmask + e % 32;
      const int shift = 2 * ((e % 128) / 32);
      for (int l = 0; l < 16; ++l) {
        const int hi = (hm[l] >> (e / 32)) & 1;
        y[e + l] = dl * float(int(((q[l] >> shift) & 3) | (hi << 2)) - 4);
      }
    }
    y += QK_K;
  }
}

void dequantize_q6_k(const BlockQ6_K* x, float* y, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b) {
    const float d = fp16_to_float(x[b].d);
    // Two halves of 128 weights; in each, 64 ql bytes and 32 qh bytes hold four runs of
    // 32: ql[l] low/high nibble -> runs 0/2, ql[l+32] -> runs 1/3, qh[l] bit pairs 0..3.
    for (int n = 0; n < 2; ++n) {
      const uint8_t* ql = x[b].ql + 64 * n;
      const uint8_t* qh = x[b].qh + 32 * n;
      const int8_t* sc = x[b].scales + 8 * n;
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = int((ql[l] & 0x0f) | ((qh[l] & 3) << 4)) - 32;
        const int q2 = int((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = int((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = int((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l] = d * float(sc[is]) * float(q1);
        y[l + 32] = d * float(sc[is + 2]) * float(q2);
        y[l + 64] = d * float(sc[is + 4]) * float(q3);
        y[l + 96] = d * float(sc[is + 6]) * float(q4);
      }
      y += 128;
    }
  }
}

}  // namespace

void dequantize_row(GgmlType type, const void* src, float* dst, int64_t n) {
  const int64_t nb = whole_blocks(type, n, "dequantize_row");
  switch (type) {
    case GgmlType::F32:
      std::memcpy(dst, src, size_t(n) * sizeof(float));
      return;
    case GgmlType::F16: {
      const auto* h = static_cast<const uint16_t*>(src);
      if (cpu::dispatch_isa() != cpu::Isa::Scalar) return cpu::f16_to_f32_avx2(h, dst, n);
      for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_float(h[i]);
      return;
    }
    case GgmlType::BF16: {
      const auto* h = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_float(h[i]);
      return;
    }
    case GgmlType::Q4_0: return dequantize_q4_0(static_cast<const BlockQ4_0*>(src), dst, nb);
    case GgmlType::Q8_0: return dequantize_q8_0(static_cast<const BlockQ8_0*>(src), dst, nb);
    case GgmlType::Q4_K: return dequantize_q4_5_k(static_cast<const BlockQ4_K*>(src), dst, nb);
    case GgmlType::Q6_K: return dequantize_q6_k(static_cast<const BlockQ6_K*>(src), dst, nb);
    case GgmlType::Q5_0: return dequantize_q5_0(static_cast<const BlockQ5_0*>(src), dst, nb);
    case GgmlType::Q5_1: return dequantize_q5_1(static_cast<const BlockQ5_1*>(src), dst, nb);
    case GgmlType::IQ4_NL: return dequantize_iq4_nl(static_cast<const BlockIQ4_NL*>(src), dst, nb);
    case GgmlType::MXFP4: return dequantize_mxfp4(static_cast<const BlockMXFP4*>(src), dst, nb);
    case GgmlType::Q2_K: return dequantize_q2_k(static_cast<const BlockQ2_K*>(src), dst, nb);
    case GgmlType::Q3_K: return dequantize_q3_k(static_cast<const BlockQ3_K*>(src), dst, nb);
    case GgmlType::Q5_K: return dequantize_q4_5_k(static_cast<const BlockQ5_K*>(src), dst, nb);
  }
  throw Error("internal: dequantize_row of unknown type " + std::to_string(uint32_t(type)));
}

}  // namespace flashspec
