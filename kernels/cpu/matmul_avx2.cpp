// AVX2 + FMA + F16C kernels for the Q8_0-activation types (Q4_0, Q8_0 weights) and the
// activation quantizers; the table of all AVX2 kernels.
//
// Tile layout: a 256-bit register holds 16 weights of row r in its low 128 bits and the
// same 16 columns of row r+1 in its high 128 bits, and each token's activations are
// broadcast to both halves. One maddubs then serves two rows, the widening madd and the
// int->float conversion are shared by both rows, and one fma applies both rows' block
// scales (dw[r] * dx[t] in the low half, dw[r+1] * dx[t] in the high half). A tile is two
// rows by up to four tokens, so a weight block is unpacked once per four tokens and every
// activation load feeds two rows.
#include "kernels/cpu/matmul_avx2.h"

#if defined(__x86_64__) || defined(__i386__)

#include "kernels/cpu/simd_avx2.h"

namespace flashspec::cpu {

namespace {

using namespace simd;

void quantize_q8_0(const float* x, int64_t b0, int64_t b1, int8_t* qs, float* d, float* sum,
                   int64_t stride) {
  for (int64_t b = b0; b < b1; ++b) {
    const float* xb = x + b * QK8_0;
    const float amax = hmax256(abs_max32(xb, _mm256_setzero_ps()));
    const float dd = amax / 127.0f;
    const float id = dd != 0.0f ? 1.0f / dd : 0.0f;
    d[b * stride] = _cvtsh_ss(_cvtss_sh(dd, _MM_FROUND_TO_NEAREST_INT));
    const __m256i q = quantize32(xb, _mm256_set1_ps(id));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(qs + b * QK8_0), q);
    sum[b * stride] = float(hsum_epi32(sum4_epi8(q)));
  }
}

void quantize_q8_k(const float* x, int64_t b0, int64_t b1, int8_t* qs, float* d, int64_t stride,
                   int16_t* bsums) {
  for (int64_t b = b0; b < b1; ++b) {
    const float* xb = x + b * QK_K;
    __m256 am = _mm256_setzero_ps();
    for (int k = 0; k < 8; ++k) am = abs_max32(xb + 32 * k, am);
    const float dd = hmax256(am) / 127.0f;
    const float id = dd != 0.0f ? 1.0f / dd : 0.0f;
    d[b * stride] = dd;
    const __m256 vid = _mm256_set1_ps(id);
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

// [dw(row0) x4 | dw(row1) x4] as floats from the two rows' fp16 block scales.
inline __m256 row_pair_scales(uint16_t d0, uint16_t d1) {
  const __m128i h = _mm_cvtsi32_si128(int(uint32_t(d0) | (uint32_t(d1) << 16)));
  const __m128i spread = _mm_setr_epi8(0, 1, 0, 1, 0, 1, 0, 1, 2, 3, 2, 3, 2, 3, 2, 3);
  return _mm256_cvtph_ps(_mm_shuffle_epi8(h, spread));
}

// Broadcast lane t of each 128-bit half.
template <int t>
inline __m256 lane(__m256 v) {
  return _mm256_shuffle_ps(v, v, t * 0x55);
}

// Writes the tile results: acc[t] holds row0's partial sums in its low half and row1's in
// the high half; corr (lanes t and 4+t) the block-sum correction, scaled by `corr_k`.
template <int NT>
inline void store_tile(const __m256* acc, __m256 corr, float corr_k, float* y, int64_t rows,
                       int64_t r, int64_t t0, bool two_rows) {
  alignas(32) float c[8];
  _mm256_store_ps(c, corr);
  for (int t = 0; t < NT; ++t) {
    float* yt = y + (t0 + t) * rows + r;
    const __m128 lo = _mm256_castps256_ps128(acc[t]), hi = _mm256_extractf128_ps(acc[t], 1);
    yt[0] = hsum128(lo) + corr_k * c[t];
    if (two_rows) yt[1] = hsum128(hi) + corr_k * c[4 + t];
  }
}

// Q4_0 weights are q in 0..15 with w = d * (q - 8). maddubs needs an unsigned operand, so
// the tile multiplies q itself and removes 8 * d * sum(x_block) afterwards: that term
// only needs the activation block sums, accumulated for the whole tile with one fma per
// block instead of a sign fix-up per token.
template <int NT>
void q4_0_tile(const BlockQ4_0* w0, const BlockQ4_0* w1, const ActQ8_0& a, int64_t nb,
               int64_t t0, float* y, int64_t rows, int64_t r, bool two_rows) {
  const int64_t T = a.T;
  const __m256i m4 = _mm256_set1_epi8(0x0f);
  const __m256i ones = _mm256_set1_epi16(1);
  const int8_t* xq[NT];
  for (int t = 0; t < NT; ++t) xq[t] = a.qs + (t0 + t) * a.cols;
  __m256 acc[NT];
  for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps();
  __m256 corr = _mm256_setzero_ps();
  // A second accumulator set for the single-token case, where one fma chain per block
  // would otherwise bound the loop by the fma latency.
  __m256 acc_odd = _mm256_setzero_ps();

  auto block = [&](int64_t b, __m256* accs) {
    const __m256i q = load2x128(w0[b].qs, w1[b].qs);
    const __m256i lo = _mm256_and_si256(q, m4);                        // columns 0..15
    const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);  // columns 16..31
    const __m256 dw = row_pair_scales(w0[b].d, w1[b].d);
    __m256 s;
    if constexpr (NT == 1) {
      s = _mm256_mul_ps(dw, _mm256_broadcast_ss(a.d + b * T + t0));
      corr = _mm256_fmadd_ps(s, _mm256_broadcast_ss(a.sum + b * T + t0), corr);
    } else {
      s = _mm256_mul_ps(dw, _mm256_broadcast_ps(reinterpret_cast<const __m128*>(a.d + b * T + t0)));
      corr = _mm256_fmadd_ps(
          s, _mm256_broadcast_ps(reinterpret_cast<const __m128*>(a.sum + b * T + t0)), corr);
    }
    auto token = [&](auto tc) {
      constexpr int t = decltype(tc)::value;
      const int8_t* xb = xq[t] + b * QK4_0;
      const __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(lo, bcast128(xb)),
                                         _mm256_maddubs_epi16(hi, bcast128(xb + 16)));
      const __m256 f = _mm256_cvtepi32_ps(_mm256_madd_epi16(p, ones));
      accs[t] = _mm256_fmadd_ps(f, NT == 1 ? s : lane<t>(s), accs[t]);
    };
    [&]<int... t>(std::integer_sequence<int, t...>) {
      (token(std::integral_constant<int, t>{}), ...);
    }(std::make_integer_sequence<int, NT>{});
  };

  int64_t b = 0;
  if constexpr (NT == 1) {
    for (; b + 1 < nb; b += 2) {
      block(b, acc);
      block(b + 1, &acc_odd);
    }
    acc[0] = _mm256_add_ps(acc[0], acc_odd);
  }
  for (; b < nb; ++b) block(b, acc);
  store_tile<NT>(acc, corr, -8.0f, y, rows, r, t0, two_rows);
}

// Q8_0 weights are signed: maddubs gets |w| and x with w's sign moved onto it. Each
// maddubs lane can reach 2*128*127, so the two halves are widened separately.
template <int NT>
void q8_0_tile(const BlockQ8_0* w0, const BlockQ8_0* w1, const ActQ8_0& a, int64_t nb,
               int64_t t0, float* y, int64_t rows, int64_t r, bool two_rows) {
  const int64_t T = a.T;
  const __m256i ones = _mm256_set1_epi16(1);
  const int8_t* xq[NT];
  for (int t = 0; t < NT; ++t) xq[t] = a.qs + (t0 + t) * a.cols;
  __m256 acc[NT];
  for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps();
  __m256 acc_odd = _mm256_setzero_ps();

  auto block = [&](int64_t b, __m256* accs) {
    const __m256i wl = load2x128(w0[b].qs, w1[b].qs);
    const __m256i wh = load2x128(w0[b].qs + 16, w1[b].qs + 16);
    const __m256i al = _mm256_abs_epi8(wl), ah = _mm256_abs_epi8(wh);
    const __m256 dw = row_pair_scales(w0[b].d, w1[b].d);
    __m256 s;
    if constexpr (NT == 1)
      s = _mm256_mul_ps(dw, _mm256_broadcast_ss(a.d + b * T + t0));
    else
      s = _mm256_mul_ps(dw, _mm256_broadcast_ps(reinterpret_cast<const __m128*>(a.d + b * T + t0)));
    auto token = [&](auto tc) {
      constexpr int t = decltype(tc)::value;
      const int8_t* xb = xq[t] + b * QK8_0;
      const __m256i pl = _mm256_maddubs_epi16(al, _mm256_sign_epi8(bcast128(xb), wl));
      const __m256i ph = _mm256_maddubs_epi16(ah, _mm256_sign_epi8(bcast128(xb + 16), wh));
      const __m256i i = _mm256_add_epi32(_mm256_madd_epi16(pl, ones), _mm256_madd_epi16(ph, ones));
      accs[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i), NT == 1 ? s : lane<t>(s), accs[t]);
    };
    [&]<int... t>(std::integer_sequence<int, t...>) {
      (token(std::integral_constant<int, t>{}), ...);
    }(std::make_integer_sequence<int, NT>{});
  };

  int64_t b = 0;
  if constexpr (NT == 1) {
    for (; b + 1 < nb; b += 2) {
      block(b, acc);
      block(b + 1, &acc_odd);
    }
    acc[0] = _mm256_add_ps(acc[0], acc_odd);
  }
  for (; b < nb; ++b) block(b, acc);
  store_tile<NT>(acc, _mm256_setzero_ps(), 0.0f, y, rows, r, t0, two_rows);
}

// Tokens are processed in groups whose int8 activations stay within L2 while every row
// pair of the range sweeps over them; weights are re-read once per group.
inline int64_t token_group(int64_t cols) {
  const int64_t g = (int64_t(192) << 10) / cols / 4 * 4;
  return g < 4 ? 4 : g;
}

template <class Block, template <int> class Tile>
void gemm_q8_0_act(const WeightMatrix& w, const ActQ8_0& a, int64_t r0, int64_t r1, float* y) {
  const int64_t nb = w.cols / 32;
  const auto* base = static_cast<const Block*>(w.data);
  const int64_t T = a.T, tg = token_group(w.cols);
  for (int64_t g0 = 0; g0 < T; g0 += tg) {
    const int64_t g1 = g0 + tg < T ? g0 + tg : T;
    for (int64_t r = r0; r < r1; r += 2) {
      const Block* w0 = base + r * nb;
      const bool two = r + 1 < r1;
      const Block* w1 = two ? w0 + nb : w0;
      int64_t t = g0;
      for (; t + 4 <= g1; t += 4) Tile<4>::run(w0, w1, a, nb, t, y, w.rows, r, two);
      switch (g1 - t) {
        case 3: Tile<3>::run(w0, w1, a, nb, t, y, w.rows, r, two); break;
        case 2: Tile<2>::run(w0, w1, a, nb, t, y, w.rows, r, two); break;
        case 1: Tile<1>::run(w0, w1, a, nb, t, y, w.rows, r, two); break;
        default: break;
      }
    }
  }
}

template <int NT>
struct Q4_0Tile {
  static void run(const BlockQ4_0* w0, const BlockQ4_0* w1, const ActQ8_0& a, int64_t nb,
                  int64_t t0, float* y, int64_t rows, int64_t r, bool two) {
    q4_0_tile<NT>(w0, w1, a, nb, t0, y, rows, r, two);
  }
};
template <int NT>
struct Q8_0Tile {
  static void run(const BlockQ8_0* w0, const BlockQ8_0* w1, const ActQ8_0& a, int64_t nb,
                  int64_t t0, float* y, int64_t rows, int64_t r, bool two) {
    q8_0_tile<NT>(w0, w1, a, nb, t0, y, rows, r, two);
  }
};

void gemm_q4_0(const WeightMatrix& w, const ActQ8_0& a, int64_t r0, int64_t r1, float* y) {
  gemm_q8_0_act<BlockQ4_0, Q4_0Tile>(w, a, r0, r1, y);
}

void gemm_q8_0(const WeightMatrix& w, const ActQ8_0& a, int64_t r0, int64_t r1, float* y) {
  gemm_q8_0_act<BlockQ8_0, Q8_0Tile>(w, a, r0, r1, y);
}

}  // namespace

const IsaKernels& avx2_kernels() {
  static constexpr IsaKernels k{"avx2",         quantize_q8_0,  quantize_q8_k,
                                gemm_q4_0,      gemm_q8_0,      avx2::gemm_q4_k,
                                avx2::gemm_q6_k, avx2::gemm_f32, avx2::gemm_f16,
                                avx2::gemm_bf16};
  return k;
}

}  // namespace flashspec::cpu

#else  // not x86: the dispatcher never selects AVX2; keep the symbol for the linker.

namespace flashspec::cpu {
const IsaKernels& avx2_kernels() { return scalar_kernels(); }
}  // namespace flashspec::cpu

#endif
