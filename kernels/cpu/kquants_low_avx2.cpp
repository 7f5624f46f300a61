// AVX2 kernels for the low-bit K-quants Q2_K and Q3_K (weights x Q8_K activations), built
// like the Q4_K / Q6_K kernels of kquants_avx2.cpp: one row by up to four tokens, unsigned
// quants into maddubs, the products scaled per 16-weight sub-block and widened by one madd
// against the broadcast scales, int32 sums over the whole block, floats once per block.
//  - Q2_K: q in 0..3, 4-bit scale and 4-bit min per sub-block; the mins multiply the
//    activation bsums (as Q4_K's do) in a second floating-point step.
//  - Q3_K: q in 0..7 (two bits from qs, the third from hmask) stored +4, signed 6-bit
//    scales; the +4 comes off as 4 * sum(scale * bsum), in integers (as Q6_K's +32 does).
#include <cstring>
#include <type_traits>

#include "kernels/cpu/matmul_avx2.h"

#if defined(__x86_64__) || defined(__i386__)

#include "kernels/cpu/kquant_row_tile.h"
#include "kernels/cpu/simd_avx2.h"
#include "kernels/cpu/tile_drivers.h"

namespace flashspec::cpu::avx2 {

namespace {

using namespace simd;

// The sixteen Q3_K scales minus 32 as int8: kquant_scales.h's unpack_q3_k_scales, kept
// static here because an inline function with external linkage compiled with AVX2 could
// be the copy the linker keeps for the scalar path (see simd_avx2.h).
static inline __m128i q3_k_scales(const uint8_t* s) {
  uint32_t u[3];
  std::memcpy(u, s, 12);
  const __m128i w = _mm_setr_epi32(int((u[0] & 0x0f0f0f0fu) | ((u[2] & 0x03030303u) << 4)),
                                   int((u[1] & 0x0f0f0f0fu) | (((u[2] >> 2) & 0x03030303u) << 4)),
                                   int(((u[0] >> 4) & 0x0f0f0f0fu) | (((u[2] >> 4) & 0x03030303u) << 4)),
                                   int(((u[1] >> 4) & 0x0f0f0f0fu) | (((u[2] >> 6) & 0x03030303u) << 4)));
  return _mm_sub_epi8(w, _mm_set1_epi8(32));
}

template <int NT, bool kPrefetch, class Block>
void low_k_tile(const Block* wr, const ActQ8_K& a, int64_t nb, int64_t t0, float* y, int64_t rows, int64_t r) {
  constexpr bool kQ3 = std::is_same_v<Block, BlockQ3_K>;
  const int64_t T = a.T;
  const __m256i m2 = _mm256_set1_epi8(3);
  const __m256i one = _mm256_set1_epi8(1);
  k_row_tile<NT, kPrefetch>(wr, a, nb, t0, y, rows, r,
                            [&](const Block& blk, int64_t b, auto& xq, auto& bs, auto& acc) FS_ALWAYS_INLINE {
    // The 16 sub-block scales as int8 (Q2_K: 0..15, Q3_K: -32..31) and Q2_K's mins.
    __m128i sc8;
    [[maybe_unused]] __m128i min8;
    if constexpr (kQ3) {
      sc8 = q3_k_scales(blk.scales);
    } else {
      const __m128i sm = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk.scales));
      sc8 = _mm_and_si128(sm, _mm_set1_epi8(0x0f));
      min8 = _mm_and_si128(_mm_srli_epi16(sm, 4), _mm_set1_epi8(0x0f));
    }
    [[maybe_unused]] const __m256i hm = [&] {
      if constexpr (kQ3)
        return loadu256(blk.hmask);
      else
        return _mm256_setzero_si256();
    }();
    __m256i isum[NT];
    for (int t = 0; t < NT; ++t) isum[t] = _mm256_setzero_si256();
    for (int n = 0; n < 2; ++n) {
      const __m256i qv = loadu256(blk.qs + 32 * n);
      for (int i = 0; i < 4; ++i) {
        // Run i of half n: weights 128n + 32i + l, bits 2i..2i+1 of qs byte l; 16-bit
        // shifts by at most 7 keep the bytes apart once masked.
        __m256i q = _mm256_and_si256(_mm256_srli_epi16(qv, 2 * i), m2);
        if constexpr (kQ3) {
          const __m256i h = _mm256_and_si256(_mm256_srli_epi16(hm, 4 * n + i), one);
          q = _mm256_or_si256(q, _mm256_slli_epi16(h, 2));
        }
        const __m256i sv = run_scales(sc8, 8 * n + 2 * i);
        unroll<NT>([&](auto tc) FS_ALWAYS_INLINE {
          constexpr int t = decltype(tc)::value;
          const int8_t* x = xq[t] + b * QK_K + 128 * n + 32 * i;
          isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(_mm256_maddubs_epi16(q, loadu256(x)), sv));
          keep(isum[t]);
        });
      }
    }
    const float d = fp16_to_f32(blk.d);
    if constexpr (kQ3) {
      const __m256i sc16 = _mm256_cvtepi8_epi16(sc8);
      unroll<NT>([&](auto tc) FS_ALWAYS_INLINE {
        constexpr int t = decltype(tc)::value;
        const __m256i off = _mm256_madd_epi16(loadu256(bs[t] + b * (QK_K / 16)), sc16);
        const __m256i s = _mm256_sub_epi32(isum[t], _mm256_slli_epi32(off, 2));
        acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(d * a.d[b * T + t0 + t]), acc[t]);
      });
    } else {
      const __m256i mins = _mm256_cvtepu8_epi16(min8);
      const float dmin = fp16_to_f32(blk.dmin);
      unroll<NT>([&](auto tc) FS_ALWAYS_INLINE {
        constexpr int t = decltype(tc)::value;
        const float dx = a.d[b * T + t0 + t];
        const __m256i mi = _mm256_madd_epi16(loadu256(bs[t] + b * (QK_K / 16)), mins);
        acc[t] = add_block_with_mins(acc[t], isum[t], mi, d, dmin, dx);
      });
    }
  });
}

template <class B>
struct LowKTile {
  using Block = B;
  template <int NT, bool kPrefetch>
  static constexpr auto tile = low_k_tile<NT, kPrefetch, B>;
};

}  // namespace

void gemm_q2_k(const WeightMatrix& w, const ActQ8_K& a, int64_t r0, int64_t r1, float* y) {
  drive_q8_k<LowKTile<BlockQ2_K>>(w, a, r0, r1, y);
}

void gemm_q3_k(const WeightMatrix& w, const ActQ8_K& a, int64_t r0, int64_t r1, float* y) {
  drive_q8_k<LowKTile<BlockQ3_K>>(w, a, r0, r1, y);
}

}  // namespace flashspec::cpu::avx2

#endif
