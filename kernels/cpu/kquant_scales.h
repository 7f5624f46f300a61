#pragma once
// Unpacking of the 12-byte Q4_K scales field: eight 6-bit sub-block scales and eight
// 6-bit mins. Bytes 0..3 hold sc[0..3] in their low 6 bits, bytes 4..7 m[0..3]; bytes
// 8..11 hold the low 4 bits of sc[4..7] (low nibble) and m[4..7] (high nibble), whose top
// 2 bits sit in the spare top bits of bytes 0..3 (sc) and 4..7 (m).
#include <cstdint>
#include <cstring>

namespace flashspec {

struct KQuantScales {
  uint8_t sc[8];
  uint8_t m[8];
};

// Word-wise form of the layout above, 4 sub-blocks per 32-bit operation.
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

}  // namespace flashspec
