// AVX-512 (F, BW, VL, DQ) kernels for Q4_0 and Q8_0 weights: the AVX2 designs at twice
// the width. A 512-bit register holds four 128-bit lanes, so
//  - single token: 16 columns of four consecutive rows, the token broadcast to all lanes;
//  - several tokens (token-pair layout): columns 0..15 and 16..31 of one row, each against
//    both tokens of a pair, i.e. one maddubs per row, token pair and block.
// Q5_0, Q5_1, IQ4_NL, MXFP4, the K-quants, the float types and the activation quantizers use
// the AVX2 kernels, which every AVX-512 CPU runs.
#include "kernels/cpu/matmul_internal.h"

#if defined(__x86_64__) || defined(__i386__)

#include <immintrin.h>

#include <utility>

#include "kernels/cpu/pair_tiles.h"
#include "kernels/cpu/simd_avx2.h"
#include "kernels/cpu/simd_avx512.h"
#include "kernels/cpu/tile_drivers.h"

namespace flashspec::cpu {

namespace {

using namespace simd;

inline __m512i bcast4x128(const void* p) {
  return _mm512_broadcast_i32x4(_mm_loadu_si128(static_cast<const __m128i*>(p)));
}

// w's sign moved onto x (x itself where w >= 0), for maddubs(|w|, .): AVX-512 has no
// sign_epi8. Where w = 0 the product is 0 through |w| anyway.
inline __m512i sign_of(__m512i x, __m512i w) {
  return _mm512_mask_sub_epi8(x, _mm512_movepi8_mask(w), _mm512_setzero_si512(), x);
}

// ---- Single token (decode_tile in pair_tiles.h): 16 columns of four consecutive rows per
// 512-bit register against the token broadcast to all lanes; the int32 sums of each quad
// split into its two row pairs. A tile is two quads sharing the activation loads:
// dot(rows of the quad, b, xl, xh) gives the quad's sums [r0 x4 | r1 x4 | r2 x4 | r3 x4] of
// block b (xl, xh: activation columns 0..15 and 16..31 in every lane).
template <Offset kOffset, class Block, class QuadDot>
FS_ALWAYS_INLINE inline void row_quads_decode(const Block* w0, int64_t nb, int nrows, const ActQ8_0& a, float* y,
                                              int64_t r, QuadDot dot) {
  decode_tile<4, kOffset>(w0, nb, nrows, a, y, r, [&](const Block* const* row, int64_t b, __m256i (&v)[4]) FS_ALWAYS_INLINE {
    const int8_t* xb = a.qs + b * 32;
    const __m512i xl = bcast4x128(xb), xh = bcast4x128(xb + 16);
    unroll<2>([&](auto qc) FS_ALWAYS_INLINE {
      constexpr int q = decltype(qc)::value;
      const __m512i sums = dot(row + 4 * q, b, xl, xh);
      v[2 * q] = _mm512_castsi512_si256(sums);
      v[2 * q + 1] = _mm512_extracti64x4_epi64(sums, 1);
    });
  });
}

// ---- Several tokens (token-pair layout, pairs_tile in pair_tiles.h): lanes
// [cols 0..15 | cols 0..15 | cols 16..31 | cols 16..31] of one row against one 64-byte
// token-pair block [t0 0..15 | t1 0..15 | t0 16..31 | t1 16..31], i.e. one maddubs per
// row, token pair and block; the two 256-bit halves of the int32 sums are then added into
// the [t0 x4 | t1 x4] form the shared tile reduces.

inline __m256i fold_halves(__m512i v) {
  return _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1));
}

void q4_0_decode(const BlockQ4_0* w0, int64_t nb, int nrows, const ActQ8_0& a, float* y, int64_t r) {
  const __m512i m4 = _mm512_set1_epi8(0x0f);
  const __m512i ones = _mm512_set1_epi16(1);
  row_quads_decode<Offset::Zp8>(w0, nb, nrows, a, y, r,
                                [&](const BlockQ4_0* const* rq, int64_t b, __m512i xl, __m512i xh) FS_ALWAYS_INLINE {
    const __m512i w = load4x128(rq[0][b].qs, rq[1][b].qs, rq[2][b].qs, rq[3][b].qs);
    const __m512i lo = _mm512_and_si512(w, m4);
    const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(w, 4), m4);
    const __m512i s = _mm512_add_epi16(_mm512_maddubs_epi16(lo, xl), _mm512_maddubs_epi16(hi, xh));
    return _mm512_madd_epi16(s, ones);
  });
}

template <int NP, bool kPrefetch>
void q4_0_pairs(const BlockQ4_0* w, const ActQ8_0& a, int64_t nb, int64_t p0, float* y, int64_t rows, int64_t r,
                bool) {
  const __m512i m4 = _mm512_set1_epi8(0x0f);
  const __m512i ones = _mm512_set1_epi16(1);
  // Shift counts per 16-bit lane: 0 in the low 256 bits (low nibbles, columns 0..15),
  // 4 in the high 256 bits (high nibbles, columns 16..31).
  const __m512i shifts = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(4), 1);
  pairs_tile<NP, kPrefetch, Offset::Zp8>(
      w, a, nb, p0, y, rows, r,
      [&](const BlockQ4_0& blk) FS_ALWAYS_INLINE {
        return _mm512_and_si512(_mm512_srlv_epi16(bcast4x128(blk.qs), shifts), m4);
      },
      [&](__m512i wq, const int8_t* xp) FS_ALWAYS_INLINE {
        return fold_halves(_mm512_madd_epi16(_mm512_maddubs_epi16(wq, _mm512_loadu_si512(xp)), ones));
      });
}

// Q8_0: maddubs gets |w| and x with w's sign; each lane is at most 2 * 128 * 127.
void q8_0_decode(const BlockQ8_0* w0, int64_t nb, int nrows, const ActQ8_0& a, float* y, int64_t r) {
  const __m512i ones = _mm512_set1_epi16(1);
  row_quads_decode<Offset::None>(w0, nb, nrows, a, y, r,
                                 [&](const BlockQ8_0* const* rq, int64_t b, __m512i xl, __m512i xh) FS_ALWAYS_INLINE {
    const __m512i wl = load4x128(rq[0][b].qs, rq[1][b].qs, rq[2][b].qs, rq[3][b].qs);
    const __m512i wh = load4x128(rq[0][b].qs + 16, rq[1][b].qs + 16, rq[2][b].qs + 16, rq[3][b].qs + 16);
    const __m512i pl = _mm512_maddubs_epi16(_mm512_abs_epi8(wl), sign_of(xl, wl));
    const __m512i ph = _mm512_maddubs_epi16(_mm512_abs_epi8(wh), sign_of(xh, wh));
    return _mm512_add_epi32(_mm512_madd_epi16(pl, ones), _mm512_madd_epi16(ph, ones));
  });
}

struct Q8_0Signed512 {
  __m512i w, aw;
};

template <int NP, bool kPrefetch>
void q8_0_pairs(const BlockQ8_0* w, const ActQ8_0& a, int64_t nb, int64_t p0, float* y, int64_t rows, int64_t r,
                bool) {
  const __m512i ones = _mm512_set1_epi16(1);
  pairs_tile<NP, kPrefetch, Offset::None>(
      w, a, nb, p0, y, rows, r,
      [&](const BlockQ8_0& blk) FS_ALWAYS_INLINE {
        // [qs 0..15 | qs 0..15 | qs 16..31 | qs 16..31]
        const __m512i q =
            _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.qs)));
        const __m512i wq = _mm512_shuffle_i64x2(q, q, _MM_SHUFFLE(1, 1, 0, 0));
        return Q8_0Signed512{wq, _mm512_abs_epi8(wq)};
      },
      [&](const Q8_0Signed512& q, const int8_t* xp) FS_ALWAYS_INLINE {
        // No saturation: one widening.
        const __m512i p = _mm512_maddubs_epi16(q.aw, sign_of(_mm512_loadu_si512(xp), q.w));
        return fold_halves(_mm512_madd_epi16(p, ones));
      });
}

struct Q4_0Tiles {
  using Block = BlockQ4_0;
  static constexpr auto decode = q4_0_decode;
  template <int NP, bool kPrefetch>
  static constexpr auto pairs = q4_0_pairs<NP, kPrefetch>;
};

struct Q8_0Tiles {
  using Block = BlockQ8_0;
  static constexpr auto decode = q8_0_decode;
  template <int NP, bool kPrefetch>
  static constexpr auto pairs = q8_0_pairs<NP, kPrefetch>;
};

// Single token: 8 rows (two quads) per tile; several tokens: 1 row by up to 4 pairs.
constexpr PairTileShape kTiles{8, 1, 4};

void gemm_q4_0(const WeightMatrix& w, const ActQ8_0& a, int64_t r0, int64_t r1, float* y) {
  drive_q8_0<kTiles, Q4_0Tiles>(w, a, r0, r1, y);
}

void gemm_q8_0(const WeightMatrix& w, const ActQ8_0& a, int64_t r0, int64_t r1, float* y) {
  drive_q8_0<kTiles, Q8_0Tiles>(w, a, r0, r1, y);
}

}  // namespace

// The AVX2 table with the kernels above in place of its Q4_0 and Q8_0 ones.
const IsaKernels& avx512_kernels() {
  static const IsaKernels k = [] {
    IsaKernels t = avx2_kernels();
    t.name = "avx512";
    t.q8_0_layout = [](GgmlType) { return Q8_0Layout{true, 8}; };
    t.q4_0 = gemm_q4_0;
    t.q8_0 = gemm_q8_0;
    return t;
  }();
  return k;
}

}  // namespace flashspec::cpu

#else  // not x86: the dispatcher never selects AVX-512; keep the symbol for the linker.

namespace flashspec::cpu {
const IsaKernels& avx512_kernels() { return scalar_kernels(); }
}  // namespace flashspec::cpu

#endif
