// AVX2 kernels for the Q8_0-activation types beyond Q4_0 / Q8_0: Q5_0, Q5_1 and IQ4_NL
// weights. They are the Q4_0 / Q8_0 designs of matmul_avx2.cpp (same tiles from
// pair_tiles.h, same drivers) with a different unpacking of the weight block:
//  - Q5_0 / Q5_1: the nibble plus bit 4 from the 32-bit qh word gives an unsigned q in
//    0..31 for maddubs; Q5_0's zero point 16 comes back as twice the -8 * sum(x) term
//    Q4_0 uses, Q5_1's min as a second floating-point step per group of blocks;
//  - IQ4_NL: one pshufb maps the nibbles to the signed grid values, which then multiply
//    like Q8_0's signed weights (|w| against x with w's sign).
// The AVX-512 table uses these kernels too.
#include "kernels/cpu/matmul_avx2.h"

#if defined(__x86_64__) || defined(__i386__)

#include "kernels/cpu/pair_tiles.h"
#include "kernels/cpu/simd_avx2.h"
#include "kernels/cpu/tile_drivers.h"

namespace flashspec::cpu::avx2 {

namespace {

using namespace simd;

// pshufb selectors: in each 128-bit half, byte i takes byte i / 8 (columns 0..15) or
// 2 + i / 8 (columns 16..31) of a broadcast qh word.
static inline __m256i q5_select_lo() {
  return _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,  //
                          0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
}
static inline __m256i q5_select_hi() {
  return _mm256_setr_epi8(2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3,  //
                          2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
}

// 0x10 in each byte whose bit is set: byte i of a half tests bit i % 8 of the qh byte
// `select` put there.
static inline __m256i q5_high_bits(__m256i qh, __m256i select) {
  const __m256i bit = _mm256_set1_epi64x(int64_t(0x8040201008040201));
  const __m256i b = _mm256_and_si256(_mm256_shuffle_epi8(qh, select), bit);
  return _mm256_and_si256(_mm256_cmpeq_epi8(b, bit), _mm256_set1_epi8(0x10));
}

// The 5-bit q of 16 columns as unsigned bytes: nibbles (already masked) | bit 4.
struct Q5Halves {
  __m256i lo, hi;  // columns 0..15, 16..31
};

// qs: the two 16-byte nibble fields for the two 128-bit halves (lo half, hi half);
// qh: the two qh words, broadcast within each half.
static inline Q5Halves q5_unpack(__m256i qs, __m256i qh) {
  const __m256i m4 = _mm256_set1_epi8(0x0f);
  return {_mm256_or_si256(_mm256_and_si256(qs, m4), q5_high_bits(qh, q5_select_lo())),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(qs, 4), m4),
                          q5_high_bits(qh, q5_select_hi()))};
}

template <class Block>
static inline uint32_t qh_word(const Block& b) {
  uint32_t h;
  std::memcpy(&h, b.qh, 4);
  return h;
}

// The IQ4_NL grid as a pshufb table in both halves.
static inline __m256i iq4_nl_table() {
  return bcast128(kIQ4NLValues);
}

// ---- Single token (decode_tile): rows 2i and 2i+1 in the two halves of a register.

template <class Block, Offset kOffset>
void q5_decode(const Block* w0, int64_t nb, int nrows, const ActQ8_0& a, float* y, int64_t r) {
  const __m256i ones = _mm256_set1_epi16(1);
  decode_tile<2, kOffset>(w0, nb, nrows, a, y, r,
                          [&](const Block* const* row, int64_t b, __m256i(&v)[2]) FS_ALWAYS_INLINE {
    const int8_t* xb = a.qs + b * 32;
    const __m256i xl = bcast128(xb), xh = bcast128(xb + 16);
    unroll<2>([&](auto ic) FS_ALWAYS_INLINE {
      constexpr int i = decltype(ic)::value;
      const Block& b0 = row[2 * i][b];
      const Block& b1 = row[2 * i + 1][b];
      const __m256i qh = _mm256_set_m128i(_mm_set1_epi32(int(qh_word(b1))), _mm_set1_epi32(int(qh_word(b0))));
      const Q5Halves q = q5_unpack(load2x128(b0.qs, b1.qs), qh);
      // Each maddubs lane is at most 2 * 31 * 127, so two of them add in int16.
      v[i] = _mm256_madd_epi16(
          _mm256_add_epi16(_mm256_maddubs_epi16(q.lo, xl), _mm256_maddubs_epi16(q.hi, xh)), ones);
    });
  });
}

void iq4_nl_decode(const BlockIQ4_NL* w0, int64_t nb, int nrows, const ActQ8_0& a, float* y,
                   int64_t r) {
  const __m256i m4 = _mm256_set1_epi8(0x0f);
  const __m256i ones = _mm256_set1_epi16(1);
  const __m256i table = iq4_nl_table();
  decode_tile<2, Offset::None>(w0, nb, nrows, a, y, r,
                               [&](const BlockIQ4_NL* const* row, int64_t b, __m256i(&v)[2]) FS_ALWAYS_INLINE {
    const int8_t* xb = a.qs + b * QK4_NL;
    const __m256i xl = bcast128(xb), xh = bcast128(xb + 16);
    unroll<2>([&](auto ic) FS_ALWAYS_INLINE {
      constexpr int i = decltype(ic)::value;
      const __m256i q = load2x128(row[2 * i][b].qs, row[2 * i + 1][b].qs);
      const __m256i wl = _mm256_shuffle_epi8(table, _mm256_and_si256(q, m4));
      const __m256i wh = _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(q, 4), m4));
      // |w| <= 127: a maddubs lane reaches 2 * 127 * 127, so the halves widen separately.
      const __m256i pl = _mm256_maddubs_epi16(_mm256_abs_epi8(wl), _mm256_sign_epi8(xl, wl));
      const __m256i ph = _mm256_maddubs_epi16(_mm256_abs_epi8(wh), _mm256_sign_epi8(xh, wh));
      v[i] = _mm256_add_epi32(_mm256_madd_epi16(pl, ones), _mm256_madd_epi16(ph, ones));
    });
  });
}

// ---- Several tokens (pairs_tile): one row's block broadcast to both halves against the
// two tokens of a pair; the block is unpacked once for all pairs of the tile.

template <int NP, bool kPrefetch, class Block, Offset kOffset>
void q5_pairs(const Block* w, const ActQ8_0& a, int64_t nb, int64_t p0, float* y, int64_t rows,
              int64_t r, bool) {
  const __m256i ones = _mm256_set1_epi16(1);
  pairs_tile<NP, kPrefetch, kOffset>(
      w, a, nb, p0, y, rows, r,
      [&](const Block& blk) FS_ALWAYS_INLINE {
        return q5_unpack(bcast128(blk.qs), _mm256_set1_epi32(int(qh_word(blk))));
      },
      [&](const Q5Halves& q, const int8_t* xp) FS_ALWAYS_INLINE {
        const __m256i s = _mm256_add_epi16(_mm256_maddubs_epi16(q.lo, loadu256(xp)),
                                           _mm256_maddubs_epi16(q.hi, loadu256(xp + 32)));
        return _mm256_madd_epi16(s, ones);
      });
}

struct SignedHalves {
  __m256i wl, wh, al, ah;  // signed values and their magnitudes, columns 0..15 / 16..31
};

template <int NP, bool kPrefetch>
void iq4_nl_pairs(const BlockIQ4_NL* w, const ActQ8_0& a, int64_t nb, int64_t p0, float* y,
                  int64_t rows, int64_t r, bool) {
  const __m256i m4 = _mm256_set1_epi8(0x0f);
  const __m256i ones = _mm256_set1_epi16(1);
  const __m256i table = iq4_nl_table();
  pairs_tile<NP, kPrefetch, Offset::None>(
      w, a, nb, p0, y, rows, r,
      [&](const BlockIQ4_NL& blk) FS_ALWAYS_INLINE {
        const __m256i q = bcast128(blk.qs);
        const __m256i wl = _mm256_shuffle_epi8(table, _mm256_and_si256(q, m4));
        const __m256i wh = _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(q, 4), m4));
        return SignedHalves{wl, wh, _mm256_abs_epi8(wl), _mm256_abs_epi8(wh)};
      },
      [&](const SignedHalves& q, const int8_t* xp) FS_ALWAYS_INLINE {
        const __m256i pl = _mm256_maddubs_epi16(q.al, _mm256_sign_epi8(loadu256(xp), q.wl));
        const __m256i ph = _mm256_maddubs_epi16(q.ah, _mm256_sign_epi8(loadu256(xp + 32), q.wh));
        return _mm256_add_epi32(_mm256_madd_epi16(pl, ones), _mm256_madd_epi16(ph, ones));
      });
}

// The tile shapes of matmul_avx2.cpp.
constexpr int kDecodeRows = 4, kTileRows = 1, kTilePairs = 4;

template <class Block, Offset kOffset>
void gemm_q5(const WeightMatrix& w, const ActQ8_0& a, int64_t r0, int64_t r1, float* y) {
  drive_q8_0<kDecodeRows, kTileRows, kTilePairs, Block>(
      w, a, r0, r1, y, q5_decode<Block, kOffset>, [](auto np, auto prefetch) {
        return q5_pairs<decltype(np)::value, decltype(prefetch)::value, Block, kOffset>;
      });
}

}  // namespace

void gemm_q5_0(const WeightMatrix& w, const ActQ8_0& a, int64_t r0, int64_t r1, float* y) {
  gemm_q5<BlockQ5_0, Offset::Zp16>(w, a, r0, r1, y);
}

void gemm_q5_1(const WeightMatrix& w, const ActQ8_0& a, int64_t r0, int64_t r1, float* y) {
  gemm_q5<BlockQ5_1, Offset::Min>(w, a, r0, r1, y);
}

void gemm_iq4_nl(const WeightMatrix& w, const ActQ8_0& a, int64_t r0, int64_t r1, float* y) {
  drive_q8_0<kDecodeRows, kTileRows, kTilePairs, BlockIQ4_NL>(
      w, a, r0, r1, y, iq4_nl_decode, [](auto np, auto prefetch) {
        return iq4_nl_pairs<decltype(np)::value, decltype(prefetch)::value>;
      });
}

}  // namespace flashspec::cpu::avx2

#endif
