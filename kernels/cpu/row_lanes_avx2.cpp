// AVX2 kernels for Q4_0 and Q4_K weights with the 8 int32 lanes of a register holding 8
// weight rows, the AVX2 counterpart of the VNNI kernels' shape (matmul_avx512vnni.cpp):
//  - one maddubs multiplies 4 columns of 8 rows by the same 4 columns of one token
//    (broadcast straight from memory); the 8 products of a 32-column block add up in int16
//    (4-bit weights keep a lane within 8 * 2 * 15 * 127 = 30480) and one madd widens them
//    into 8 exact int32 row sums: no horizontal reduction. The token-pair kernels
//    (pair_tiles.h) spent about as many shuffles and adds reducing lanes as multiplies,
//    the row-by-row K-quant ones (kquants_avx2.cpp) a scale madd and an add per multiply;
//  - the floating-point work is per block and token (Q4_0: one conversion, one multiply of
//    8 row scales by the token's scale and one fma into 8 outputs; Q4_K: see Q4_KKind);
//  - every output is one float accumulator that the blocks are added to in order, the
//    same operations whether the token is multiplied alone or with others: a token's
//    result does not depend on its batch (speculative verification relies on it);
//  - with several tokens each weight register is multiplied by all of them before the
//    next, so consecutive multiplies are independent.
// Weights are stored row after row, so a tile repacks 8 rows of a stretch of blocks into
// the lane layout. With up to kMaxTok tokens each block goes from the repack straight to
// the multiply (Q4_K's single token even fuses the two per column chunk, storing nothing),
// and decode stays bound by memory; with more, the repacked panel (~10 KB) stays in L1
// while every token is multiplied against it.
//
// Q8_0 in this shape (|w| against the token's bytes with w's sign, a madd per product) was
// measured and left out: faster on 64-row passes but slower at decode than the row-pair
// kernel of matmul_avx2.cpp, with or without a fused single-token path.
#include "kernels/cpu/matmul_avx2.h"

#if defined(__x86_64__) || defined(__i386__)

#include <immintrin.h>

#include <cstring>

#include "kernels/cpu/row_lane_driver.h"
#include "kernels/cpu/simd_avx2.h"

namespace flashspec::cpu::avx2 {

namespace {

using namespace simd;

constexpr int kRows = 8;  // rows per tile: one per int32 lane

// The 8 rows of a tile; rows past the matrix repeat the last one (their outputs are not
// stored).
struct TileRows {
  const uint8_t* row[kRows];
};

// The register shape for row_lane_driver.h.
struct Lanes8 {
  // Tokens multiplied per pass over a panel: their int16 sums and float accumulators stay
  // in registers (AVX2 has 16; 6 and 8 measured slower).
  static constexpr int kMaxTok = 4;
  using Reg = __m256i;
  using FReg = __m256;

  static TileRows tile_rows(const uint8_t* base, int64_t rs, int64_t r, int nvalid) {
    TileRows t;
    for (int i = 0; i < kRows; ++i) t.row[i] = base + (r + (i < nvalid ? i : nvalid - 1)) * rs;
    return t;
  }
  static FS_ALWAYS_INLINE __m256 load(const float* p) { return _mm256_load_ps(p); }
  static FS_ALWAYS_INLINE void store(float* p, __m256 f) { _mm256_store_ps(p, f); }
  static FS_ALWAYS_INLINE __m256 zero() { return _mm256_setzero_ps(); }
  // The rows below nvalid, as the mask of maskstore.
  static __m256i keep(int nvalid) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(nvalid), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  static FS_ALWAYS_INLINE void store_rows(float* y, __m256i keep, __m256 f) { _mm256_maskstore_ps(y, keep, f); }
};

// Bytes [off, off+16) of the 8 rows, transposed: z[j] lane i = dword j of row i. Loaded as
// [rows 0,4], [1,5], [2,6], [3,7] so two rounds of unpacks leave the rows in lane order.
inline void rows_8x16(const TileRows& t, int64_t off, __m256i (&z)[4]) {
  const __m256i a = load2x128(t.row[0] + off, t.row[4] + off);
  const __m256i b = load2x128(t.row[1] + off, t.row[5] + off);
  const __m256i c = load2x128(t.row[2] + off, t.row[6] + off);
  const __m256i d = load2x128(t.row[3] + off, t.row[7] + off);
  const __m256i ab0 = _mm256_unpacklo_epi32(a, b), ab1 = _mm256_unpackhi_epi32(a, b);
  const __m256i cd0 = _mm256_unpacklo_epi32(c, d), cd1 = _mm256_unpackhi_epi32(c, d);
  z[0] = _mm256_unpacklo_epi64(ab0, cd0);
  z[1] = _mm256_unpackhi_epi64(ab0, cd0);
  z[2] = _mm256_unpacklo_epi64(ab1, cd1);
  z[3] = _mm256_unpackhi_epi64(ab1, cd1);
}

// The low / high 4 bits of each byte (Q4_0's and Q4_K's two columns per byte).
inline __m256i low_nibbles(__m256i v) { return _mm256_and_si256(v, _mm256_set1_epi8(0x0f)); }
inline __m256i high_nibbles(__m256i v) { return _mm256_and_si256(_mm256_srli_epi16(v, 4), _mm256_set1_epi8(0x0f)); }

// The fp16 at byte `off` of every row, as floats: eight scalar loads through a small buffer
// use the load and store ports, not the vector ALUs the repack needs.
inline __m256 row_halves(const TileRows& t, int64_t off) {
  alignas(16) uint16_t h[kRows];
  for (int i = 0; i < kRows; ++i) std::memcpy(&h[i], t.row[i] + off, 2);
  return _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(h)));
}

// Low / high fp16 of each dword as floats.
inline __m256 fp16_half(__m256i v, bool high) {
  const __m256i h = high ? _mm256_srli_epi32(v, 16) : _mm256_and_si256(v, _mm256_set1_epi32(0xffff));
  // packus leaves [lanes 0-3, 0 x4 | lanes 4-7, 0 x4] as int16; the permute joins them.
  const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(h, _mm256_setzero_si256()), 0x08);
  return _mm256_cvtph_ps(_mm256_castsi256_si128(packed));
}

// ---- Q4_0 (Q8_0 activations). Panel block: w[j] (j = 0..7) holds columns 4j..4j+3 of the
// 8 rows as the nibbles q (0..15; w = d * (q - 8), the -8 comes back through ActQ8_0::zp),
// then the 8 row scales.
struct Q4_0Kind {
  using Block = BlockQ4_0;
  using Act = ActQ8_0;
  static constexpr int64_t kUnits = 9;         // registers per panel block
  static constexpr int64_t kPanelBlocks = 32;  // 9 KB
  static constexpr int kPrefetchSteps = 1;

  template <class Prefetch>
  static FS_ALWAYS_INLINE void prep(const TileRows& t, int64_t b, __m256i* out, Prefetch&& pf) {
    const int64_t o = b * int64_t(sizeof(Block));
    pf();
    __m256i z[4];
    rows_8x16(t, o + 2, z);
    for (int j = 0; j < 4; ++j) {
      out[j] = low_nibbles(z[j]);       // columns 4j..
      out[4 + j] = high_nibbles(z[j]);  // 16 + 4j..
    }
    out[8] = _mm256_castps_si256(row_halves(t, o));
  }

  // Panel block p (block b) times tokens t0 .. t0 + NT - 1, added to f[]: the operations
  // every output goes through, whatever the path and NT. Column group j of every token
  // comes before group j + 1 of any, so consecutive multiplies are independent.
  template <int NT>
  static FS_ALWAYS_INLINE void tokens(const __m256i* p, const Act& a, int64_t b, int64_t t0, __m256 (&f)[NT]) {
    const int64_t T = a.T;
    const int8_t* x = a.qs + t0 * a.cols + b * 32;
    __m256i s[NT];
    for (int j = 0; j < 8; ++j) {
      const __m256i w = _mm256_load_si256(p + j);
      for (int i = 0; i < NT; ++i) {
        const __m256i prod = _mm256_maddubs_epi16(w, _mm256_set1_epi32(load_i32(x + i * a.cols + 4 * j)));
        s[i] = j == 0 ? prod : _mm256_add_epi16(s[i], prod);
      }
    }
    const __m256i ones = _mm256_set1_epi16(1);
    const __m256 dw = _mm256_castsi256_ps(p[8]);
    for (int i = 0; i < NT; ++i) {
      const __m256i sum = _mm256_add_epi32(_mm256_madd_epi16(s[i], ones), _mm256_set1_epi32(a.zp[b * T + t0 + i]));
      const __m256 dx = _mm256_set1_ps(a.d[b * T + t0 + i]);
      f[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), _mm256_mul_ps(dw, dx), f[i]);
    }
  }
};

// ---- Q4_K (Q8_K activations), in llama.cpp's arithmetic: per super-block and output the
// exact int32 sums isum = sum over sub-blocks s of sc_s * dot_s (dot_s = q . x of the 32
// columns) and off = sum of m_s * (the activations' two 16-sums of s), then in float
// f += isum * (d * dx) and f -= off * (dmin * dx).
// Panel block: w[8s + j] holds columns 4j..4j+3 of sub-block s (s, j = 0..7) of the 8 rows
// as nibbles, then the scales and the mins as int16 pairs (sc_s, sc_s) [8] and (m_s, m_s)
// [8], then d and dmin as floats. One madd against the pairs both widens and scales.
struct Q4_KKind {
  using Block = BlockQ4_K;
  using Act = ActQ8_K;
  static constexpr int64_t kUnits = 82;
  static constexpr int64_t kPanelBlocks = 4;  // 10 KB

  // A super-block is 8 rows x 144 bytes: its share of the next tile's prefetch goes out in
  // 8 steps, one per column chunk (all at once, they filled the line-fill buffers and
  // stalled the repack: decode ran below the row-by-row kernel).
  static constexpr int kPrefetchSteps = 8;

  template <class Prefetch>
  static FS_ALWAYS_INLINE void prep(const TileRows& t, int64_t b, __m256i* out, Prefetch&& pf) {
    const int64_t o = b * int64_t(sizeof(Block));
    for (int c = 0; c < 8; ++c) {
      pf();
      // qs bytes 16c..16c+15: dwords 4c..4c+3 of the 32-byte run of sub-blocks 2(c/2)
      // (low nibbles) and 2(c/2)+1 (high nibbles).
      __m256i z[4];
      rows_8x16(t, o + 16 + 16 * c, z);
      const int s = 2 * (c / 2), j0 = 4 * (c % 2);
      for (int j = 0; j < 4; ++j) {
        out[8 * s + j0 + j] = low_nibbles(z[j]);
        out[8 * (s + 1) + j0 + j] = high_nibbles(z[j]);
      }
    }
    scales(t, o, out + 64);
  }

  // Units 64..81 of the panel block at byte o of every row, from the block's first 16
  // bytes: d and dmin, then the 12 bytes of 6-bit scales and mins, unpacked as
  // kquant_scales.h does, 8 rows at once.
  static FS_ALWAYS_INLINE void scales(const TileRows& t, int64_t o, __m256i* out) {
    __m256i h[4];
    rows_8x16(t, o, h);
    const __m256i m6 = _mm256_set1_epi32(0x3f3f3f3f), lo4 = _mm256_set1_epi32(0x0f0f0f0f),
                  top2 = _mm256_set1_epi32(0x30303030);
    const __m256i sc[2] = {_mm256_and_si256(h[1], m6),
                           _mm256_or_si256(_mm256_and_si256(h[3], lo4), _mm256_and_si256(_mm256_srli_epi32(h[1], 2), top2))};
    const __m256i mn[2] = {_mm256_and_si256(h[2], m6),
                           _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(h[3], 4), lo4),
                                           _mm256_and_si256(_mm256_srli_epi32(h[2], 2), top2))};
    const __m256i lane4 = _mm256_setr_epi32(0, 0x04040404, 0x08080808, 0x0c0c0c0c, 0, 0x04040404, 0x08080808, 0x0c0c0c0c);
    for (int s = 0; s < 8; ++s) {
      // Byte s % 4 of each lane to bytes 0 and 2 of the lane, zeros in 1 and 3.
      const int e = s % 4;
      const __m256i ctl = _mm256_add_epi8(lane4, _mm256_set1_epi32(int32_t(0x80008000u | (e << 16) | e)));
      out[s] = _mm256_shuffle_epi8(sc[s / 4], ctl);
      out[8 + s] = _mm256_shuffle_epi8(mn[s / 4], ctl);
    }
    out[16] = _mm256_castps_si256(fp16_half(h[0], false));
    out[17] = _mm256_castps_si256(fp16_half(h[0], true));
  }

  template <int NT>
  static FS_ALWAYS_INLINE void tokens(const __m256i* p, const Act& a, int64_t b, int64_t t0, __m256 (&f)[NT]) {
    const int8_t* x = a.qs + t0 * a.cols + b * QK_K;
    __m256i isum[NT];
    for (auto& v : isum) v = _mm256_setzero_si256();
    for (int g = 0; g < 8; ++g) {
      __m256i s[NT];
      for (int j = 0; j < 8; ++j) {
        const __m256i w = _mm256_load_si256(p + 8 * g + j);
        for (int i = 0; i < NT; ++i) {
          const __m256i prod = _mm256_maddubs_epi16(w, _mm256_set1_epi32(load_i32(x + i * a.cols + 32 * g + 4 * j)));
          s[i] = j == 0 ? prod : _mm256_add_epi16(s[i], prod);
        }
      }
      for (int i = 0; i < NT; ++i) isum[i] = _mm256_add_epi32(isum[i], _mm256_madd_epi16(s[i], p[64 + g]));
    }
    for (int i = 0; i < NT; ++i) finish(p + 64, a, b, t0 + i, isum[i], f[i]);
  }

  // Token t's mins term and floating-point step for block b from its scaled sums isum; u:
  // the block's scale units (64..81).
  static FS_ALWAYS_INLINE void finish(const __m256i* u, const Act& a, int64_t b, int64_t t, __m256i isum, __m256& f) {
    const int16_t* bs = a.bsums + t * (a.cols / 16) + b * 16;
    __m256i off = _mm256_madd_epi16(u[8], _mm256_set1_epi32(load_i32(bs)));
    for (int k = 1; k < 8; ++k) off = _mm256_add_epi32(off, _mm256_madd_epi16(u[8 + k], _mm256_set1_epi32(load_i32(bs + 2 * k))));
    const __m256 dx = _mm256_set1_ps(a.d[b * a.T + t]);
    f = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(_mm256_castsi256_ps(u[16]), dx), f);
    f = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(off), _mm256_mul_ps(_mm256_castsi256_ps(u[17]), dx), f);
  }

  // A single token: the repack fused with the multiply per pair of column chunks, nothing
  // stored; the same integer sums and floating-point operations as tokens<1>.
  template <class Prefetch>
  static FS_ALWAYS_INLINE void single(const TileRows& t, const Act& a, int64_t b, __m256& f, Prefetch&& pf) {
    const int64_t o = b * int64_t(sizeof(Block));
    const int8_t* x = a.qs + b * QK_K;
    __m256i u[18];
    scales(t, o, u);
    __m256i isum = _mm256_setzero_si256();
    for (int s = 0; s < 8; s += 2) {  // chunks s and s + 1 hold sub-blocks s and s + 1
      __m256i lo = _mm256_setzero_si256(), hi = _mm256_setzero_si256();
      for (int h = 0; h < 2; ++h) {
        pf();
        __m256i z[4];
        rows_8x16(t, o + 16 + 16 * (s + h), z);
        for (int j = 0; j < 4; ++j) {
          const int quad = 4 * h + j;
          lo = _mm256_add_epi16(lo, _mm256_maddubs_epi16(low_nibbles(z[j]), _mm256_set1_epi32(load_i32(x + 32 * s + 4 * quad))));
          hi = _mm256_add_epi16(hi,
                                _mm256_maddubs_epi16(high_nibbles(z[j]), _mm256_set1_epi32(load_i32(x + 32 * (s + 1) + 4 * quad))));
        }
      }
      isum = _mm256_add_epi32(isum, _mm256_madd_epi16(lo, u[s]));
      isum = _mm256_add_epi32(isum, _mm256_madd_epi16(hi, u[s + 1]));
    }
    finish(u, a, b, 0, isum, f);
  }
};

}  // namespace

void gemm_q4_0(const WeightMatrix& w, const ActQ8_0& a, int64_t r0, int64_t r1, float* y) {
  gemm_row_lanes<Lanes8, Q4_0Kind>(w, a, r0, r1, y);
}

void gemm_q4_k(const WeightMatrix& w, const ActQ8_K& a, int64_t r0, int64_t r1, float* y) {
  gemm_row_lanes<Lanes8, Q4_KKind>(w, a, r0, r1, y);
}

}  // namespace flashspec::cpu::avx2

#endif
