#pragma once
// kernels/cuda/ holds the CUDA backend (cuda_backend.h): its kernels, VRAM, the copy
// queue, and cuBLAS loaded at run time. It is built into a plugin (kernels/cuda_plugin/,
// loaded by kernels/cuda_loader.h) and, for tests and gpubench, a static library.
//
// Decoding of weight rows for the CUDA kernels, written once for device and host so that
// the host tests (tests/test_block_formats.cpp) hold it to the CPU's dequantize_row on
// machines without a GPU. A row is read in groups of 32 consecutive weights: one Q4_0,
// Q5_0, Q5_1, Q8_0, IQ4_NL or MXFP4 block, an eighth of a K-quant super-block, or 32 plain
// values. Every read is a byte read: blocks of 17, 18, 22, 24, 34, 84, 110, 144, 176 and
// 210 bytes leave no wider alignment to rely on. Each decoding performs the floating-point
// operations of dequantize_row in the same order, so the two agree bit for bit.
#include <cstdint>
#include <cstring>

#include "core/ggml_type.h"
#include "kernels/host_device.h"

namespace flashspec::cuda {

// Plain types may end a row mid-group; quantized rows are whole groups.
FS_HD constexpr bool is_plain(GgmlType t) {
  return t == GgmlType::F32 || t == GgmlType::F16 || t == GgmlType::BF16;
}

FS_HD uint16_t read16(const uint8_t* p) { return uint16_t(p[0] | (uint16_t(p[1]) << 8)); }

// v's bytes reread as a To (a float's bits as uint32_t, and back), as std::bit_cast does
// but callable from device code; nvcc and GCC turn the copy into a register move (the same
// PTX as __float_as_uint / __uint_as_float).
template <class To, class From>
FS_HD To reinterpret_bits(From v) {
  static_assert(sizeof(To) == sizeof(From));
  To r;
  memcpy(&r, &v, sizeof r);
  return r;
}

// IEEE half -> float, exact (the same function as core/half.h's fp16_to_float).
FS_HD float half_bits_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1f;
  const uint32_t mant = h & 0x3ff;
  if (exp == 0x1f) return reinterpret_bits<float>(sign | 0x7f800000u | (mant << 13));
  if (exp != 0) return reinterpret_bits<float>(sign | ((exp + 112) << 23) | (mant << 13));
  const float v = float(mant) * (1.0f / 16777216.0f);  // subnormal (or zero): mant * 2^-24
  return sign ? -v : v;
}

FS_HD float read_f32(const uint8_t* p) {
  return reinterpret_bits<float>(uint32_t(p[0]) | (uint32_t(p[1]) << 8) | (uint32_t(p[2]) << 16) | (uint32_t(p[3]) << 24));
}

// The 6-bit scale and min of sub-block s (0..7) of a Q4_K super-block's 12 scale bytes:
// bytes 0..3 / 4..7 hold sc / m of sub-blocks 0..3 in their low 6 bits; bytes 8..11 the
// low 4 bits of sc (low nibble) and m (high nibble) of sub-blocks 4..7, whose top 2 bits
// sit in the top bits of bytes 0..3 (sc) and 4..7 (m).
FS_HD void q4_k_scale_min(const uint8_t* s, int sub, int& sc, int& m) {
  if (sub < 4) {
    sc = s[sub] & 63;
    m = s[sub + 4] & 63;
  } else {
    sc = (s[sub + 4] & 0x0f) | ((s[sub - 4] >> 6) << 4);
    m = (s[sub + 4] >> 4) | ((s[sub] >> 6) << 4);
  }
}

// Q5_0 / Q5_1: the 5-bit q of weight i (< 32) of a block from its nibble byte field qs
// and the little-endian 32-bit word at qh (bit i is q's bit 4).
FS_HD void q5_quants(const uint8_t* qs, const uint8_t* qh, int* q) {
  const uint32_t h =
      uint32_t(qh[0]) | (uint32_t(qh[1]) << 8) | (uint32_t(qh[2]) << 16) | (uint32_t(qh[3]) << 24);
  for (int i = 0; i < 16; ++i) {
    q[i] = int((qs[i] & 0x0f) | (((h >> i) & 1) << 4));
    q[i + 16] = int((qs[i] >> 4) | (((h >> (i + 16)) & 1) << 4));
  }
}

// kIQ4NLValues[i] (core/ggml_type.h) as immediates: device code cannot read a host
// constexpr array, and two 64-bit constants stay in registers.
FS_HD constexpr int iq4_nl_value(int i) {
  constexpr uint64_t lo = 0xf6eaddcfbfad9881ull, hi = 0x7159453526190d01ull;  // bytes = values 0..7, 8..15
  return int(int8_t(uint8_t(((i < 8 ? lo : hi) >> (8 * (i & 7))) & 0xff)));
}
#ifndef __CUDACC__
static_assert([] {
  for (int i = 0; i < 16; ++i)
    if (iq4_nl_value(i) != kIQ4NLValues[i]) return false;
  return true;
}());
#endif

// kMXFP4Values[i] (core/ggml_type.h) as immediates, for the same reason.
FS_HD constexpr int mxfp4_value(int i) {
  constexpr uint64_t lo = 0x0c08060403020100ull, hi = 0xf4f8fafcfdfeff00ull;  // bytes = values 0..7, 8..15
  return int(int8_t(uint8_t(((i < 8 ? lo : hi) >> (8 * (i & 7))) & 0xff)));
}
#ifndef __CUDACC__
static_assert([] {
  for (int i = 0; i < 16; ++i)
    if (mxfp4_value(i) != kMXFP4Values[i]) return false;
  return true;
}());
#endif

// MXFP4's E8M0 block exponent as the scale 2^(e - 128), exact (the same function as
// core/half.h's e8m0_half_to_float).
FS_HD float e8m0_half_bits_to_float(uint8_t e) {
  return reinterpret_bits<float>(e < 2 ? uint32_t(0x00200000u) << e : uint32_t(e - 1) << 23);
}

// The stored (0..63, offset 32) 6-bit scale of sub-block s (0..15) of a Q3_K super-block's
// 12 scale bytes: low 4 bits in the low (s < 8) or high nibble of byte s % 8, top 2 bits
// at bits 2*(s/4) of byte 8 + s % 4.
FS_HD int q3_k_scale(const uint8_t* sc, int s) {
  const int low = s < 8 ? (sc[s] & 0x0f) : (sc[s - 8] >> 4);
  return low | (((sc[8 + s % 4] >> (2 * (s / 4))) & 3) << 4);
}

// fp16 rounding (to nearest even, overflow to infinity) of a float, widened back; integer
// operations only, so that host tests check the very code the GPU runs.
FS_HD float rounded_to_fp16(float v) {
  const uint32_t u = reinterpret_bits<uint32_t>(v);
  const uint32_t sign = u & 0x80000000u, a = u & 0x7fffffffu;
  if (a >= 0x7f800000u) return v;                                 // inf, NaN
  if (a >= 0x477ff000u) return reinterpret_bits<float>(sign | 0x7f800000u);  // >= 65520: inf
  if (a >= 0x38800000u)                                            // normal half: 10 mantissa bits
    return reinterpret_bits<float>(sign | ((a + 0xfffu + ((a >> 13) & 1u)) & ~0x1fffu));
  // Subnormal half: a multiple of 2^-24. Below 2^-25 that is 0 (2^-25 itself ties to 0).
  const int e = int(a >> 23);
  if (e < 102) return reinterpret_bits<float>(sign);
  const uint32_t m = (a & 0x7fffffu) | 0x800000u;  // a = m * 2^(e - 150)
  const int shift = 126 - e;                       // a / 2^-24 = m >> shift, 14..24
  uint32_t q = m >> shift;
  const uint32_t rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
  if (rem > half || (rem == half && (q & 1u))) ++q;
  return reinterpret_bits<float>(sign | reinterpret_bits<uint32_t>(float(q) * (1.0f / 16777216.0f)));
}

// bf16 rounding as llama.cpp's conversion: nearest even on the bit pattern, NaN quiet.
FS_HD float rounded_to_bf16(float v) {
  const uint32_t u = reinterpret_bits<uint32_t>(v);
  if ((u & 0x7fffffffu) > 0x7f800000u) return reinterpret_bits<float>((u | 0x00400000u) & 0xffff0000u);
  return reinterpret_bits<float>((u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u);
}

// The activation value a weight of `type` multiplies on the float path: llama.cpp rounds
// activations to F16 / BF16 weights' own type (their vec_dot_type) before the products,
// and the CPU backend does the same. Quantized types get the f32 value (the GPU path does
// not quantize activations).
FS_HD float round_activation(GgmlType type, float v) {
  if (type == GgmlType::F16) return rounded_to_fp16(v);
  if (type == GgmlType::BF16) return rounded_to_bf16(v);
  return v;
}

// Group g of a k-quant row (super-blocks of 256 weights, 8 groups each).
FS_HD void decode_kquant_group(GgmlType type, const uint8_t* row, int64_t g, float* out) {
  switch (type) {
    case GgmlType::Q2_K: {  // 84 bytes: 16 scale/min bytes, 64 bytes of 2-bit q, d, dmin
      const uint8_t* b = row + (g / 8) * 84;
      const int sub = int(g % 8);
      const float d = half_bits_to_float(read16(b + 80));
      const float dmin = half_bits_to_float(read16(b + 82));
      // Weight 32 sub + l: bits 2*(sub%4) of qs[32*(sub/4) + l], sub-block 2 sub + l/16.
      const uint8_t* q = b + 16 + 32 * (sub / 4);
      const int shift = 2 * (sub % 4);
      for (int h = 0; h < 2; ++h) {
        const uint8_t sm = b[2 * sub + h];
        const float dl = d * float(sm & 0x0f), ml = dmin * float(sm >> 4);
        for (int l = 16 * h; l < 16 * h + 16; ++l) out[l] = dl * float((q[l] >> shift) & 3) - ml;
      }
      return;
    }
    case GgmlType::Q3_K: {  // 110 bytes: 32 hmask, 64 bytes of 2-bit q, 12 scale bytes, d
      const uint8_t* b = row + (g / 8) * 110;
      const int sub = int(g % 8);
      const float d = half_bits_to_float(read16(b + 108));
      const uint8_t* q = b + 32 + 32 * (sub / 4);
      const int shift = 2 * (sub % 4);
      for (int h = 0; h < 2; ++h) {
        const float dl = d * float(q3_k_scale(b + 96, 2 * sub + h) - 32);
        for (int l = 16 * h; l < 16 * h + 16; ++l) {
          const int hi = (b[l] >> sub) & 1;  // hmask[l], bit sub
          out[l] = dl * float(int(((q[l] >> shift) & 3) | (hi << 2)) - 4);
        }
      }
      return;
    }
    case GgmlType::Q4_K:    // 144 bytes: d, dmin, 12 scale bytes, 128 bytes of nibbles
    case GgmlType::Q5_K: {  // 176 bytes: d, dmin, 12 scale bytes, 32 qh, 128 bytes of nibbles
      const bool q5 = type == GgmlType::Q5_K;
      const uint8_t* b = row + (g / 8) * (q5 ? 176 : 144);
      const int sub = int(g % 8);
      const float d = half_bits_to_float(read16(b));
      const float dmin = half_bits_to_float(read16(b + 2));
      int sc = 0, m = 0;
      q4_k_scale_min(b + 4, sub, sc, m);
      const float d1 = d * float(sc), m1 = dmin * float(m);
      // Each 32 bytes hold sub-blocks 2j (low nibbles) and 2j+1 (high nibbles); Q5_K's bit
      // 4 of sub-block sub's weight l is bit sub of qh[l].
      const uint8_t* qh = b + 16;
      const uint8_t* q = b + (q5 ? 48 : 16) + 32 * (sub / 2);
      const int shift = (sub % 2) * 4;
      for (int l = 0; l < 32; ++l)
        out[l] = d1 * float(((q[l] >> shift) & 0x0f) | (q5 ? ((qh[l] >> sub) & 1) << 4 : 0)) - m1;
      return;
    }
    case GgmlType::Q6_K: {  // 210 bytes: 128 ql, 64 qh, 16 int8 scales, fp16 d
      const uint8_t* b = row + (g / 8) * 210;
      const int half = int(g % 8) / 4, run = int(g % 4);
      const uint8_t* ql = b + 64 * half + (run & 1) * 32;  // runs 1 and 3 read ql[l + 32]
      const uint8_t* qh = b + 128 + 32 * half;
      const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192) + 8 * half;
      const float d = half_bits_to_float(read16(b + 208));
      const int lo_shift = (run >> 1) * 4;  // runs 2 and 3 take the high nibble
      for (int l = 0; l < 32; ++l) {
        const int q = int(((ql[l] >> lo_shift) & 0x0f) | (((qh[l] >> (2 * run)) & 3) << 4)) - 32;
        out[l] = d * float(sc[l / 16 + 2 * run]) * float(q);
      }
      return;
    }
    default:
      return;
  }
}

// Weights [32 g, 32 g + n) of a row of `type` into out[0..n) (out[n..32) = 0); n < 32
// only for the last group of a plain (F32/F16/BF16) row whose length is not a multiple
// of 32 (quantized rows are whole blocks).
FS_HD void decode_group(GgmlType type, const uint8_t* row, int64_t g, int n, float* out) {
  switch (type) {
    case GgmlType::Q4_0: {  // 18 bytes: fp16 d, 16 bytes of nibbles (low: 0..15, high: 16..31)
      const uint8_t* b = row + g * 18;
      const float d = half_bits_to_float(read16(b));
      for (int i = 0; i < 16; ++i) {
        out[i] = d * float(int(b[2 + i] & 0x0f) - 8);
        out[i + 16] = d * float(int(b[2 + i] >> 4) - 8);
      }
      return;
    }
    case GgmlType::Q5_0: {  // 22 bytes: fp16 d, 4 bytes qh, 16 bytes of nibbles
      const uint8_t* b = row + g * 22;
      const float d = half_bits_to_float(read16(b));
      int q[32];
      q5_quants(b + 6, b + 2, q);
      for (int i = 0; i < 32; ++i) out[i] = d * float(q[i] - 16);
      return;
    }
    case GgmlType::Q5_1: {  // 24 bytes: fp16 d, fp16 m, 4 bytes qh, 16 bytes of nibbles
      const uint8_t* b = row + g * 24;
      const float d = half_bits_to_float(read16(b));
      const float m = half_bits_to_float(read16(b + 2));
      int q[32];
      q5_quants(b + 8, b + 4, q);
      for (int i = 0; i < 32; ++i) out[i] = d * float(q[i]) + m;
      return;
    }
    case GgmlType::IQ4_NL: {  // 18 bytes: fp16 d, 16 bytes of nibbles indexing the grid
      const uint8_t* b = row + g * 18;
      const float d = half_bits_to_float(read16(b));
      for (int i = 0; i < 16; ++i) {
        out[i] = d * float(iq4_nl_value(b[2 + i] & 0x0f));
        out[i + 16] = d * float(iq4_nl_value(b[2 + i] >> 4));
      }
      return;
    }
    case GgmlType::MXFP4: {  // 17 bytes: E8M0 exponent, 16 bytes of nibbles indexing the grid
      const uint8_t* b = row + g * 17;
      const float d = e8m0_half_bits_to_float(b[0]);
      for (int i = 0; i < 16; ++i) {
        out[i] = d * float(mxfp4_value(b[1 + i] & 0x0f));
        out[i + 16] = d * float(mxfp4_value(b[1 + i] >> 4));
      }
      return;
    }
    case GgmlType::Q2_K:
    case GgmlType::Q3_K:
    case GgmlType::Q4_K:
    case GgmlType::Q5_K:
    case GgmlType::Q6_K:
      decode_kquant_group(type, row, g, out);
      return;
    case GgmlType::Q8_0: {  // 34 bytes: fp16 d, 32 int8
      const uint8_t* b = row + g * 34;
      const float d = half_bits_to_float(read16(b));
      for (int i = 0; i < 32; ++i) out[i] = d * float(int8_t(b[2 + i]));
      return;
    }
    // Plain rows: a fixed 32-step loop (weights past n read as 0) keeps `out` in
    // registers once unrolled on the GPU.
    case GgmlType::F32:
      for (int i = 0; i < 32; ++i) out[i] = i < n ? read_f32(row + (g * 32 + i) * 4) : 0.0f;
      return;
    case GgmlType::F16:
      for (int i = 0; i < 32; ++i) out[i] = i < n ? half_bits_to_float(read16(row + (g * 32 + i) * 2)) : 0.0f;
      return;
    case GgmlType::BF16:
      for (int i = 0; i < 32; ++i) out[i] = i < n ? reinterpret_bits<float>(uint32_t(read16(row + (g * 32 + i) * 2)) << 16) : 0.0f;
      return;
  }
}

}  // namespace flashspec::cuda
