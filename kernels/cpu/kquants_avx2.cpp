// AVX2 kernels for the K-quants Q5_K and Q6_K (weights x Q8_K activations; Q2_K and Q3_K
// are in kquants_low_avx2.cpp, Q4_K in row_lanes_avx2.cpp). Sub-block scales are small integers, so maddubs
// products are scaled and widened by one madd against the broadcast scale and summed in
// int32 over the whole 256-weight block; floats only appear once per block. A tile is one
// row by up to four tokens.
#include <utility>

#include "kernels/cpu/matmul_avx2.h"

#if defined(__x86_64__) || defined(__i386__)

#include "kernels/cpu/kquant_row_tile.h"
#include "kernels/cpu/simd_avx2.h"
#include "kernels/cpu/tile_drivers.h"

namespace flashspec::cpu::avx2 {

namespace {

using namespace simd;

// See kquant_scales.h for the layout; same word-wise unpacking, 8 values per uint64.
static inline void unpack_q4_k_scales(const uint8_t* s, uint64_t& sc, uint64_t& m) {
  uint32_t u0, u1, u2;
  std::memcpy(&u0, s, 4);
  std::memcpy(&u1, s + 4, 4);
  std::memcpy(&u2, s + 8, 4);
  sc = (u0 & 0x3f3f3f3fu) |
       (uint64_t((u2 & 0x0f0f0f0fu) | ((u0 >> 2) & 0x30303030u)) << 32);
  m = (u1 & 0x3f3f3f3fu) |
      (uint64_t(((u2 >> 4) & 0x0f0f0f0fu) | ((u1 >> 2) & 0x30303030u)) << 32);
}

// pshufb index broadcasting int16 lane k of each 128-bit half.
static inline __m256i word_index(int k) { return _mm256_set1_epi16(int16_t((2 * k) | ((2 * k + 1) << 8))); }

// Q5_K: Q4_K's scales, mins and nibbles plus bit 4 of sub-block s's weight l from bit s of
// qh[l], which keeps q in 0..31 for maddubs.
template <int NT, bool kPrefetch>
void q5_k_tile(const BlockQ5_K* wr, const ActQ8_K& a, int64_t nb, int64_t t0, float* y, int64_t rows, int64_t r) {
  const int64_t T = a.T;
  const __m256i m4 = _mm256_set1_epi8(0x0f);
  k_row_tile<NT, kPrefetch>(wr, a, nb, t0, y, rows, r,
                            [&](const BlockQ5_K& blk, int64_t b, auto& xq, auto& bs, auto& acc) FS_ALWAYS_INLINE {
    uint64_t sc, m;
    unpack_q4_k_scales(blk.scales, sc, m);
    const __m256i scb = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_cvtsi64_si128(int64_t(sc))));
    // Each min covers two 16-sums of bsums: [m0 m0 m1 m1 .. m7 m7] as int16.
    const __m256i mins = _mm256_cvtepu8_epi16(_mm_shuffle_epi8(
        _mm_cvtsi64_si128(int64_t(m)), _mm_setr_epi8(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7)));
    __m256i isum[NT];
    for (int t = 0; t < NT; ++t) isum[t] = _mm256_setzero_si256();
    const __m256i qh = loadu256(blk.qh);
    for (int j = 0; j < 4; ++j) {
      const __m256i q = loadu256(blk.qs + 32 * j);
      // Bit s of each qh byte to bit 4 (16-bit shifts by at most 7 keep bytes apart here).
      const __m256i one = _mm256_set1_epi8(1);
      const __m256i lo = _mm256_or_si256(_mm256_and_si256(q, m4),  // sub-block 2j
                                         _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * j), one), 4));
      const __m256i hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), m4),  // 2j+1
                                         _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * j + 1), one), 4));
      const __m256i sl = _mm256_shuffle_epi8(scb, word_index(2 * j));
      const __m256i sh = _mm256_shuffle_epi8(scb, word_index(2 * j + 1));
      unroll<NT>([&](auto tc) FS_ALWAYS_INLINE {
        constexpr int t = decltype(tc)::value;
        const int8_t* x = xq[t] + b * QK_K + 64 * j;
        const __m256i pl = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, loadu256(x)), sl);
        const __m256i ph = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, loadu256(x + 32)), sh);
        isum[t] = _mm256_add_epi32(isum[t], _mm256_add_epi32(pl, ph));
        keep(isum[t]);
      });
    }
    const float d = fp16_to_f32(blk.d), dmin = fp16_to_f32(blk.dmin);
    unroll<NT>([&](auto tc) FS_ALWAYS_INLINE {
      constexpr int t = decltype(tc)::value;
      const float dx = a.d[b * T + t0 + t];
      const __m256i mi = _mm256_madd_epi16(loadu256(bs[t] + b * (QK_K / 16)), mins);
      acc[t] = add_block_with_mins(acc[t], isum[t], mi, d, dmin, dx);
    });
  });
}

struct Q5_KTile {
  using Block = BlockQ5_K;
  template <int NT, bool kPrefetch>
  static constexpr auto tile = q5_k_tile<NT, kPrefetch>;
};

// Q6_K stores q + 32 in 0..63 (unsigned, as maddubs wants); the 32 * sum(x) per 16-group
// is removed with the activation bsums in one madd per block.
template <int NT, bool kPrefetch>
void q6_k_tile(const BlockQ6_K* wr, const ActQ8_K& a, int64_t nb, int64_t t0, float* y, int64_t rows, int64_t r) {
  const int64_t T = a.T;
  const __m256i m4 = _mm256_set1_epi8(0x0f);
  const __m256i m30 = _mm256_set1_epi8(0x30);
  k_row_tile<NT, kPrefetch>(wr, a, nb, t0, y, rows, r,
                            [&](const BlockQ6_K& blk, int64_t b, auto& xq, auto& bs, auto& acc) FS_ALWAYS_INLINE {
    const __m128i sc8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk.scales));
    __m256i isum[NT];
    for (int t = 0; t < NT; ++t) isum[t] = _mm256_setzero_si256();
    for (int n = 0; n < 2; ++n) {
      const __m256i ql0 = loadu256(blk.ql + 64 * n);
      const __m256i ql1 = loadu256(blk.ql + 64 * n + 32);
      const __m256i qh = loadu256(blk.qh + 32 * n);
      __m256i q[4];
      q[0] = _mm256_or_si256(_mm256_and_si256(ql0, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), m30));
      q[1] = _mm256_or_si256(_mm256_and_si256(ql1, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), m30));
      q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4), _mm256_and_si256(qh, m30));
      q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                             _mm256_and_si256(_mm256_srli_epi16(qh, 2), m30));
      for (int i = 0; i < 4; ++i) {
        const __m256i sv = run_scales(sc8, 8 * n + 2 * i);
        unroll<NT>([&](auto tc) FS_ALWAYS_INLINE {
          constexpr int t = decltype(tc)::value;
          const int8_t* x = xq[t] + b * QK_K + 128 * n + 32 * i;
          isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(_mm256_maddubs_epi16(q[i], loadu256(x)), sv));
          keep(isum[t]);
        });
      }
    }
    const __m256i sc16 = _mm256_cvtepi8_epi16(sc8);
    const float d = fp16_to_f32(blk.d);
    unroll<NT>([&](auto tc) FS_ALWAYS_INLINE {
      constexpr int t = decltype(tc)::value;
      const __m256i off = _mm256_madd_epi16(loadu256(bs[t] + b * (QK_K / 16)), sc16);
      const __m256i s = _mm256_sub_epi32(isum[t], _mm256_slli_epi32(off, 5));
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(d * a.d[b * T + t0 + t]), acc[t]);
    });
  });
}

struct Q6_KTile {
  using Block = BlockQ6_K;
  template <int NT, bool kPrefetch>
  static constexpr auto tile = q6_k_tile<NT, kPrefetch>;
};

}  // namespace

void gemm_q5_k(const WeightMatrix& w, const ActQ8_K& a, int64_t r0, int64_t r1, float* y) {
  drive_q8_k<Q5_KTile>(w, a, r0, r1, y);
}

void gemm_q6_k(const WeightMatrix& w, const ActQ8_K& a, int64_t r0, int64_t r1, float* y) {
  drive_q8_k<Q6_KTile>(w, a, r0, r1, y);
}

}  // namespace flashspec::cpu::avx2

#endif
