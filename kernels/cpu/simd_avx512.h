#pragma once
// Small AVX-512 helpers, to be included only by files compiled with the AVX-512 flags
// (*_avx512.cpp, *_avx512vnni.cpp). `static` for the reason given in simd_avx2.h.
#include <immintrin.h>

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

}  // namespace flashspec::cpu::simd
