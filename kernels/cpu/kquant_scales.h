#pragma once
// The packed 6-bit scale fields of the K-quants.
//
// Q4_K / Q5_K (12 bytes): eight 6-bit sub-block scales and eight 6-bit mins. Bytes 0..3
// hold sc[0..3] in their low 6 bits, bytes 4..7 m[0..3]; bytes 8..11 hold the low 4 bits
// of sc[4..7] (low nibble) and m[4..7] (high nibble), whose top 2 bits sit in the spare
// top bits of bytes 0..3 (sc) and 4..7 (m).
//
// Q3_K (12 bytes): sixteen 6-bit scales (stored +32, i.e. sc - 32 is the signed scale).
// The low 4 bits of sc[0..7] are the low nibbles of bytes 0..7 and those of sc[8..15]
// the high nibbles; the top 2 bits of sc[s] are bits 2*(s/4)..2*(s/4)+1 of byte 8 + s%4.
#include <cstdint>
#include <cstring>

namespace flashspec {

struct KQuantScales {
  uint8_t sc[8];
  uint8_t m[8];
};

// Word-wise form of the Q4_K layout above, 4 sub-blocks per 32-bit operation.
inline KQuantScales unpack_q4_k_scales(const uint8_t* s) {
  uint32_t u[3];
  std::memcpy(u, s, 12);
  const uint32_t sc_lo = u[0] & 0x3f3f3f3fu;
  const uint32_t m_lo = u[1] & 0x3f3f3f3fu;
  const uint32_t sc_hi = (u[2] & 0x0f0f0f0fu) | ((u[0] >> 2) & 0x30303030u);
  const uint32_t m_hi = ((u[2] >> 4) & 0x0f0f0f0fu) | ((u[1] >> 2) & 0x30303030u);
  KQuantScales r;
  std::memcpy(r.sc, &sc_lo, 4);
  std::memcpy(r.sc + 4, &sc_hi, 4);
  std::memcpy(r.m, &m_lo, 4);
  std::memcpy(r.m + 4, &m_hi, 4);
  return r;
}

// The inverse of unpack_q4_k_scales (sc and m in 0..63).
inline void pack_q4_k_scales(const uint8_t* sc, const uint8_t* m, uint8_t* s) {
  for (int j = 0; j < 4; ++j) {
    s[j] = uint8_t((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
    s[j + 4] = uint8_t((m[j] & 63) | ((m[j + 4] >> 4) << 6));
    s[j + 8] = uint8_t((sc[j + 4] & 15) | ((m[j + 4] & 15) << 4));
  }
}

// The sixteen Q3_K scales as stored (0..63; subtract 32 for the signed scale), four per
// 32-bit operation.
inline void unpack_q3_k_scales(const uint8_t* s, uint8_t* sc) {
  uint32_t u[3];
  std::memcpy(u, s, 12);
  const uint32_t w[4] = {
      (u[0] & 0x0f0f0f0fu) | ((u[2] & 0x03030303u) << 4),
      (u[1] & 0x0f0f0f0fu) | (((u[2] >> 2) & 0x03030303u) << 4),
      ((u[0] >> 4) & 0x0f0f0f0fu) | (((u[2] >> 4) & 0x03030303u) << 4),
      ((u[1] >> 4) & 0x0f0f0f0fu) | (((u[2] >> 6) & 0x03030303u) << 4),
  };
  std::memcpy(sc, w, 16);
}

// The inverse of unpack_q3_k_scales (sc in 0..63).
inline void pack_q3_k_scales(const uint8_t* sc, uint8_t* s) {
  std::memset(s, 0, 12);
  for (int i = 0; i < 16; ++i) {
    s[i % 8] |= uint8_t((sc[i] & 15) << (i < 8 ? 0 : 4));
    s[8 + i % 4] |= uint8_t(((sc[i] >> 4) & 3) << (2 * (i / 4)));
  }
}

}  // namespace flashspec
