#pragma once
// Decoding of weight rows for the CUDA kernels, written once for device and host so that
// the host tests (tests/test_block_formats.cpp) hold it to the CPU's dequantize_row on
// machines without a GPU. A row is read in groups of 32 consecutive weights: one Q4_0 or
// Q8_0 block, an eighth of a Q4_K or Q6_K super-block, or 32 plain values. Every read is
// a byte read: blocks of 18, 34, 144 and 210 bytes leave no wider alignment to rely on.
#include <cstdint>

#include "core/ggml_type.h"

#ifdef __CUDACC__
#define FS_HD __host__ __device__ __forceinline__
#else
#define FS_HD inline
#endif

namespace flashspec::cuda {

// Plain types may end a row mid-group; quantized rows are whole groups.
FS_HD constexpr bool is_plain(GgmlType t) {
  return t == GgmlType::F32 || t == GgmlType::F16 || t == GgmlType::BF16;
}

FS_HD uint16_t read16(const uint8_t* p) { return uint16_t(p[0] | (uint16_t(p[1]) << 8)); }

FS_HD float bits_as_float(uint32_t u) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(u);
#else
  float f;
  __builtin_memcpy(&f, &u, 4);
  return f;
#endif
}

// IEEE half -> float, exact (the same function as core/half.h's fp16_to_float).
FS_HD float half_bits_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1f;
  const uint32_t mant = h & 0x3ff;
  if (exp == 0x1f) return bits_as_float(sign | 0x7f800000u | (mant << 13));
  if (exp != 0) return bits_as_float(sign | ((exp + 112) << 23) | (mant << 13));
  const float v = float(mant) * (1.0f / 16777216.0f);  // subnormal (or zero): mant * 2^-24
  return sign ? -v : v;
}

FS_HD float read_f32(const uint8_t* p) {
  return bits_as_float(uint32_t(p[0]) | (uint32_t(p[1]) << 8) | (uint32_t(p[2]) << 16) | (uint32_t(p[3]) << 24));
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
    case GgmlType::Q8_0: {  // 34 bytes: fp16 d, 32 int8
      const uint8_t* b = row + g * 34;
      const float d = half_bits_to_float(read16(b));
      for (int i = 0; i < 32; ++i) out[i] = d * float(int8_t(b[2 + i]));
      return;
    }
    case GgmlType::Q4_K: {  // 144 bytes: d, dmin, 12 scale bytes, 128 bytes of nibbles
      const uint8_t* b = row + (g / 8) * 144;
      const int sub = int(g % 8);
      const float d = half_bits_to_float(read16(b));
      const float dmin = half_bits_to_float(read16(b + 2));
      int sc = 0, m = 0;
      q4_k_scale_min(b + 4, sub, sc, m);
      const float d1 = d * float(sc), m1 = dmin * float(m);
      // Each 32 bytes hold sub-blocks 2j (low nibbles) and 2j+1 (high nibbles).
      const uint8_t* q = b + 16 + 32 * (sub / 2);
      const int shift = (sub % 2) * 4;
      for (int l = 0; l < 32; ++l) out[l] = d1 * float((q[l] >> shift) & 0x0f) - m1;
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
    // Plain rows: a fixed 32-step loop (weights past n read as 0) keeps `out` in
    // registers once unrolled on the GPU.
    case GgmlType::F32:
      for (int i = 0; i < 32; ++i) out[i] = i < n ? read_f32(row + (g * 32 + i) * 4) : 0.0f;
      return;
    case GgmlType::F16:
      for (int i = 0; i < 32; ++i) out[i] = i < n ? half_bits_to_float(read16(row + (g * 32 + i) * 2)) : 0.0f;
      return;
    case GgmlType::BF16:
      for (int i = 0; i < 32; ++i) out[i] = i < n ? bits_as_float(uint32_t(read16(row + (g * 32 + i) * 2)) << 16) : 0.0f;
      return;
  }
}

}  // namespace flashspec::cuda
