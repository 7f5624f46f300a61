// AVX2 + FMA + F16C kernels for the Q8_0-activation types (Q4_0, Q8_0 weights); the table
// of all AVX2 kernels.
//
// On Zen 3 the multiply-class instructions (maddubs, madd, fma) share two pipes and the
// loops run at about 4 instructions per cycle, so the kernels are shaped to minimize
// instructions per multiply-accumulate: each maddubs multiplies 32 int8 pairs, and the
// widening, conversion and scaling that follow it are shared by two rows (single token)
// or two tokens (several tokens) packed into the two 128-bit halves of a register.
#include "kernels/cpu/matmul_avx2.h"

#if defined(__x86_64__) || defined(__i386__)

#include "kernels/cpu/pair_tiles.h"
#include "kernels/cpu/simd_avx2.h"
#include "kernels/cpu/tile_drivers.h"

namespace flashspec::cpu {

namespace {

using namespace simd;

// How far ahead the single-token tiles prefetch, at least: one tile of 4 rows is only
// 4.6 KB for 2048 Q4_0 columns, too close to cover DRAM latency at full bandwidth.
constexpr int64_t kPrefetchAhead = 8192;

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
  // The tile reads its rows as 2*NPR interleaved streams, but they are consecutive in
  // memory, so the prefetches run over a later tile's rows as one linear stream at the
  // same pace (each line once): that keeps the DRAM access pattern sequential.
  constexpr int64_t kStep = 2 * 2 * NPR * int64_t(sizeof(Block));  // bytes per 2 blocks
  const int64_t tile_bytes = 2 * NPR * nb * int64_t(sizeof(Block));
  const int64_t ahead = kPrefetchAhead / tile_bytes > 1 ? kPrefetchAhead / tile_bytes : 1;
  const char* pf = reinterpret_cast<const char*>(w0 + ahead * 2 * NPR * nb);
  int64_t b = 0;
  for (; b + 1 < nb; b += 2) {
    for (int64_t o = 0; o < kStep; o += 64) _mm_prefetch(pf + b / 2 * kStep + o, _MM_HINT_T0);
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

// ---- Several tokens (token-pair layout, pairs_tile in pair_tiles.h): a 256-bit register
// holds 16 columns of one row, broadcast to both halves, against the same columns of the
// two tokens of a pair, loaded straight from memory as the maddubs operand. A tile is one
// row by up to kTilePairs token pairs, each weight block unpacked once for all of them.

// Q4_0: the nibbles q are multiplied as they are (maddubs wants an unsigned operand); the
// zero point comes back as -8 * sum(x) per block and token (ActQ8_0::pair_zp), added to
// the int32 sums before conversion.
struct Q4_0Nibbles {
  __m256i lo, hi;
};

template <int NP, bool kPrefetch>
void q4_0_pairs(const BlockQ4_0* w, const ActQ8_0& a, int64_t nb, int64_t p0, float* y,
                int64_t rows, int64_t r, bool) {
  const __m256i m4 = _mm256_set1_epi8(0x0f);
  const __m256i ones = _mm256_set1_epi16(1);
  pairs_tile<NP, kPrefetch, true>(
      w, a, nb, p0, y, rows, r,
      [&](const BlockQ4_0& blk) FS_ALWAYS_INLINE {
        const __m256i q = bcast128(blk.qs);
        return Q4_0Nibbles{_mm256_and_si256(q, m4), _mm256_and_si256(_mm256_srli_epi16(q, 4), m4)};
      },
      [&](const Q4_0Nibbles& n, const int8_t* xp) FS_ALWAYS_INLINE {
        const __m256i s = _mm256_add_epi16(_mm256_maddubs_epi16(n.lo, loadu256(xp)),
                                           _mm256_maddubs_epi16(n.hi, loadu256(xp + 32)));
        return _mm256_madd_epi16(s, ones);
      });
}

// Q8_0: maddubs gets |w| and x with w's sign; each lane can reach 2*128*127, so the two
// halves are widened separately.
struct Q8_0Signed {
  __m256i wl, wh, al, ah;
};

template <int NP, bool kPrefetch>
void q8_0_pairs(const BlockQ8_0* w, const ActQ8_0& a, int64_t nb, int64_t p0, float* y,
                int64_t rows, int64_t r, bool) {
  const __m256i ones = _mm256_set1_epi16(1);
  pairs_tile<NP, kPrefetch, false>(
      w, a, nb, p0, y, rows, r,
      [&](const BlockQ8_0& blk) FS_ALWAYS_INLINE {
        const __m256i wl = bcast128(blk.qs), wh = bcast128(blk.qs + 16);
        return Q8_0Signed{wl, wh, _mm256_abs_epi8(wl), _mm256_abs_epi8(wh)};
      },
      [&](const Q8_0Signed& q, const int8_t* xp) FS_ALWAYS_INLINE {
        const __m256i pl = _mm256_maddubs_epi16(q.al, _mm256_sign_epi8(loadu256(xp), q.wl));
        const __m256i ph = _mm256_maddubs_epi16(q.ah, _mm256_sign_epi8(loadu256(xp + 32), q.wh));
        return _mm256_add_epi32(_mm256_madd_epi16(pl, ones), _mm256_madd_epi16(ph, ones));
      });
}

// Tile shapes: single token 4 rows; several tokens 1 row by up to 4 token pairs (4 and 5
// measured alike on Zen 3, 3 slower).
constexpr int kDecodeRows = 4, kTileRows = 1, kTilePairs = 4;

void gemm_q4_0(const WeightMatrix& w, const ActQ8_0& a, int64_t r0, int64_t r1, float* y) {
  drive_q8_0<kDecodeRows, kTileRows, kTilePairs, BlockQ4_0>(
      w, a, r0, r1, y, q4_0_decode<2>, [](auto np, auto prefetch) {
        return q4_0_pairs<decltype(np)::value, decltype(prefetch)::value>;
      });
}

void gemm_q8_0(const WeightMatrix& w, const ActQ8_0& a, int64_t r0, int64_t r1, float* y) {
  drive_q8_0<kDecodeRows, kTileRows, kTilePairs, BlockQ8_0>(
      w, a, r0, r1, y, q8_0_decode<2>, [](auto np, auto prefetch) {
        return q8_0_pairs<decltype(np)::value, decltype(prefetch)::value>;
      });
}

}  // namespace

const IsaKernels& avx2_kernels() {
  static constexpr IsaKernels k{"avx2",
                                avx2::quantize_q8_0,
                                avx2::quantize_q8_0_pairs,
                                avx2::quantize_q8_k,
                                gemm_q4_0,
                                gemm_q8_0,
                                avx2::gemm_q4_k,
                                avx2::gemm_q6_k,
                                avx2::gemm_f32,
                                avx2::gemm_f16,
                                avx2::gemm_bf16};
  return k;
}

}  // namespace flashspec::cpu

#else  // not x86: the dispatcher never selects AVX2; keep the symbol for the linker.

namespace flashspec::cpu {
const IsaKernels& avx2_kernels() { return scalar_kernels(); }
}  // namespace flashspec::cpu

#endif
