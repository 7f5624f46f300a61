// AVX2 kernels for the Q8_0-activation types beyond Q4_0 / Q8_0: Q5_0, Q5_1, IQ4_NL and
// MXFP4 weights. They are the Q4_0 / Q8_0 designs of matmul_avx2.cpp (same tiles from
// pair_tiles.h, same drivers) with a different unpacking of the weight block:
//  - Q5_0 / Q5_1: the nibble plus bit 4 from the 32-bit qh word gives an unsigned q in
//    0..31 for maddubs; Q5_0's zero point 16 comes back as twice the -8 * sum(x) term
//    Q4_0 uses, Q5_1's min as a second floating-point step per group of blocks;
//  - IQ4_NL and MXFP4: one pshufb maps the nibbles to the signed grid values (the
//    formats differ in the grid and in the block scale, which pair_tiles.h reads), which
//    then multiply like Q8_0's signed weights (|w| against x with w's sign).
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

// A weight block's columns 0..15 (lo) and 16..31 (hi) as bytes, in the two halves of
// registers: Q5's 5-bit q (nibble | bit 4), IQ4_NL's or MXFP4's grid values.
struct Halves {
  __m256i lo, hi;
};

// qs: the two 16-byte nibble fields for the two 128-bit halves (lo half, hi half);
// qh: the two qh words, broadcast within each half.
static inline Halves q5_unpack(__m256i qs, __m256i qh) {
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

// q's nibbles (low: columns 0..15, high: 16..31) mapped to a 16-level grid (table: the
// grid in both 128-bit halves, as pshufb wants it; mask m4 = 0x0f).
static inline Halves grid_values(__m256i q, __m256i table, __m256i m4) {
  return {_mm256_shuffle_epi8(table, _mm256_and_si256(q, m4)),
          _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(q, 4), m4))};
}

// ---- Single token (row_pairs_decode): rows 2i and 2i+1 in the two halves of a register.
// Several tokens (pairs_tile): one row's block broadcast to both halves against the two
// tokens of a pair; the block is unpacked once for all pairs of the tile.

// Q5_0 / Q5_1: unsigned q into maddubs; each maddubs lane is at most 2 * 31 * 127, so two
// of them add in int16.
template <class Block, Offset kOffset>
void q5_decode(const Block* w0, int64_t nb, int nrows, const ActQ8_0& a, float* y, int64_t r) {
  const __m256i ones = _mm256_set1_epi16(1);
  row_pairs_decode<kOffset>(w0, nb, nrows, a, y, r,
                            [&](const Block& b0, const Block& b1, __m256i xl, __m256i xh) FS_ALWAYS_INLINE {
    const __m256i qh = _mm256_set_m128i(_mm_set1_epi32(int(qh_word(b1))), _mm_set1_epi32(int(qh_word(b0))));
    const Halves q = q5_unpack(load2x128(b0.qs, b1.qs), qh);
    return _mm256_madd_epi16(_mm256_add_epi16(_mm256_maddubs_epi16(q.lo, xl), _mm256_maddubs_epi16(q.hi, xh)), ones);
  });
}

template <int NP, bool kPrefetch, class Block, Offset kOffset>
void q5_pairs(const Block* w, const ActQ8_0& a, int64_t nb, int64_t p0, float* y, int64_t rows, int64_t r, bool) {
  const __m256i ones = _mm256_set1_epi16(1);
  pairs_tile<NP, kPrefetch, kOffset>(
      w, a, nb, p0, y, rows, r,
      [&](const Block& blk) FS_ALWAYS_INLINE { return q5_unpack(bcast128(blk.qs), _mm256_set1_epi32(int(qh_word(blk)))); },
      [&](const Halves& q, const int8_t* xp) FS_ALWAYS_INLINE {
        const __m256i s = _mm256_add_epi16(_mm256_maddubs_epi16(q.lo, loadu256(xp)),
                                           _mm256_maddubs_epi16(q.hi, loadu256(xp + 32)));
        return _mm256_madd_epi16(s, ones);
      });
}

template <class B, Offset kOffset>
struct Q5Tiles {
  using Block = B;
  static constexpr auto decode = q5_decode<Block, kOffset>;
  template <int NP, bool kPrefetch>
  static constexpr auto pairs = q5_pairs<NP, kPrefetch, Block, kOffset>;
};

// IQ4_NL / MXFP4 (kGrid: kIQ4NLValues / kMXFP4Values): the grid values are signed,
// multiplied as pair_tiles.h's signed_dot.
template <class Block, const int8_t (&kGrid)[16]>
void grid_decode(const Block* w0, int64_t nb, int nrows, const ActQ8_0& a, float* y, int64_t r) {
  const __m256i m4 = _mm256_set1_epi8(0x0f);
  const __m256i ones = _mm256_set1_epi16(1);
  const __m256i table = bcast128(kGrid);
  row_pairs_decode<Offset::None>(
      w0, nb, nrows, a, y, r, [&](const Block& b0, const Block& b1, __m256i xl, __m256i xh) FS_ALWAYS_INLINE {
        const Halves w = grid_values(load2x128(b0.qs, b1.qs), table, m4);
        return signed_dot(w.lo, w.hi, xl, xh, ones);
      });
}

template <int NP, bool kPrefetch, class Block, const int8_t (&kGrid)[16]>
void grid_pairs(const Block* w, const ActQ8_0& a, int64_t nb, int64_t p0, float* y, int64_t rows, int64_t r, bool) {
  const __m256i m4 = _mm256_set1_epi8(0x0f);
  const __m256i ones = _mm256_set1_epi16(1);
  const __m256i table = bcast128(kGrid);
  pairs_tile<NP, kPrefetch, Offset::None>(
      w, a, nb, p0, y, rows, r,
      [&](const Block& blk) FS_ALWAYS_INLINE {
        const Halves v = grid_values(bcast128(blk.qs), table, m4);
        return signed_halves(v.lo, v.hi);
      },
      [&](const SignedHalves& q, const int8_t* xp) FS_ALWAYS_INLINE { return signed_dot(q, xp, ones); });
}

template <class B, const int8_t (&kGrid)[16]>
struct GridTiles {
  using Block = B;
  static constexpr auto decode = grid_decode<Block, kGrid>;
  template <int NP, bool kPrefetch>
  static constexpr auto pairs = grid_pairs<NP, kPrefetch, Block, kGrid>;
};

template <class Block, Offset kOffset>
void gemm_q5(const WeightMatrix& w, const ActQ8_0& a, int64_t r0, int64_t r1, float* y) {
  drive_q8_0<kAvx2PairTiles, Q5Tiles<Block, kOffset>>(w, a, r0, r1, y);
}

}  // namespace

void gemm_q5_0(const WeightMatrix& w, const ActQ8_0& a, int64_t r0, int64_t r1, float* y) {
  gemm_q5<BlockQ5_0, Offset::Zp16>(w, a, r0, r1, y);
}

void gemm_q5_1(const WeightMatrix& w, const ActQ8_0& a, int64_t r0, int64_t r1, float* y) {
  gemm_q5<BlockQ5_1, Offset::Min>(w, a, r0, r1, y);
}

void gemm_iq4_nl(const WeightMatrix& w, const ActQ8_0& a, int64_t r0, int64_t r1, float* y) {
  drive_q8_0<kAvx2PairTiles, GridTiles<BlockIQ4_NL, kIQ4NLValues>>(w, a, r0, r1, y);
}

void gemm_mxfp4(const WeightMatrix& w, const ActQ8_0& a, int64_t r0, int64_t r1, float* y) {
  drive_q8_0<kAvx2PairTiles, GridTiles<BlockMXFP4, kMXFP4Values>>(w, a, r0, r1, y);
}

}  // namespace flashspec::cpu::avx2

#endif
