#pragma once
// IEEE half and bfloat16 <-> float conversions, portable (no F16C needed), exact; and the
// E8M0 block exponent of MXFP4 to float.
#include <cstdint>
#include <cstring>

namespace flashspec {

inline float bits_to_float(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }
inline uint32_t float_to_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }

inline float fp16_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1f;
  const uint32_t mant = h & 0x3ff;
  if (exp == 0x1f) return bits_to_float(sign | 0x7f800000u | (mant << 13));  // inf / nan
  if (exp != 0) return bits_to_float(sign | ((exp + 112) << 23) | (mant << 13));
  if (mant == 0) return bits_to_float(sign);
  // subnormal: value = mant * 2^-24
  float v = float(mant) * (1.0f / 16777216.0f);
  return sign ? -v : v;
}

// Round-to-nearest-even float -> half.
inline uint16_t float_to_fp16(float f) {
  const uint32_t x = float_to_bits(f);
  const uint32_t sign = (x >> 16) & 0x8000;
  const uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u) return uint16_t(sign | 0x7c00 | (abs > 0x7f800000u ? 0x200 : 0));
  if (abs >= 0x477ff000u) return uint16_t(sign | 0x7c00);  // overflow -> inf
  if (abs < 0x38800000u) {                                 // subnormal or zero in half
    const float v = bits_to_float(abs) * 16777216.0f;      // scale to units of 2^-24
    uint32_t m = uint32_t(v);
    const float rem = v - float(m);
    if (rem > 0.5f || (rem == 0.5f && (m & 1))) ++m;
    return uint16_t(sign | m);
  }
  uint32_t m = abs + 0xc8000fffu + ((abs >> 13) & 1);  // rebias exponent and round to nearest even
  return uint16_t(sign | (m >> 13));
}

// fp16_to_float(float_to_fp16(x)) without leaving float: the value x takes once stored
// as fp16 (round to nearest even), for finite x of at most 65504 in magnitude. Cheap
// enough for the attention inner loops.
inline float round_to_fp16(float x) {
  const uint32_t u = float_to_bits(x);
  const uint32_t abs = u & 0x7fffffffu;
  if (abs < 0x38800000u) {  // below the smallest normal half: multiples of 2^-24
    const float magic = 0.5f;  // adding 2^-1 pushes the bits below 2^-24 out, rounding to even
    const float y = (bits_to_float(abs) + magic) - magic;
    return bits_to_float(float_to_bits(y) | (u & 0x80000000u));
  }
  return bits_to_float((u + 0xfffu + ((u >> 13) & 1u)) & ~0x1fffu);
}

inline float bf16_to_float(uint16_t h) { return bits_to_float(uint32_t(h) << 16); }

// Float bits of 2^(e - 128): MXFP4's E8M0 block exponent e as a scale, halved because
// kMXFP4Values are the E2M1 values doubled (ggml's "E8M0 to FP32 half"). Exact for every e:
// e = 0 and 1 give the subnormals 2^-128 and 2^-127, e = 255 gives 2^127 (ggml keeps 255
// a number, not the format's NaN, and so does flashspec).
constexpr uint32_t e8m0_half_bits(uint8_t e) {
  return e < 2 ? uint32_t(0x00200000u) << e : uint32_t(e - 1) << 23;
}
inline float e8m0_half_to_float(uint8_t e) { return bits_to_float(e8m0_half_bits(e)); }

}  // namespace flashspec
