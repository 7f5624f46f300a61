#pragma once
// Small AVX2 helpers, to be included only by files compiled with the AVX2 flags
// (*_avx2.cpp / *_avx512.cpp). They are `static` on purpose: an inline function with
// external linkage would be merged by the linker with copies from other files, and the
// AVX2-compiled copy could end up called on a CPU without AVX2.
#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <utility>

// Hot-loop lambdas must be inlined into the tile loop for their register arrays to stay
// in registers; GCC does not always do so on its own.
#define FS_ALWAYS_INLINE __attribute__((always_inline))

namespace flashspec::cpu::simd {

// Calls fn(std::integral_constant<int, t>) for t = 0 .. N-1, fully unrolled, so t can
// be an immediate operand.
template <int N, class Fn>
static inline FS_ALWAYS_INLINE void unroll(Fn&& fn) {
  [&]<int... t>(std::integer_sequence<int, t...>) FS_ALWAYS_INLINE {
    (fn(std::integral_constant<int, t>{}), ...);
  }(std::make_integer_sequence<int, N>{});
}

// Pins v to a register at this point, emitting nothing. Used between the steps of an
// int32 accumulation: GCC otherwise reassociates the whole unrolled chain into a tree,
// computes every product first and spills them to the stack.
static inline FS_ALWAYS_INLINE void keep(__m256i& v) { asm("" : "+x"(v)); }

static inline float hsum128(__m128 v) {
  v = _mm_add_ps(v, _mm_movehl_ps(v, v));
  v = _mm_add_ss(v, _mm_movehdup_ps(v));
  return _mm_cvtss_f32(v);
}

static inline float hsum256(__m256 v) {
  return hsum128(_mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1)));
}

static inline float hmax256(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

static inline int32_t hsum_epi32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 1));
  return _mm_cvtsi128_si32(s);
}

static inline __m256i load2x128(const void* lo, const void* hi) {
  return _mm256_inserti128_si256(
      _mm256_castsi128_si256(_mm_loadu_si128(static_cast<const __m128i*>(lo))),
      _mm_loadu_si128(static_cast<const __m128i*>(hi)), 1);
}

static inline __m256i bcast128(const void* p) {
  return _mm256_broadcastsi128_si256(_mm_loadu_si128(static_cast<const __m128i*>(p)));
}

static inline __m256i loadu256(const void* p) {
  return _mm256_loadu_si256(static_cast<const __m256i*>(p));
}

static inline uint16_t load_u16(const void* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

static inline int32_t load_i32(const void* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

static inline float fp16_to_f32(uint16_t h) { return _cvtsh_ss(h); }

// Quantizes 32 floats as quantize_block_q8_0 / the Q8_K sub-steps do: q = rne(x * id).
// Returns the 32 int8 in element order.
static inline __m256i quantize32(const float* x, __m256 id) {
  const __m256i i0 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x), id));
  const __m256i i1 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 8), id));
  const __m256i i2 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 16), id));
  const __m256i i3 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 24), id));
  // packs interleave 128-bit lanes; the final permute restores element order.
  const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(i0, i1), _mm256_packs_epi32(i2, i3));
  const __m256i q = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  // The scalar path clamps to +-127; only x*id marginally above 127.5 could differ, and
  // amax*id rounds to 127 at most, so a clamp here would be dead code except for NaN.
  return q;
}

static inline __m256 abs_max32(const float* x, __m256 acc) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  acc = _mm256_max_ps(acc, _mm256_andnot_ps(sign, _mm256_loadu_ps(x)));
  acc = _mm256_max_ps(acc, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + 8)));
  acc = _mm256_max_ps(acc, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + 16)));
  return _mm256_max_ps(acc, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + 24)));
}

// Per 128-bit lane, sums of 4 consecutive int8 of q as int32 (8 lanes).
static inline __m256i sum4_epi8(__m256i q) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), q), _mm256_set1_epi16(1));
}

}  // namespace flashspec::cpu::simd
