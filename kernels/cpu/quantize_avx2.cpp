// AVX2 quantization of activation rows to Q8_0 (plain and token-pair layouts) and Q8_K,
// bit-identical to the scalar quantize_block_q8_0 / quantize_block_q8_k. The AVX-512 path
// uses these as well: quantizing is a small part of a matmul.
#include "kernels/cpu/matmul_avx2.h"

#if defined(__x86_64__) || defined(__i386__)

#include "kernels/cpu/simd_avx2.h"
#include "kernels/q8_rule.h"

namespace flashspec::cpu::avx2 {

namespace {

using namespace simd;

// One block as quantize_block_q8_0 does it (bit for bit): returns the 32 int8, the fp16
// scale widened to float and the sum of the int8.
struct Q8_0Block {
  __m256i q;
  float d;
  int32_t sum;
};
inline Q8_0Block quantize_block(const float* xb) {
  const Q8Scale s = q8_scale(hmax256(abs_max32(xb, _mm256_setzero_ps())));
  Q8_0Block r;
  r.d = _cvtsh_ss(_cvtss_sh(s.d, _MM_FROUND_TO_NEAREST_INT));
  r.q = quantize32(xb, _mm256_set1_ps(s.id));
  r.sum = hsum_epi32(sum4_epi8(r.q));
  return r;
}

}  // namespace

void quantize_q8_0(const float* x, int64_t b0, int64_t b1, int8_t* qs, float* d, int32_t* zp,
                   int64_t stride, int32_t zp_mul) {
  for (int64_t b = b0; b < b1; ++b) {
    const Q8_0Block r = quantize_block(x + b * QK8_0);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(qs + b * QK8_0), r.q);
    d[b * stride] = r.d;
    zp[b * stride] = -zp_mul * r.sum;
  }
}

void quantize_q8_0_pairs(const float* x, int64_t t, int64_t nb, int64_t b0, int64_t b1,
                         int8_t* pair_qs, float* pair_d, int32_t* pair_zp) {
  const int64_t pair = t / 2, slot = t % 2, groups = pair_groups(nb);
  for (int64_t b = b0; b < b1; ++b) {
    const Q8_0Block r = quantize_block(x + b * QK8_0);
    int8_t* q = pair_qs + (pair * nb + b) * 64 + 16 * slot;
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q), _mm256_castsi256_si128(r.q));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 32), _mm256_extracti128_si256(r.q, 1));
    const int64_t s = (pair * groups + b / 4) * 8 + 4 * slot + b % 4;
    pair_d[s] = r.d;
    pair_zp[s] = -8 * r.sum;
  }
}

void quantize_q8_k(const float* x, int64_t b0, int64_t b1, int8_t* qs, float* d, int64_t stride,
                   int16_t* bsums) {
  for (int64_t b = b0; b < b1; ++b) {
    const float* xb = x + b * QK_K;
    __m256 am = _mm256_setzero_ps();
    for (int k = 0; k < 8; ++k) am = abs_max32(xb + 32 * k, am);
    const Q8Scale sc = q8_scale(hmax256(am));
    d[b * stride] = sc.d;
    const __m256 vid = _mm256_set1_ps(sc.id);
    __m256i s[8];
    for (int k = 0; k < 8; ++k) {
      const __m256i q = quantize32(xb + 32 * k, vid);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(qs + b * QK_K + 32 * k), q);
      s[k] = sum4_epi8(q);  // low half: 4 partial sums of group 2k, high half: of 2k+1
    }
    // Two rounds of hadd leave [g0 g2 g4 g6 | g1 g3 g5 g7] and [g8 .. g14 | g9 .. g15].
    const __m256i e = _mm256_hadd_epi32(_mm256_hadd_epi32(s[0], s[1]), _mm256_hadd_epi32(s[2], s[3]));
    const __m256i f = _mm256_hadd_epi32(_mm256_hadd_epi32(s[4], s[5]), _mm256_hadd_epi32(s[6], s[7]));
    const __m256i p = _mm256_packs_epi32(e, f);  // [g0 g2 .. g14 | g1 g3 .. g15] as int16
    const __m128i even = _mm256_castsi256_si128(p), odd = _mm256_extracti128_si256(p, 1);
    int16_t* out = bsums + b * (QK_K / 16);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm_unpacklo_epi16(even, odd));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 8), _mm_unpackhi_epi16(even, odd));
  }
}

}  // namespace flashspec::cpu::avx2

#endif
