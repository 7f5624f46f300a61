// AVX2 + FMA + F16C kernels for the Q8_0-activation types (Q4_0, Q8_0 weights) and the
// activation quantizers; the table of all AVX2 kernels.
//
// On Zen 3 the multiply-class instructions (maddubs, madd, fma) share two pipes and the
// loops run at about 4 instructions per cycle, so the kernels are shaped to minimize
// instructions per multiply-accumulate: each maddubs multiplies 32 int8 pairs, and the
// widening, conversion and scaling that follow it are shared by two rows (single token)
// or two tokens (several tokens) packed into the two 128-bit halves of a register.
#include "kernels/cpu/matmul_avx2.h"

#if defined(__x86_64__) || defined(__i386__)

#include "kernels/cpu/simd_avx2.h"

namespace flashspec::cpu {

namespace {

using namespace simd;

// Software prefetch distance for the weight streams. The hardware prefetcher alone leaves
// the single-token loop latency-bound at a third of the memory bandwidth on Zen 3.
#ifndef FS_PD
#define FS_PD 8192
#define FS_PH _MM_HINT_T0
#endif
constexpr int kPrefetchBytes = FS_PD;

// One block as quantize_block_q8_0 does it (bit for bit): returns the 32 int8, the fp16
// scale widened to float, and the Q4_0 zero-point term -2 * d * sum(q).
struct Q8_0Block {
  __m256i q;
  float d;
  float q4_bias;
};
inline Q8_0Block quantize_block(const float* xb) {
  const float amax = hmax256(abs_max32(xb, _mm256_setzero_ps()));
  const float dd = amax / 127.0f;
  const float id = dd != 0.0f ? 1.0f / dd : 0.0f;
  Q8_0Block r;
  r.d = _cvtsh_ss(_cvtss_sh(dd, _MM_FROUND_TO_NEAREST_INT));
  r.q = quantize32(xb, _mm256_set1_ps(id));
  r.q4_bias = -2.0f * (r.d * float(hsum_epi32(sum4_epi8(r.q))));
  return r;
}

void quantize_q8_0(const float* x, int64_t b0, int64_t b1, int8_t* qs, float* d,
                   float* q4_bias, int64_t stride) {
  for (int64_t b = b0; b < b1; ++b) {
    const Q8_0Block r = quantize_block(x + b * QK8_0);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(qs + b * QK8_0), r.q);
    d[b * stride] = r.d;
    q4_bias[b * stride] = r.q4_bias;
  }
}

void quantize_q8_0_pairs(const float* x, int64_t t, int64_t nb, int64_t b0, int64_t b1,
                         int8_t* pair_qs, float* pair_d, float* pair_bias) {
  const int64_t base = (t / 2) * nb, slot = t % 2;
  for (int64_t b = b0; b < b1; ++b) {
    const Q8_0Block r = quantize_block(x + b * QK8_0);
    int8_t* q = pair_qs + (base + b) * 64 + 16 * slot;
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q), _mm256_castsi256_si128(r.q));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 32), _mm256_extracti128_si256(r.q, 1));
    _mm_storeu_ps(pair_d + (base + b) * 8 + 4 * slot, _mm_set1_ps(r.d));
    _mm_storeu_ps(pair_bias + (base + b) * 8 + 4 * slot, _mm_set1_ps(r.q4_bias));
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

// An fp16 scale broadcast to 8 floats.
inline __m256 bcast_scale(const uint16_t* d) {
  return _mm256_cvtph_ps(_mm_set1_epi16(int16_t(load_u16(d))));
}

// ---- Single token (decode): a 256-bit register holds 16 columns of row r in its low half
// and the same columns of row r+1 in its high half; the token's activations are broadcast
// to both. One maddubs serves two rows, and the widening, conversion and scaling of both
// rows' partial sums share instructions. A tile is NPR such row pairs, sharing the
// activation loads. Plain activation layout.

// [d(row a) x4 | d(row b) x4] as floats from two fp16 block scales.
inline __m256 row_pair_scales(const uint16_t* da, const uint16_t* db) {
  const __m128i a = _mm_broadcastw_epi16(_mm_loadu_si16(da));
  const __m128i b = _mm_broadcastw_epi16(_mm_loadu_si16(db));
  return _mm256_cvtph_ps(_mm_unpacklo_epi64(a, b));
}

// Rows r .. r + 2*NPR - 1 starting at w0 (row stride nb blocks); rows at or past `nrows`
// repeat the last valid row and are not stored.
template <int NPR, class Block, class Dot>
FS_ALWAYS_INLINE inline void decode_tile(const Block* w0, int64_t nb, int nrows, float* y,
                                         int64_t r, Dot dot) {
  const Block* row[2 * NPR];
  for (int i = 0; i < 2 * NPR; ++i) row[i] = w0 + (i < nrows ? i : nrows - 1) * nb;
  // Two accumulators per row pair (even and odd blocks): one fma chain per block would
  // bound the loop by the fma latency.
  __m256 acc[NPR][2];
  for (auto& pr : acc) pr[0] = pr[1] = _mm256_setzero_ps();
  int64_t b = 0;
  for (; b + 1 < nb; b += 2) {
    // One prefetch per row per two blocks (36 bytes) keeps ahead of the 64-byte lines.
    for (int i = 0; i < 2 * NPR; ++i)
      _mm_prefetch(reinterpret_cast<const char*>(row[i] + b) + kPrefetchBytes, FS_PH);
    dot(row, b, acc, std::integral_constant<int, 0>{});
    dot(row, b + 1, acc, std::integral_constant<int, 1>{});
  }
  if (b < nb) dot(row, b, acc, std::integral_constant<int, 0>{});
  for (int pr = 0; pr < NPR; ++pr) {
    const __m256 v = _mm256_add_ps(acc[pr][0], acc[pr][1]);
    if (2 * pr < nrows) y[r + 2 * pr] = hsum128(_mm256_castps256_ps128(v));
    if (2 * pr + 1 < nrows) y[r + 2 * pr + 1] = hsum128(_mm256_extractf128_ps(v, 1));
  }
}

// Q4_0 weights are q in 0..15 with w = d * (q - 8). maddubs needs an unsigned operand, so
// the kernels multiply q itself and fold the zero point in with the activation block sums:
// per block, dw * (dx * dot(q, x) + bias) with bias = -8 * dx * sum(x) spread over the
// lanes (ActQ8_0::q4_bias): one fma, no sign fix-up.
template <int NPR>
void q4_0_decode(const BlockQ4_0* w0, int64_t nb, int nrows, const ActQ8_0& a, float* y,
                 int64_t r) {
  const __m256i m4 = _mm256_set1_epi8(0x0f);
  const __m256i ones = _mm256_set1_epi16(1);
  decode_tile<NPR>(w0, nb, nrows, y, r,
                   [&](const BlockQ4_0* const* row, int64_t b, __m256(&acc)[NPR][2], auto kc)
                       FS_ALWAYS_INLINE {
    const int8_t* xb = a.qs + b * QK4_0;
    const __m256i xl = bcast128(xb), xh = bcast128(xb + 16);
    const __m256 dx = _mm256_broadcast_ss(a.d + b), bias = _mm256_broadcast_ss(a.q4_bias + b);
    unroll<NPR>([&](auto pc) FS_ALWAYS_INLINE {
      constexpr int pr = decltype(pc)::value;
      const BlockQ4_0& b0 = row[2 * pr][b];
      const BlockQ4_0& b1 = row[2 * pr + 1][b];
      const __m256i q = load2x128(b0.qs, b1.qs);
      const __m256i lo = _mm256_and_si256(q, m4);                        // columns 0..15
      const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);  // columns 16..31
      const __m256i s = _mm256_add_epi16(_mm256_maddubs_epi16(lo, xl), _mm256_maddubs_epi16(hi, xh));
      const __m256 f = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(s, ones)), dx, bias);
      acc[pr][decltype(kc)::value] =
          _mm256_fmadd_ps(f, row_pair_scales(&b0.d, &b1.d), acc[pr][decltype(kc)::value]);
    });
  });
}

// Q8_0 weights are signed: maddubs gets |w| and x with w's sign moved onto it. Each
// maddubs lane can reach 2*128*127, so the two halves are widened separately.
template <int NPR>
void q8_0_decode(const BlockQ8_0* w0, int64_t nb, int nrows, const ActQ8_0& a, float* y,
                 int64_t r) {
  const __m256i ones = _mm256_set1_epi16(1);
  decode_tile<NPR>(w0, nb, nrows, y, r,
                   [&](const BlockQ8_0* const* row, int64_t b, __m256(&acc)[NPR][2], auto kc)
                       FS_ALWAYS_INLINE {
    const int8_t* xb = a.qs + b * QK8_0;
    const __m256i xl = bcast128(xb), xh = bcast128(xb + 16);
    const __m256 dx = _mm256_broadcast_ss(a.d + b);
    unroll<NPR>([&](auto pc) FS_ALWAYS_INLINE {
      constexpr int pr = decltype(pc)::value;
      const BlockQ8_0& b0 = row[2 * pr][b];
      const BlockQ8_0& b1 = row[2 * pr + 1][b];
      const __m256i wl = load2x128(b0.qs, b1.qs);
      const __m256i wh = load2x128(b0.qs + 16, b1.qs + 16);
      const __m256i pl = _mm256_maddubs_epi16(_mm256_abs_epi8(wl), _mm256_sign_epi8(xl, wl));
      const __m256i ph = _mm256_maddubs_epi16(_mm256_abs_epi8(wh), _mm256_sign_epi8(xh, wh));
      const __m256i i = _mm256_add_epi32(_mm256_madd_epi16(pl, ones), _mm256_madd_epi16(ph, ones));
      const __m256 f = _mm256_mul_ps(_mm256_cvtepi32_ps(i), dx);
      acc[pr][decltype(kc)::value] =
          _mm256_fmadd_ps(f, row_pair_scales(&b0.d, &b1.d), acc[pr][decltype(kc)::value]);
    });
  });
}

// ---- Several tokens: a 256-bit register holds 16 columns of one row, broadcast to both
// halves, against the same columns of two tokens (token-pair layout), loaded straight
// from memory as the maddubs operand. The scales come pre-broadcast per token half, so
// scaling is two fmas per row and token pair. A tile is two rows by NP token pairs: each
// weight block is unpacked once per 2*NP tokens and each activation load feeds two rows.

template <int R, int NP>
FS_ALWAYS_INLINE inline void store_pairs(const __m256 (&acc)[R][NP], float* y, int64_t rows,
                                         int64_t r, int64_t t0, int64_t T, bool all_rows) {
  for (int i = 0; i < R; ++i) {
    if (i > 0 && !all_rows) break;
    for (int p = 0; p < NP; ++p) {
      const int64_t t = t0 + 2 * p;
      y[t * rows + r + i] = hsum128(_mm256_castps256_ps128(acc[i][p]));
      if (t + 1 < T) y[(t + 1) * rows + r + i] = hsum128(_mm256_extractf128_ps(acc[i][p], 1));
    }
  }
}

// R rows (consecutive, from w0) by NP token pairs starting at pair p0. Only the first token
// tile over a panel streams its weights from memory and prefetches; the others find them
// in L2, and prefetches would only take load slots (the loop is bound by loads and by
// the two pipes that execute maddubs, madd and fma alike).
template <int R, int NP, bool kPrefetch>
void q4_0_pairs(const BlockQ4_0* w0, const ActQ8_0& a, int64_t nb, int64_t p0, float* y,
                int64_t rows, int64_t r, bool all_rows) {
  const __m256i m4 = _mm256_set1_epi8(0x0f);
  const __m256i ones = _mm256_set1_epi16(1);
  const int8_t* xq = a.pair_qs + p0 * nb * 64;
  const float* dx = a.pair_d + p0 * nb * 8;
  const float* bias = a.pair_bias + p0 * nb * 8;
  const int64_t row_step = all_rows ? nb : 0;  // a missing last row repeats the previous one
  __m256 acc[R][NP];
  for (auto& row : acc)
    for (auto& v : row) v = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    __m256i lo[R], hi[R];
    __m256 dw[R];
    unroll<R>([&](auto ic) FS_ALWAYS_INLINE {
      constexpr int i = decltype(ic)::value;
      const BlockQ4_0& blk = w0[i * row_step + b];
      if constexpr (kPrefetch)
        _mm_prefetch(reinterpret_cast<const char*>(&blk) + kPrefetchBytes, _MM_HINT_T0);
      const __m256i q = bcast128(blk.qs);
      lo[i] = _mm256_and_si256(q, m4);
      hi[i] = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
      dw[i] = bcast_scale(&blk.d);
    });
    unroll<NP>([&](auto pc) FS_ALWAYS_INLINE {
      constexpr int p = decltype(pc)::value;
      const int8_t* xp = xq + (p * nb + b) * 64;
      const __m256i xl = loadu256(xp), xh = loadu256(xp + 32);
      const __m256 bv = _mm256_loadu_ps(bias + (p * nb + b) * 8);
      unroll<R>([&](auto ic) FS_ALWAYS_INLINE {
        constexpr int i = decltype(ic)::value;
        const __m256i s = _mm256_add_epi16(_mm256_maddubs_epi16(lo[i], xl), _mm256_maddubs_epi16(hi[i], xh));
        const __m256 f = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(s, ones)),
                                         _mm256_loadu_ps(dx + (p * nb + b) * 8), bv);
        acc[i][p] = _mm256_fmadd_ps(f, dw[i], acc[i][p]);
      });
    });
  }
  store_pairs<R, NP>(acc, y, rows, r, 2 * p0, a.T, all_rows);
}

template <int R, int NP, bool kPrefetch>
void q8_0_pairs(const BlockQ8_0* w0, const ActQ8_0& a, int64_t nb, int64_t p0, float* y,
                int64_t rows, int64_t r, bool all_rows) {
  const __m256i ones = _mm256_set1_epi16(1);
  const int8_t* xq = a.pair_qs + p0 * nb * 64;
  const float* dx = a.pair_d + p0 * nb * 8;
  const int64_t row_step = all_rows ? nb : 0;
  __m256 acc[R][NP];
  for (auto& row : acc)
    for (auto& v : row) v = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    unroll<R>([&](auto ic) FS_ALWAYS_INLINE {
      constexpr int i = decltype(ic)::value;
      const BlockQ8_0& blk = w0[i * row_step + b];
      if constexpr (kPrefetch)
        _mm_prefetch(reinterpret_cast<const char*>(&blk) + kPrefetchBytes, _MM_HINT_T0);
      const __m256i wl = bcast128(blk.qs), wh = bcast128(blk.qs + 16);
      const __m256i al = _mm256_abs_epi8(wl), ah = _mm256_abs_epi8(wh);
      const __m256 dw = bcast_scale(&blk.d);
      unroll<NP>([&](auto pc) FS_ALWAYS_INLINE {
        constexpr int p = decltype(pc)::value;
        const int8_t* xp = xq + (p * nb + b) * 64;
        const __m256i pl = _mm256_maddubs_epi16(al, _mm256_sign_epi8(loadu256(xp), wl));
        const __m256i ph = _mm256_maddubs_epi16(ah, _mm256_sign_epi8(loadu256(xp + 32), wh));
        const __m256i s = _mm256_add_epi32(_mm256_madd_epi16(pl, ones), _mm256_madd_epi16(ph, ones));
        const __m256 f = _mm256_mul_ps(_mm256_cvtepi32_ps(s), _mm256_loadu_ps(dx + (p * nb + b) * 8));
        acc[i][p] = _mm256_fmadd_ps(f, dw, acc[i][p]);
      });
    });
  }
  store_pairs<R, NP>(acc, y, rows, r, 2 * p0, a.T, all_rows);
}

// Rows are processed in panels of about this many weight bytes: a panel stays in L2 while
// every token tile sweeps over it, and a tile's activations stay in L1 while it sweeps
// over the panel's rows.
constexpr int64_t kPanelBytes = 160 << 10;

#ifndef FS_R
#define FS_R 2
#define FS_NP 2
#endif
constexpr int kTileRows = FS_R, kTilePairs = FS_NP;

template <class Block, class Decode, class Tile>
void gemm_q8_0_act(const WeightMatrix& w, const ActQ8_0& a, int64_t r0, int64_t r1, float* y,
                   Decode decode, Tile tile) {
  const int64_t nb = w.cols / 32;
  const auto* base = static_cast<const Block*>(w.data);
  if (a.pair_qs == nullptr) {  // single token
    int64_t r = r0;
    for (; r + 4 <= r1; r += 4) decode(std::integral_constant<int, 2>{})(base + r * nb, nb, 4, a, y, r);
    if (r < r1) decode(std::integral_constant<int, 1>{})(base + r * nb, nb, int(r1 - r) > 2 ? 2 : int(r1 - r), a, y, r);
    if (r + 2 < r1) decode(std::integral_constant<int, 1>{})(base + (r + 2) * nb, nb, 1, a, y, r + 2);
    return;
  }
  const int64_t pairs = (a.T + 1) / 2;
  int64_t panel = kPanelBytes / (nb * int64_t(sizeof(Block))) / kTileRows * kTileRows;
  if (panel < kTileRows) panel = kTileRows;
  for (int64_t q0 = r0; q0 < r1; q0 += panel) {
    const int64_t q1 = q0 + panel < r1 ? q0 + panel : r1;
    int64_t p = 0;
    auto sweep = [&](auto np, auto prefetch) {
      const auto kernel = tile(np, prefetch);
      for (int64_t r = q0; r < q1; r += kTileRows) {
        if (r + kTileRows <= q1) {
          kernel(base + r * nb, a, nb, p, y, w.rows, r, true);
        } else {
          for (int64_t i = r; i < q1; ++i) kernel(base + i * nb, a, nb, p, y, w.rows, i, false);
        }
      }
    };
    constexpr std::integral_constant<int, kTilePairs> full;
    constexpr std::integral_constant<int, 1> one;
    constexpr std::true_type first;
    constexpr std::false_type later;
    if (p + kTilePairs <= pairs) {
      sweep(full, first);
      for (p += kTilePairs; p + kTilePairs <= pairs; p += kTilePairs) sweep(full, later);
    } else {
      sweep(one, first);
      ++p;
    }
    for (; p < pairs; ++p) sweep(one, later);
  }
}

void gemm_q4_0(const WeightMatrix& w, const ActQ8_0& a, int64_t r0, int64_t r1, float* y) {
  gemm_q8_0_act<BlockQ4_0>(w, a, r0, r1, y, [](auto npr) { return q4_0_decode<decltype(npr)::value>; },
                           [](auto np, auto prefetch) {
    return q4_0_pairs<kTileRows, decltype(np)::value, decltype(prefetch)::value>;
  });
}

void gemm_q8_0(const WeightMatrix& w, const ActQ8_0& a, int64_t r0, int64_t r1, float* y) {
  gemm_q8_0_act<BlockQ8_0>(w, a, r0, r1, y, [](auto npr) { return q8_0_decode<decltype(npr)::value>; },
                           [](auto np, auto prefetch) {
    return q8_0_pairs<kTileRows, decltype(np)::value, decltype(prefetch)::value>;
  });
}

}  // namespace

const IsaKernels& avx2_kernels() {
  static constexpr IsaKernels k{"avx2",         quantize_q8_0,  quantize_q8_0_pairs, quantize_q8_k,
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
