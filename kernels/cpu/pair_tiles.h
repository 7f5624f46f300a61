#pragma once
// The tiles of the Q8_0-activation kernels (Q4_0, Q5_0, Q5_1, Q8_0, IQ4_NL, MXFP4 weights), shared
// by the AVX2 and AVX-512 files, which supply how one weight block is multiplied with
// activations. Both tiles (several tokens: pairs_tile; single token: decode_tile) reduce
// exact int32 block sums and then perform the very same floating-point operations per
// output, so a token's result is bit for bit the same whether it is multiplied alone or in
// a batch (speculative verification relies on it). Include only from *_avx2.cpp /
// *_avx512.cpp; internal linkage so each ISA keeps its own copy (see tile_drivers.h).
#include <immintrin.h>

#include <cstdint>
#include <type_traits>

#include "core/half.h"
#include "kernels/cpu/matmul_internal.h"
#include "kernels/cpu/simd_avx2.h"

namespace flashspec::cpu {
namespace {

using namespace simd;

// Per block a kernel has int32 partial sums [t0 x4 | t1 x4] for one row and token pair.
// Rather than converting and scaling them per block, the tile transposes and adds the sums
// of 4 blocks into [block 0..3 of t0 | of t1] with unpacks and adds, which run on the two
// pipes the multiplies do not use; then one conversion, one multiply (row scales x token
// scales) and one fma serve 4 blocks.

// Incremental 4-block reduction for one token pair: feed v[0..3] in order.
struct Reduce4 {
  __m256i held, t01;
  template <int k>
  FS_ALWAYS_INLINE void add(__m256i v) {
    if constexpr (k == 0 || k == 2) {
      held = v;
    } else {
      const __m256i t = _mm256_add_epi32(_mm256_unpacklo_epi32(held, v), _mm256_unpackhi_epi32(held, v));
      if constexpr (k == 1) t01 = t;
      if constexpr (k == 3) held = _mm256_add_epi32(_mm256_unpacklo_epi64(t01, t), _mm256_unpackhi_epi64(t01, t));
    }
  }
  FS_ALWAYS_INLINE __m256i result() const { return held; }
};

// How a weight block's offset enters the int32 block sums u of q * x (ActQ8_0::zp holds
// -8 * sum(x) per activation block):
//  None: w = d * q (Q8_0; IQ4_NL and MXFP4 with q its signed grid value);
//  Zp8: w = d * (q - 8) (Q4_0): u += zp, exact;
//  Zp16: w = d * (q - 16) (Q5_0): u += 2 * zp, exact;
//  Min: w = d * q + m (Q5_1): a second floating-point step per group adds
//       float(sum(x)) * (m * dx), the same in both tiles.
enum class Offset { None, Zp8, Zp16, Min };

// The fp16 field kField (d or m) of blocks b .. b+3 (0 past nvalid) as [4 floats | same 4].
template <auto kField, class Block>
FS_ALWAYS_INLINE inline __m256 group_scales(const Block* w, int nvalid) {
  uint64_t h = 0;
  for (int k = 0; k < 4; ++k)
    if (k < nvalid) h |= uint64_t(w[k].*kField) << (16 * k);
  return _mm256_cvtph_ps(_mm_set1_epi64x(int64_t(h)));
}

// [field of blocks b..b+3 of row a | of row b] (0 past nvalid).
template <auto kField, class Block>
FS_ALWAYS_INLINE inline __m256 row_pair_group_scales(const Block* wa, const Block* wb, int nvalid) {
  uint64_t ha = 0, hb = 0;
  for (int k = 0; k < 4; ++k)
    if (k < nvalid) {
      ha |= uint64_t(wa[k].*kField) << (16 * k);
      hb |= uint64_t(wb[k].*kField) << (16 * k);
    }
  return _mm256_cvtph_ps(_mm_set_epi64x(int64_t(hb), int64_t(ha)));
}

// MXFP4's block scales 2^(e - 128) of blocks b .. b+3 (0 past nvalid). Built from the
// exponents' bits: a per-group handful of integer operations, exact for every e.
FS_ALWAYS_INLINE inline __m128 e8m0_scales(const BlockMXFP4* w, int nvalid) {
  uint32_t bits[4] = {0, 0, 0, 0};
  for (int k = 0; k < 4; ++k)
    if (k < nvalid) bits[k] = e8m0_half_bits(w[k].e);
  return _mm_castsi128_ps(_mm_setr_epi32(int(bits[0]), int(bits[1]), int(bits[2]), int(bits[3])));
}

// The scales that multiply the levels of blocks b .. b+3 (w = scale * level), laid out as
// group_scales (one row) and row_pair_group_scales (two rows) lay them out: the fp16 d of
// most formats, MXFP4's E8M0 exponent.
template <class Block>
FS_ALWAYS_INLINE inline __m256 group_d(const Block* w, int nvalid) {
  if constexpr (std::is_same_v<Block, BlockMXFP4>) {
    const __m128 s = e8m0_scales(w, nvalid);
    return _mm256_set_m128(s, s);
  } else {
    return group_scales<&Block::d>(w, nvalid);
  }
}

template <class Block>
FS_ALWAYS_INLINE inline __m256 row_pair_group_d(const Block* wa, const Block* wb, int nvalid) {
  if constexpr (std::is_same_v<Block, BlockMXFP4>)
    return _mm256_set_m128(e8m0_scales(wb, nvalid), e8m0_scales(wa, nvalid));
  else
    return row_pair_group_scales<&Block::d>(wa, wb, nvalid);
}

// The one floating-point step per group of 4 blocks: acc += float(u) * (dw * dx), lane by
// lane (each lane one block of one output).
FS_ALWAYS_INLINE inline __m256 group_fma(__m256 acc, __m256i u, __m256 dw, __m256 dx) {
  return _mm256_fmadd_ps(_mm256_cvtepi32_ps(u), _mm256_mul_ps(dw, dx), acc);
}

// u with the integer zero-point term of kOffset added.
template <Offset kOffset>
FS_ALWAYS_INLINE inline __m256i add_zero_point(__m256i u, __m256i zp) {
  if constexpr (kOffset == Offset::Zp8) return _mm256_add_epi32(u, zp);
  if constexpr (kOffset == Offset::Zp16) return _mm256_add_epi32(u, _mm256_slli_epi32(zp, 1));
  return u;
}

// sum(x) of each activation block from its zp = -8 * sum(x) (exact: zp is a multiple of 8).
FS_ALWAYS_INLINE inline __m256i block_sums(__m256i zp) {
  return _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_srai_epi32(zp, 3));
}

// Row w (nb blocks) times token pairs p0 .. p0+NP-1. prepare(block) unpacks a weight block
// once; dot(prepared, pair_block) gives its [t0 x4 | t1 x4] int32 sums with one pair.
template <int NP, bool kPrefetch, Offset kOffset, class Block, class Prepare, class Dot>
FS_ALWAYS_INLINE inline void pairs_tile(const Block* w, const ActQ8_0& a, int64_t nb, int64_t p0,
                                        float* y, int64_t rows, int64_t r, Prepare prepare,
                                        Dot dot) {
  const int64_t groups = pair_groups(nb), full = nb / 4;
  const int8_t* xq = a.pair_qs + p0 * nb * 64;
  const float* dx = a.pair_d + p0 * groups * 8;
  const int32_t* zp = a.pair_zp + p0 * groups * 8;
  __m256 acc[NP];
  for (auto& v : acc) v = _mm256_setzero_ps();
  // First sweep only (later ones find the panel in L2): prefetch a row at least 8 KB
  // ahead, one linear stream (rows are consecutive), each line once.
  const int64_t row_bytes = nb * int64_t(sizeof(Block));
  const char* pf = reinterpret_cast<const char*>(w) + (8192 / row_bytes + 1) * row_bytes;
  auto group = [&](int64_t g, int nvalid) FS_ALWAYS_INLINE {
    if constexpr (kPrefetch)
      for (int64_t o = 0; o < 4 * int64_t(sizeof(Block)); o += 64)
        _mm_prefetch(pf + g * 4 * int64_t(sizeof(Block)) + o, _MM_HINT_T0);
    const Block* wb = w + 4 * g;
    Reduce4 red[NP];
    unroll<4>([&](auto kc) FS_ALWAYS_INLINE {
      constexpr int k = decltype(kc)::value;
      if (k < nvalid) {
        const auto prepared = prepare(wb[k]);
        unroll<NP>([&](auto pc) FS_ALWAYS_INLINE {
          constexpr int p = decltype(pc)::value;
          red[p].template add<k>(dot(prepared, xq + (p * nb + 4 * g + k) * 64));
        });
      } else {
        for (auto& rd : red) rd.template add<k>(_mm256_setzero_si256());
      }
    });
    const __m256 dw = group_d(wb, nvalid);
    unroll<NP>([&](auto pc) FS_ALWAYS_INLINE {
      constexpr int p = decltype(pc)::value;
      const int64_t o = (p * groups + g) * 8;
      const __m256 dxv = _mm256_loadu_ps(dx + o);
      if constexpr (kOffset == Offset::None) {
        acc[p] = group_fma(acc[p], red[p].result(), dw, dxv);
      } else {
        const __m256i z = loadu256(zp + o);
        acc[p] = group_fma(acc[p], add_zero_point<kOffset>(red[p].result(), z), dw, dxv);
        if constexpr (kOffset == Offset::Min)
          acc[p] = group_fma(acc[p], block_sums(z), group_scales<&Block::m>(wb, nvalid), dxv);
      }
    });
  };
  for (int64_t g = 0; g < full; ++g) group(g, 4);
  if (full < groups) group(full, int(nb - 4 * full));
  for (int p = 0; p < NP; ++p) {
    const int64_t t = 2 * (p0 + p);
    y[t * rows + r] = hsum128(_mm256_castps256_ps128(acc[p]));
    if (t + 1 < a.T) y[(t + 1) * rows + r] = hsum128(_mm256_extractf128_ps(acc[p], 1));
  }
}

// Single token (plain layout, T = 1): rows r .. r + 2*NPR - 1 starting at w0 (row stride
// nb blocks); rows at or past nrows repeat the last valid row and are not stored.
// dot(rows, b, v) sets v[i] = [row 2i x4 | row 2i+1 x4], the int32 sums of block b.
template <int NPR, Offset kOffset, class Block, class Dot>
FS_ALWAYS_INLINE inline void decode_tile(const Block* w0, int64_t nb, int nrows, const ActQ8_0& a,
                                         float* y, int64_t r, Dot dot) {
  const Block* row[2 * NPR];
  for (int i = 0; i < 2 * NPR; ++i) row[i] = w0 + (i < nrows ? i : nrows - 1) * nb;
  const int64_t groups = pair_groups(nb), full = nb / 4;
  __m256 acc[NPR];
  for (auto& v : acc) v = _mm256_setzero_ps();
  // The tile reads its rows as 2*NPR interleaved streams, but they are consecutive in
  // memory, so the prefetches run over a later tile (at least 8 KB ahead) as one linear
  // stream at the same pace, each line once: the DRAM access pattern stays sequential.
  constexpr int64_t kGroupBytes = 4 * 2 * NPR * int64_t(sizeof(Block));
  const int64_t tile_bytes = 2 * NPR * nb * int64_t(sizeof(Block));
  const int64_t ahead = 8192 / tile_bytes > 1 ? 8192 / tile_bytes : 1;
  const char* pf = reinterpret_cast<const char*>(w0 + ahead * 2 * NPR * nb);
  auto group = [&](int64_t g, int nvalid) FS_ALWAYS_INLINE {
    for (int64_t o = 0; o < kGroupBytes; o += 64) _mm_prefetch(pf + g * kGroupBytes + o, _MM_HINT_T0);
    Reduce4 red[NPR];
    unroll<4>([&](auto kc) FS_ALWAYS_INLINE {
      constexpr int k = decltype(kc)::value;
      if (k < nvalid) {
        __m256i v[NPR];
        dot(row, 4 * g + k, v);
        for (int i = 0; i < NPR; ++i) red[i].template add<k>(v[i]);
      } else {
        for (auto& rd : red) rd.template add<k>(_mm256_setzero_si256());
      }
    });
    const __m256 dx = _mm256_broadcast_ps(reinterpret_cast<const __m128*>(a.d + 4 * g));
    const __m256i zp = bcast128(a.zp + 4 * g);
    unroll<NPR>([&](auto ic) FS_ALWAYS_INLINE {
      constexpr int i = decltype(ic)::value;
      const Block* ra = row[2 * i] + 4 * g;
      const Block* rb = row[2 * i + 1] + 4 * g;
      const __m256 dw = row_pair_group_d(ra, rb, nvalid);
      acc[i] = group_fma(acc[i], add_zero_point<kOffset>(red[i].result(), zp), dw, dx);
      if constexpr (kOffset == Offset::Min)
        acc[i] = group_fma(acc[i], block_sums(zp), row_pair_group_scales<&Block::m>(ra, rb, nvalid), dx);
    });
  };
  for (int64_t g = 0; g < full; ++g) group(g, 4);
  if (full < groups) group(full, int(nb - 4 * full));
  for (int i = 0; i < NPR; ++i) {
    if (2 * i < nrows) y[r + 2 * i] = hsum128(_mm256_castps256_ps128(acc[i]));
    if (2 * i + 1 < nrows) y[r + 2 * i + 1] = hsum128(_mm256_extractf128_ps(acc[i], 1));
  }
}

// decode_tile with two row pairs per tile (the AVX2 shape): a 256-bit register holds 16
// columns of row 2i in its low half and the same columns of row 2i+1 in its high half,
// against the token's activations broadcast to both halves, so one maddubs serves two
// rows. dot(block of row 2i, block of row 2i+1, xl, xh) gives the pair's int32 sums
// [row 2i x4 | row 2i+1 x4]; xl, xh hold activation columns 0..15 and 16..31.
template <Offset kOffset, class Block, class PairDot>
FS_ALWAYS_INLINE inline void row_pairs_decode(const Block* w0, int64_t nb, int nrows, const ActQ8_0& a, float* y,
                                              int64_t r, PairDot dot) {
  decode_tile<2, kOffset>(w0, nb, nrows, a, y, r, [&](const Block* const* row, int64_t b, __m256i (&v)[2]) FS_ALWAYS_INLINE {
    const int8_t* xb = a.qs + b * 32;
    const __m256i xl = bcast128(xb), xh = bcast128(xb + 16);
    unroll<2>([&](auto ic) FS_ALWAYS_INLINE {
      constexpr int i = decltype(ic)::value;
      v[i] = dot(row[2 * i][b], row[2 * i + 1][b], xl, xh);
    });
  });
}

// Signed weights w (Q8_0; IQ4_NL's and MXFP4's grid values) into maddubs, which wants its first operand
// unsigned: |w| against x with w's sign moved onto it. A maddubs lane can reach
// 2 * 128 * 127, so the halves (wl, xl: columns 0..15; wh, xh: 16..31) widen separately.
// signed_dot gives the int32 sums per 4-column lane group.
FS_ALWAYS_INLINE inline __m256i signed_dot(__m256i wl, __m256i wh, __m256i xl, __m256i xh, __m256i ones) {
  const __m256i pl = _mm256_maddubs_epi16(_mm256_abs_epi8(wl), _mm256_sign_epi8(xl, wl));
  const __m256i ph = _mm256_maddubs_epi16(_mm256_abs_epi8(wh), _mm256_sign_epi8(xh, wh));
  return _mm256_add_epi32(_mm256_madd_epi16(pl, ones), _mm256_madd_epi16(ph, ones));
}

// The same for pairs_tile, where a weight block meets several token pairs: its magnitudes
// are taken once (signed_halves, in prepare), then signed_dot per pair against the pair
// block at xp (as loaded for maddubs: columns 0..15 of both tokens, then 16..31).
struct SignedHalves {
  __m256i wl, wh, al, ah;  // signed values and their magnitudes, columns 0..15 / 16..31
};

FS_ALWAYS_INLINE inline SignedHalves signed_halves(__m256i wl, __m256i wh) {
  return {wl, wh, _mm256_abs_epi8(wl), _mm256_abs_epi8(wh)};
}

FS_ALWAYS_INLINE inline __m256i signed_dot(const SignedHalves& w, const int8_t* xp, __m256i ones) {
  const __m256i pl = _mm256_maddubs_epi16(w.al, _mm256_sign_epi8(loadu256(xp), w.wl));
  const __m256i ph = _mm256_maddubs_epi16(w.ah, _mm256_sign_epi8(loadu256(xp + 32), w.wh));
  return _mm256_add_epi32(_mm256_madd_epi16(pl, ones), _mm256_madd_epi16(ph, ones));
}

}  // namespace
}  // namespace flashspec::cpu
