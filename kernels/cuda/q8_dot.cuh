#pragma once
// Integer dot products of one group of 32 weights with 32 activations quantized to 8 bits,
// for the matmul of Q4_0, Q8_0, Q4_K, Q6_K and MXFP4 weights (what Q4_0 / Q8_0 / Q4_K_M
// files are made of, and gpt-oss's experts).
//
// Why: the float mat-vec spends ~4 instructions per weight (decode, convert, multiply),
// which bound it by instructions, well below the device's bandwidth. With the
// activations quantized once per matmul, a group costs a few loads, eight dp4a and one
// scale: about 1.3 instructions per weight, so the kernel is bound by memory.
//
// The activations are quantized as the CPU backend quantizes them for the same weights
// (kernels/q8_rule.h, ties to even): Q8_0 blocks of 32 with the scale rounded to fp16 for
// Q4_0 / Q8_0 weights, Q8_K blocks of 256 with a float scale for K-quants. The integer sums
// are exact, so the GPU's result differs from the CPU's only in the order the groups'
// float terms are added. Written once for device and host: the host tests hold these
// functions to the CPU backend's matmul on machines without a GPU.
#include <cstdint>
#include <cstring>

#include "core/ggml_type.h"
#include "kernels/cuda/block_formats.cuh"
#include "kernels/matvec_q8_types.h"
#include "kernels/q8_rule.h"

namespace flashspec::cuda {

// Values per activation scale: a Q8_K block for K-quant weights, a Q8_0 block otherwise.
FS_HD constexpr int q8_activation_block(GgmlType t) {
  return t == GgmlType::Q4_K || t == GgmlType::Q6_K ? 256 : 32;
}

// The byte alignment the weight loads below rely on (row starts and the data pointer):
// Q4_0 / Q8_0 / Q6_K blocks (18 / 34 / 210 bytes) are read 16 bits at a time, Q4_K's
// nibbles 32 bits; MXFP4's 17-byte blocks at any byte.
FS_HD constexpr int q8_dot_alignment(GgmlType t) {
  return t == GgmlType::Q4_K ? 4 : t == GgmlType::MXFP4 ? 1 : 2;
}

// One group's activations: its 32 codes as 8 little-endian words, the block scale and the
// sum of the codes (exact in a float: |sum| <= 32 * 127).
struct Q8Group {
  int q[8];
  float d;
  float sum;
};

FS_HD int dp4a(int a, int b, int c) {
#ifdef __CUDA_ARCH__
  return __dp4a(a, b, c);
#else
  for (int i = 0; i < 4; ++i) c += int(int8_t(uint32_t(a) >> (8 * i))) * int(int8_t(uint32_t(b) >> (8 * i)));
  return c;
#endif
}

// Aligned little-endian loads (one instruction on the device; the host copies bytes).
FS_HD uint32_t load16(const uint8_t* p) {
#ifdef __CUDA_ARCH__
  return *reinterpret_cast<const uint16_t*>(p);
#else
  return read16(p);
#endif
}
FS_HD uint32_t load32(const uint8_t* p) {
#ifdef __CUDA_ARCH__
  return *reinterpret_cast<const uint32_t*>(p);
#else
  uint32_t v;
  memcpy(&v, p, 4);
  return v;
#endif
}

// The scale a block of activations with largest magnitude amax gets, and the factor its
// values are multiplied by before rounding; the stored scale is fp16 for Q8_0 blocks.
FS_HD Q8Scale q8_activation_scale(GgmlType weights, float amax) {
  Q8Scale s = q8_scale(amax);
  if (q8_activation_block(weights) == 32) s.d = rounded_to_fp16(s.d);
  return s;
}

// Codes of 32 activations x under scale s (id from q8_activation_scale, unrounded), as
// Q8Group words; returns the sum of the codes.
FS_HD int quantize_q8_group(const float* x, const Q8Scale& s, int* words) {
  int sum = 0;
  for (int w = 0; w < 8; ++w) {
    uint32_t packed = 0;
    for (int i = 0; i < 4; ++i) {
      const int8_t c = q8_code_ties_even(x[4 * w + i] * s.id);
      sum += c;
      packed |= uint32_t(uint8_t(c)) << (8 * i);
    }
    words[w] = int(packed);
  }
  return sum;
}

// A group of an fp16 scale and N little-endian 32-bit words after it, at 2-byte alignment
// (Q4_0: N = 4, Q8_0: N = 8): the words into `words`, the scale's bits returned. On the
// device from aligned 32-bit loads joined by funnel shifts (N + 1 loads where 16-bit loads
// took 2 N + 1: the mat-vec reads groups from shared memory, whose load instructions bound
// it), which read up to 2 bytes past the group within its last 4-byte word: the staged
// chunks (matvec_q8.cu) are whole 16-byte words. On the host byte-exact loads.
template <int N>
FS_HD uint32_t load_group_words(const uint8_t* b, uint32_t* words) {
#ifdef __CUDA_ARCH__
  const uint32_t skew = uint32_t(reinterpret_cast<uintptr_t>(b) & 3u) * 8u;  // 0 or 16 bits
  const uint32_t* at = reinterpret_cast<const uint32_t*>(b - (reinterpret_cast<uintptr_t>(b) & 3u));
  uint32_t lo = at[0];
  const uint32_t d = (lo >> skew) & 0xffffu;
#pragma unroll
  for (int k = 0; k < N; ++k) {
    const uint32_t hi = at[k + 1];
    words[k] = __funnelshift_rc(lo, hi, 16u + skew);  // shift 32: hi itself
    lo = hi;
  }
  return d;
#else
  for (int k = 0; k < N; ++k) words[k] = load16(b + 2 + 4 * k) | (load16(b + 4 + 4 * k) << 16);
  return load16(b);
#endif
}

// An MXFP4 group (an E8M0 exponent, then 16 bytes) at any byte alignment: the 16 bytes as
// 4 little-endian words into `words`, the exponent returned. On the device from the 5
// aligned 32-bit words holding the group's bytes, joined by funnel shifts (the staged
// chunks are whole 16-byte words, so all 5 are there); on the host byte-exact loads.
FS_HD uint32_t load_mxfp4_words(const uint8_t* b, uint32_t* words) {
#ifdef __CUDA_ARCH__
  const uint32_t skew = uint32_t(reinterpret_cast<uintptr_t>(b) & 3u) * 8u;
  const uint32_t* at = reinterpret_cast<const uint32_t*>(b - (reinterpret_cast<uintptr_t>(b) & 3u));
  uint32_t lo = at[0];
  const uint32_t e = (lo >> skew) & 0xffu;
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const uint32_t hi = at[k + 1];
    words[k] = __funnelshift_rc(lo, hi, 8u + skew);  // shift 32: hi itself
    lo = hi;
  }
  return e;
#else
  for (int k = 0; k < 4; ++k) words[k] = load32(b + 1 + 4 * k);
  return b[0];
#endif
}

// The device's byte select (prmt: result byte n is byte s[4n+2:4n] of y:x) and per-byte
// subtraction, emulated on the host so that the host tests run the device's lookup.
FS_HD uint32_t byte_perm(uint32_t x, uint32_t y, uint32_t s) {
#ifdef __CUDA_ARCH__
  return __byte_perm(x, y, s);
#else
  const uint64_t yx = uint64_t(y) << 32 | x;
  uint32_t r = 0;
  for (int n = 0; n < 4; ++n) r |= uint32_t((yx >> (8 * ((s >> (4 * n)) & 7u))) & 0xffu) << (8 * n);
  return r;
#endif
}
FS_HD uint32_t vsub4(uint32_t a, uint32_t b) {
#ifdef __CUDA_ARCH__
  return __vsub4(a, b);
#else
  uint32_t r = 0;
  for (int n = 0; n < 4; ++n) r |= ((((a >> (8 * n)) & 0xffu) - ((b >> (8 * n)) & 0xffu)) & 0xffu) << (8 * n);
  return r;
#endif
}

// Four MXFP4 indices (0..15, one per byte) as their int8 grid values (kMXFP4Values: 0, 1,
// 2, 3, 4, 6, 8, 12 for 0..7, their negatives for 8..15): the magnitudes by one byte
// select from a table of 8, negated where bit 3 is set. About 2.5 instructions a weight,
// against 4 for a lookup per weight.
FS_HD uint32_t mxfp4_grid4(uint32_t idx) {
  const uint32_t m = idx & 0x07070707u;
  const uint32_t t = m | (m >> 4);  // bytes 0 and 2 now hold two indices each, as nibbles
  const uint32_t sel = (t & 0xffu) | ((t >> 8) & 0xff00u);
  const uint32_t magnitude = byte_perm(0x03020100u, 0x0c080604u, sel);
  const uint32_t negative = ((idx >> 3) & 0x01010101u) * 0xffu;  // 0xff in the bytes to negate
  return vsub4(magnitude ^ negative, negative);                  // -v = (v ^ 0xff) - 0xff
}

// One group of 32 weights as dp4a operands: weight i is d * sc * (q_i - offset) - m, with
// sc the integer sub-block scale of words 0..3 (sc[0]) or 4..7 (sc[1]); offset is nonzero
// only where both sc are 1 (Q4_0).
struct W8Group {
  int q[8];
  int sc[2];
  float d, m;
  int offset;
};

// Group g of a weight row, loaded once for every activation row it meets.
template <GgmlType kType>
FS_HD W8Group q8_weight_group(const uint8_t* row, int64_t g) {
  W8Group w{};
  if constexpr (kType == GgmlType::Q4_0) {
    // 18 bytes: fp16 d, 16 bytes of nibbles: byte i holds weight i (low) and i + 16 (high).
    const uint8_t* b = row + g * 18;
    uint32_t v[4];
    w.d = half_bits_to_float(uint16_t(load_group_words<4>(b, v)));
    w.sc[0] = w.sc[1] = 1;
    w.offset = 8;
    for (int k = 0; k < 4; ++k) {
      w.q[k] = int(v[k] & 0x0f0f0f0fu);
      w.q[k + 4] = int((v[k] >> 4) & 0x0f0f0f0fu);
    }
  } else if constexpr (kType == GgmlType::Q8_0) {
    // 34 bytes: fp16 d, 32 int8.
    const uint8_t* b = row + g * 34;
    uint32_t v[8];
    w.d = half_bits_to_float(uint16_t(load_group_words<8>(b, v)));
    w.sc[0] = w.sc[1] = 1;
    for (int k = 0; k < 8; ++k) w.q[k] = int(v[k]);
  } else if constexpr (kType == GgmlType::Q4_K) {
    // 144 bytes per 256 weights: d, dmin, 12 scale bytes, 128 bytes of nibbles; sub-block
    // sub = g % 8 is the low (even sub) or high (odd sub) nibbles of bytes 32 * (sub / 2)...
    const uint8_t* b = row + (g / 8) * 144;
    const int sub = int(g % 8);
    int m = 0;
    q4_k_scale_min(b + 4, sub, w.sc[0], m);
    w.sc[1] = w.sc[0];
    w.d = half_bits_to_float(uint16_t(load16(b)));
    w.m = half_bits_to_float(uint16_t(load16(b + 2))) * float(m);
    const uint8_t* q = b + 16 + 32 * (sub / 2);
    const int shift = (sub % 2) * 4;
    for (int k = 0; k < 8; ++k) w.q[k] = int((load32(q + 4 * k) >> shift) & 0x0f0f0f0fu);
  } else if constexpr (kType == GgmlType::MXFP4) {
    // 17 bytes: an E8M0 exponent, 16 bytes of nibbles (byte i: weight i low, i + 16 high),
    // each an index into the grid, which holds twice the values under half the scale.
    const uint8_t* b = row + g * 17;
    uint32_t v[4];
    w.d = e8m0_half_bits_to_float(uint8_t(load_mxfp4_words(b, v)));
    w.sc[0] = w.sc[1] = 1;
    for (int k = 0; k < 4; ++k) {
      w.q[k] = int(mxfp4_grid4(v[k] & 0x0f0f0f0fu));
      w.q[k + 4] = int(mxfp4_grid4((v[k] >> 4) & 0x0f0f0f0fu));
    }
  } else {
    static_assert(kType == GgmlType::Q6_K, "q8_weight_group: Q4_0, Q8_0, Q4_K, Q6_K or MXFP4");
    // 210 bytes per 256 weights: 128 ql, 64 qh, 16 int8 scales, fp16 d (decode_group's
    // Q6_K case says which bits a group reads); each half of a group has its own scale.
    const uint8_t* b = row + (g / 8) * 210;
    const int half = int(g % 8) / 4, run = int(g % 4);
    const uint8_t* ql = b + 64 * half + (run & 1) * 32;
    const uint8_t* qh = b + 128 + 32 * half;
    const int lo_shift = (run >> 1) * 4, hi_shift = 2 * run;
    w.sc[0] = int(int8_t(b[192 + 8 * half + 2 * run]));
    w.sc[1] = int(int8_t(b[193 + 8 * half + 2 * run]));
    w.d = half_bits_to_float(uint16_t(load16(b + 208)));
    for (int k = 0; k < 8; ++k) {
      const uint32_t lo = load16(ql + 4 * k) | (load16(ql + 4 * k + 2) << 16);
      const uint32_t hi = load16(qh + 4 * k) | (load16(qh + 4 * k + 2) << 16);
      const uint32_t q = ((lo >> lo_shift) & 0x0f0f0f0fu) | (((hi >> hi_shift) & 0x03030303u) << 4);  // 0..63
      // q - 32 in each byte as int8: bit 5 set, clear it; bit 5 clear, set bits 5..7.
      w.q[k] = int((q ^ 0x20202020u) | ((~q & 0x20202020u) * 6));
    }
  }
  return w;
}

// The group's dot product: sum over i of weight i times a.d * a.q_i, the integer part exact.
FS_HD float q8_dot(const W8Group& w, const Q8Group& a) {
  int lo = 0, hi = 0;
  for (int k = 0; k < 4; ++k) lo = dp4a(w.q[k], a.q[k], lo);
  for (int k = 4; k < 8; ++k) hi = dp4a(w.q[k], a.q[k], hi);
  const int total = w.sc[0] * lo + w.sc[1] * hi - w.offset * int(a.sum);
  return a.d * (w.d * float(total) - w.m * a.sum);
}

}  // namespace flashspec::cuda
