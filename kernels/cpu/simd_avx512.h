#pragma once
// Small AVX-512 helpers, to be included only by files compiled with the AVX-512 flags
// (*_avx512.cpp, *_avx512vnni.cpp, *_amx.cpp). `static` for the reason given in simd_avx2.h.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

// GCC 12's avx512fintrin.h seeds some intrinsics with _mm512_undefined_*(), which
// -W(maybe-)uninitialized reports at every inlined use; the values are never read. (The
// pragma holds for the rest of the including file.)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace flashspec::cpu::simd {

// Four 16-byte loads from four places, one per 128-bit lane (a in lane 0 .. d in lane 3).
static inline __m512i load4x128(const void* a, const void* b, const void* c, const void* d) {
  __m512i v = _mm512_castsi128_si512(_mm_loadu_si128(static_cast<const __m128i*>(a)));
  v = _mm512_inserti32x4(v, _mm_loadu_si128(static_cast<const __m128i*>(b)), 1);
  v = _mm512_inserti32x4(v, _mm_loadu_si128(static_cast<const __m128i*>(c)), 2);
  return _mm512_inserti32x4(v, _mm_loadu_si128(static_cast<const __m128i*>(d)), 3);
}

// Bytes [off, off+16) of 16 rows (row[i] + off), transposed: z[j] lane i = dword j of row
// i's 16. Loaded as [rows 0,4,8,12], [1,5,9,13], ... so two rounds of unpacks leave the
// rows in lane order.
static inline void rows_16x16(const uint8_t* const* row, int64_t off, __m512i (&z)[4]) {
  const __m512i a = load4x128(row[0] + off, row[4] + off, row[8] + off, row[12] + off);
  const __m512i b = load4x128(row[1] + off, row[5] + off, row[9] + off, row[13] + off);
  const __m512i c = load4x128(row[2] + off, row[6] + off, row[10] + off, row[14] + off);
  const __m512i d = load4x128(row[3] + off, row[7] + off, row[11] + off, row[15] + off);
  const __m512i ab0 = _mm512_unpacklo_epi32(a, b), ab1 = _mm512_unpackhi_epi32(a, b);
  const __m512i cd0 = _mm512_unpacklo_epi32(c, d), cd1 = _mm512_unpackhi_epi32(c, d);
  z[0] = _mm512_unpacklo_epi64(ab0, cd0);
  z[1] = _mm512_unpackhi_epi64(ab0, cd0);
  z[2] = _mm512_unpacklo_epi64(ab1, cd1);
  z[3] = _mm512_unpackhi_epi64(ab1, cd1);
}

// The fp16 at byte `off` of 16 rows, as floats. Sixteen scalar loads through a small
// buffer: they use the load and store ports only, where a gather and the narrowing it
// needs would take vector ALU slots from a repack.
static inline __m512 row_halves(const uint8_t* const* row, int64_t off) {
  alignas(32) uint16_t h[16];
  for (int i = 0; i < 16; ++i) std::memcpy(&h[i], row[i] + off, 2);
  return _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(h)));
}

}  // namespace flashspec::cpu::simd
