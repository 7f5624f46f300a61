// AVX-512 VNNI kernels (vpdpbusd, vpdpwssd) for Q4_0, Q5_0, Q5_1, Q8_0, IQ4_NL, MXFP4, Q4_K
// and Q6_K weights. Their shape differs from the AVX2 / AVX-512 kernels': the 16 int32 lanes of
// a register are 16 weight rows, so
//  - one vpdpbusd multiplies 4 columns of 16 rows by the same 4 columns of one token
//    (broadcast straight from memory) and adds them into 16 exact int32 sums: 64
//    multiply-adds per instruction and no horizontal reduction anywhere;
//  - the floating-point work is per block and token: one conversion, one multiply (16 row
//    scales by the token's scale) and one fma into 16 outputs;
//  - every output is one float accumulator that the blocks are added to in order, the
//    same operations whether the token is multiplied alone or with others: a token's
//    result does not depend on its batch (speculative verification relies on it);
//  - with several tokens, each weight register is multiplied by all of them before the
//    next (block32_tokens, super_tokens): a token's sums are chains of dependent
//    vpdpbusd, and interleaving the tokens' chains keeps the multiplier busy (faster, on a
//    64-row pass, than one token's block after another).
// Weights are stored row after row, so a tile first repacks 16 rows of a stretch of
// blocks into the lane layout (a "panel" of ~20 KB that stays in L1: per block 8 registers
// of 4 columns x 16 rows, the scales as 16 floats), then every token of the call is
// multiplied against the panel. The repack is paid once per call and panel, whatever T;
// with up to 8 tokens there is no panel (each block goes straight from the repack to the
// multiply; Q4_K's single token fuses the two per column chunk), and for T = 1 it is a
// few dozen instructions per 16 rows x 32 weights. With the weights in L2, repack plus
// one token keeps up with about the share of DRAM bandwidth one core gets; but where a
// core can read memory faster than that, decode of Q4_0 is bound by the repack, not by
// memory. So resident Q4_0 matrices are packed into the lane layout once at load, into
// the copy that is made anyway (WeightLayout::Lanes16, Q4_0Lanes16 below; README, "Resident
// weights on the CPU", has the speed-up); streamed ones, read anew every pass, keep the
// repack.
//
// Q2_K, Q3_K, Q5_K, the float types and the activation quantizers use the AVX2 code.
#include "kernels/cpu/matmul_internal.h"

#if defined(__x86_64__) || defined(__i386__)

#include <immintrin.h>

#include <cstddef>
#include <cstring>
#include <type_traits>

#include "kernels/cpu/row_lane_driver.h"
#include "kernels/cpu/simd_avx2.h"
#include "kernels/cpu/simd_avx512.h"

namespace flashspec::cpu {

namespace {

using namespace simd;

constexpr int kRows = 16;    // rows per tile: one per int32 lane

// The 16 rows of a tile: row i starts at row[i] (rows past the matrix repeat the last
// one; their outputs are not stored) and lies idx[i] bytes after row[0], for gathers.
struct TileRows {
  const uint8_t* row[kRows];
  __m512i idx;
};

// The register shape for row_lane_driver.h.
struct Lanes16 {
  // Tokens multiplied per pass over a panel: their 8 int32 sums and 8 float accumulators
  // stay in registers (12 measured slower on a 64-row pass: spills).
  static constexpr int kMaxTok = 8;
  using Reg = __m512i;
  using FReg = __m512;

  static TileRows tile_rows(const uint8_t* base, int64_t rs, int64_t r, int nvalid) {
    TileRows t;
    alignas(64) int32_t off[kRows];
    for (int i = 0; i < kRows; ++i) {
      const int k = i < nvalid ? i : nvalid - 1;
      t.row[i] = base + (r + k) * rs;
      off[i] = int32_t(k * rs);
    }
    t.idx = _mm512_load_si512(off);
    return t;
  }
  static FS_ALWAYS_INLINE __m512 load(const float* p) { return _mm512_load_ps(p); }
  static FS_ALWAYS_INLINE void store(float* p, __m512 f) { _mm512_store_ps(p, f); }
  static FS_ALWAYS_INLINE __m512 zero() { return _mm512_setzero_ps(); }
  static __mmask16 keep(int nvalid) { return __mmask16((1u << nvalid) - 1); }
  static FS_ALWAYS_INLINE void store_rows(float* y, __mmask16 keep, __m512 f) { _mm512_mask_storeu_ps(y, keep, f); }
};

// Bytes [off, off+16) of all 16 rows, transposed: z[j] lane i = dword j of row i's 16.
inline void rows_16x16(const TileRows& t, int64_t off, __m512i (&z)[4]) { simd::rows_16x16(t.row, off, z); }

// The dword at byte `off` of every row.
inline __m512i gather_rows(const TileRows& t, int64_t off) {
  return _mm512_i32gather_epi32(t.idx, t.row[0] + off, 1);
}

// The fp16 at byte `off` of every row, as floats.
inline __m512 row_halves(const TileRows& t, int64_t off) { return simd::row_halves(t.row, off); }

// MXFP4's scales 2^(e - 128) of every row, from the E8M0 exponent at byte `off`: scalar
// loads through a buffer, as row_halves does, then the exponent's bits made float bits
// (e = 0 and 1 are the subnormals 2^-128 and 2^-127).
inline __m512 row_e8m0_scales(const TileRows& t, int64_t off) {
  alignas(16) uint8_t e8[kRows];
  for (int i = 0; i < kRows; ++i) e8[i] = t.row[i][off];
  const __m512i e = _mm512_cvtepu8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(e8)));
  const __m512i normal = _mm512_slli_epi32(_mm512_sub_epi32(e, _mm512_set1_epi32(1)), 23);
  const __m512i tiny = _mm512_sllv_epi32(_mm512_set1_epi32(0x00200000), e);
  const __mmask16 subnormal = _mm512_cmplt_epu32_mask(e, _mm512_set1_epi32(2));
  return _mm512_castsi512_ps(_mm512_mask_blend_epi32(subnormal, normal, tiny));
}

// Low / high fp16 of each dword as floats.
inline __m512 fp16_lo(__m512i v) { return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(v)); }
inline __m512 fp16_hi(__m512i v) { return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(v, 16))); }

// ---- Q8_0-activation types (blocks of 32 weights).
//
// A panel block: w[j] (j = 0..7) holds columns 4j..4j+3 of the 16 rows as unsigned bytes,
// then the 16 row scales (and Q5_1's 16 mins). vpdpbusd multiplies them by the token's
// signed int8; the unsigned weight u = w + zero stands for w, and the activation
// quantizer stores zp = -zero * sum(x) per block (IsaKernels::q8_0_layout), which seeds the
// int32 sum: sum(u x) + zp = sum(w x), exactly.

// Q4_0 / IQ4_NL / MXFP4 (a scale, then 16 bytes of nibbles qs: low = columns 0..15, high =
// 16..31): block b's nibbles of every row, each byte mapped by u(nibble), and the scales:
// the fp16 d of Q4_0 and IQ4_NL, MXFP4's E8M0 exponent.
template <class Block, class Map>
FS_ALWAYS_INLINE inline void nibbles_prep(const TileRows& t, int64_t b, __m512i* out, Map u) {
  const int64_t o = b * int64_t(sizeof(Block));
  __m512i z[4];
  rows_16x16(t, o + int64_t(offsetof(Block, qs)), z);
  const __m512i m4 = _mm512_set1_epi8(0x0f);
  for (int j = 0; j < 4; ++j) {
    out[j] = u(_mm512_and_si512(z[j], m4));                             // columns 4j..
    out[4 + j] = u(_mm512_and_si512(_mm512_srli_epi16(z[j], 4), m4));  // 16 + 4j..
  }
  if constexpr (std::is_same_v<Block, BlockMXFP4>)
    out[8] = _mm512_castps_si512(row_e8m0_scales(t, o + int64_t(offsetof(Block, e))));
  else
    out[8] = _mm512_castps_si512(row_halves(t, o + int64_t(offsetof(Block, d))));
}

struct Q4_0Kind {
  using Block = BlockQ4_0;
  static constexpr int32_t kZero = 8;
  static constexpr bool kMin = false;
  // Nibbles 0..15 as they are: u = q, zero 8.
  static FS_ALWAYS_INLINE void prep(const TileRows& t, int64_t b, __m512i* out) {
    nibbles_prep<Block>(t, b, out, [](__m512i q) FS_ALWAYS_INLINE { return q; });
  }
};

// IQ4_NL / MXFP4 (kGrid: kIQ4NLValues / kMXFP4Values): nibbles looked up in the grid plus
// 128: u = value + 128, zero 128.
template <class B, const int8_t (&kGrid)[16]>
struct GridKind {
  using Block = B;
  static constexpr int32_t kZero = 128;
  static constexpr bool kMin = false;
  static FS_ALWAYS_INLINE void prep(const TileRows& t, int64_t b, __m512i* out) {
    const __m512i table = _mm512_xor_si512(
        _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kGrid))), _mm512_set1_epi8(char(0x80)));
    nibbles_prep<Block>(t, b, out, [&](__m512i q) FS_ALWAYS_INLINE { return _mm512_shuffle_epi8(table, q); });
  }
};
using IQ4_NLKind = GridKind<BlockIQ4_NL, kIQ4NLValues>;
using MXFP4Kind = GridKind<BlockMXFP4, kMXFP4Values>;

struct Q8_0Kind {
  using Block = BlockQ8_0;
  static constexpr int32_t kZero = 128;
  static constexpr bool kMin = false;
  // Signed bytes flipped to u = w + 128, zero 128.
  static FS_ALWAYS_INLINE void prep(const TileRows& t, int64_t b, __m512i* out) {
    const int64_t o = b * int64_t(sizeof(Block));
    const __m512i flip = _mm512_set1_epi8(char(0x80));
    __m512i z[4];
    rows_16x16(t, o + 2, z);
    for (int j = 0; j < 4; ++j) out[j] = _mm512_xor_si512(z[j], flip);
    rows_16x16(t, o + 18, z);
    for (int j = 0; j < 4; ++j) out[4 + j] = _mm512_xor_si512(z[j], flip);
    out[8] = _mm512_castps_si512(row_halves(t, o));
  }
};

// Q5_0 / Q5_1: the nibble plus bit 4 from the qh word (bit c for column c). Columns
// 4j..4j+3 take qh bits 4j..4j+3: nibble j % 2 of qh byte j / 2.
template <class Block>
FS_ALWAYS_INLINE inline void q5_prep(const TileRows& t, int64_t b, int64_t qh_off, int64_t qs_off,
                                     __m512i* out) {
  const int64_t o = b * int64_t(sizeof(Block));
  __m512i z[4];
  rows_16x16(t, o + qs_off, z);
  const __m512i m4 = _mm512_set1_epi8(0x0f);
  const __m512i qh = gather_rows(t, o + qh_off);
  const __m512i bit4 = _mm512_set1_epi8(0x10);
  const __m512i lo_bits = _mm512_set1_epi32(0x08040201), hi_bits = _mm512_set1_epi32(int32_t(0x80402010u));
  for (int e = 0; e < 4; ++e) {
    // qh byte e of each row in all four bytes of its lane.
    const __m512i rep = _mm512_shuffle_epi8(
        qh, _mm512_add_epi8(_mm512_set1_epi8(char(e)),
                            _mm512_broadcast_i32x4(_mm_setr_epi32(0, 0x04040404, 0x08080808, 0x0c0c0c0c))));
    for (int h = 0; h < 2; ++h) {
      const int j = 2 * e + h;  // columns 4j..4j+3
      const __mmask64 k = _mm512_test_epi8_mask(rep, h == 0 ? lo_bits : hi_bits);
      const __m512i nib = j < 4 ? _mm512_and_si512(z[j], m4) : _mm512_and_si512(_mm512_srli_epi16(z[j - 4], 4), m4);
      out[j] = _mm512_mask_add_epi8(nib, k, nib, bit4);
    }
  }
}

struct Q5_0Kind {
  using Block = BlockQ5_0;
  static constexpr int32_t kZero = 16;
  static constexpr bool kMin = false;
  static FS_ALWAYS_INLINE void prep(const TileRows& t, int64_t b, __m512i* out) {
    q5_prep<Block>(t, b, 2, 6, out);
    out[8] = _mm512_castps_si512(row_halves(t, b * int64_t(sizeof(Block))));
  }
};

struct Q5_1Kind {
  using Block = BlockQ5_1;
  // w = d * q + m: u = q, no zero; zp carries sum(x) (zp_mul -1) for the min's term.
  static constexpr int32_t kZero = 0;
  static constexpr bool kMin = true;
  static FS_ALWAYS_INLINE void prep(const TileRows& t, int64_t b, __m512i* out) {
    q5_prep<Block>(t, b, 4, 8, out);
    out[8] = _mm512_castps_si512(row_halves(t, b * int64_t(sizeof(Block))));
    out[9] = _mm512_castps_si512(row_halves(t, b * int64_t(sizeof(Block)) + 2));
  }
};

// One panel block p (block b) times tokens t0 .. t0 + NT - 1, added to f[]: the
// operations every output goes through, whatever the path and NT (see the file comment).
// Column group j of every token comes before group j + 1 of any, so consecutive vpdpbusd
// are independent and the port runs one per cycle instead of waiting out each sum's
// latency (a token's 8 products are a chain).
template <class Kind, int NT>
FS_ALWAYS_INLINE inline void block32_tokens(const __m512i* p, const ActQ8_0& a, int64_t b, int64_t t0,
                                            __m512 (&f)[NT]) {
  const int64_t T = a.T;
  __m512i s[NT];
  for (int i = 0; i < NT; ++i)
    s[i] = Kind::kZero != 0 ? _mm512_set1_epi32(a.zp[b * T + t0 + i]) : _mm512_setzero_si512();
  const int8_t* x = a.qs + t0 * a.cols + b * 32;
  for (int j = 0; j < 8; ++j) {
    const __m512i w = _mm512_load_si512(p + j);
    for (int i = 0; i < NT; ++i)
      s[i] = _mm512_dpbusd_epi32(s[i], w, _mm512_set1_epi32(load_i32(x + i * a.cols + 4 * j)));
  }
  const __m512 dw = _mm512_castsi512_ps(p[8]);
  for (int i = 0; i < NT; ++i) {
    const __m512 dx = _mm512_set1_ps(a.d[b * T + t0 + i]);
    f[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[i]), _mm512_mul_ps(dw, dx), f[i]);
    if constexpr (Kind::kMin)
      f[i] = _mm512_fmadd_ps(_mm512_set1_ps(float(a.zp[b * T + t0 + i])), _mm512_mul_ps(_mm512_castsi512_ps(p[9]), dx),
                             f[i]);
  }
}

// Adapts a Q8_0-activation kind to row_lane_driver.h.
template <class Kind>
struct Blocks32 : Kind {
  using Act = ActQ8_0;
  static constexpr int64_t kUnits = Kind::kMin ? 10 : 9;  // registers per panel block
  static constexpr int64_t kPanelBlocks = 32;             // 18-20 KB, inside L1
  static constexpr int kPrefetchSteps = 1;                // after the repack

  template <class Prefetch>
  static FS_ALWAYS_INLINE void prep(const TileRows& t, int64_t b, __m512i* out, Prefetch&& pf) {
    Kind::prep(t, b, out);
    pf();
  }
  template <int NT>
  static FS_ALWAYS_INLINE void tokens(const __m512i* p, const ActQ8_0& a, int64_t b, int64_t t0, __m512 (&f)[NT]) {
    block32_tokens<Kind, NT>(p, a, b, t0, f);
  }
};

// Q4_0 packed at load (WeightLayout::Lanes16, kernels/cpu/pack_weights.h): the registers
// Q4_0Kind::prep builds by transposing 16 rows are loaded as they are, so the same
// operations follow on the same values and a token's result is the row layout's, bit for
// bit. The tile's rows are one stretch: its quants, then its scales.
struct PackedTile {
  const uint8_t* quants;
  const uint8_t* scales;
};

struct PackedLanes16 : Lanes16 {
  static PackedTile tile_rows(const uint8_t* base, int64_t rs, int64_t r, int /*nvalid: whole tiles*/) {
    const uint8_t* tile = base + r * rs;
    return {tile, tile + rs / int64_t(sizeof(BlockQ4_0)) * 256};
  }
};

struct Q4_0Lanes16 : Blocks32<Q4_0Kind> {
  template <class Prefetch>
  static FS_ALWAYS_INLINE void prep(const PackedTile& t, int64_t b, __m512i* out, Prefetch&& pf) {
    const uint8_t* q = t.quants + b * 256;
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    for (int j = 0; j < 4; ++j) {
      const __m512i z = _mm512_loadu_si512(q + 64 * j);
      out[j] = _mm512_and_si512(z, m4);
      out[4 + j] = _mm512_and_si512(_mm512_srli_epi16(z, 4), m4);
    }
    out[8] = _mm512_castps_si512(
        _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(t.scales + b * 32))));
    pf();
  }
};

// Writes Q4_0 rows in the Lanes16 layout (kernels/cpu/pack_weights.h) with the
// transposition Q4_0Kind::prep does. (A scalar packer added noticeably to a large
// model's load.)
void pack_q4_0(const WeightMatrix& w, uint8_t* dst) {
  const int64_t nb = w.cols / QK4_0, rs = nb * int64_t(sizeof(BlockQ4_0));
  const auto* src = static_cast<const uint8_t*>(w.data);
  for (int64_t r = 0; r < w.rows; r += kRows) {
    const TileRows t = Lanes16::tile_rows(src, rs, r, kRows);
    uint8_t* quants = dst + r * rs;
    uint8_t* scales = quants + nb * 256;
    for (int64_t b = 0; b < nb; ++b) {
      const int64_t o = b * int64_t(sizeof(BlockQ4_0));
      __m512i z[4];
      rows_16x16(t, o + 2, z);
      for (int j = 0; j < 4; ++j) _mm512_storeu_si512(quants + b * 256 + 64 * j, z[j]);
      for (int i = 0; i < kRows; ++i) std::memcpy(scales + b * 32 + 2 * i, t.row[i] + o, 2);
    }
  }
}

// ---- Q8_K-activation types (super-blocks of 256 weights).
//
// Sub-block sums are exact int32 vpdpbusd sums of unsigned weight codes and signed
// activations; each is converted and multiplied by its row's d * scale (exact in float:
// an fp16 times a 6- or 8-bit integer) into a per-super-block float sum, which the
// token's scale then multiplies once. (Scaling in integers instead, with vpmulld, was
// measured slower: vpmulld is two uops on the port vpdpbusd needs.) The offsets (Q4_K's
// mins, Q6_K's -32) come from the activations' 16-sums (bsums) with vpdpwssd against
// int16 pairs of scales, once per super-block.

// block32_tokens for a Q8_K kind, with the arithmetic described above: the kinds' tokens().
// The panel block holds kGroups groups of kGroupQuads weight registers, the groups' scales
// from unit 64 on, the offsets' int16 scale pairs at kOffsets and the offset factor at
// kFactor.
template <class Kind, int NT>
FS_ALWAYS_INLINE inline void super_tokens(const __m512i* p, const ActQ8_K& a, int64_t b, int64_t t0,
                                          __m512 (&f)[NT]) {
  constexpr int G = Kind::kGroups, J = Kind::kGroupQuads;
  const int8_t* x = a.qs + t0 * a.cols + b * QK_K;
  __m512 fs[NT];
  for (int i = 0; i < NT; ++i) fs[i] = _mm512_setzero_ps();
  for (int g = 0; g < G; ++g) {
    __m512i dot[NT];
    for (int i = 0; i < NT; ++i) dot[i] = _mm512_setzero_si512();
    for (int j = 0; j < J; ++j) {
      const __m512i w = _mm512_load_si512(p + J * g + j);
      for (int i = 0; i < NT; ++i)
        dot[i] = _mm512_dpbusd_epi32(dot[i], w, _mm512_set1_epi32(load_i32(x + i * a.cols + 4 * J * g + 4 * j)));
    }
    const __m512 sc = _mm512_castsi512_ps(p[64 + g]);
    for (int i = 0; i < NT; ++i) fs[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot[i]), sc, fs[i]);
  }
  const __m512 factor = _mm512_castsi512_ps(p[Kind::kFactor]);
  for (int i = 0; i < NT; ++i) {
    const int16_t* bs = a.bsums + (t0 + i) * (a.cols / 16) + b * 16;
    __m512i off = _mm512_setzero_si512();
    for (int k = 0; k < 8; ++k)
      off = _mm512_dpwssd_epi32(off, p[Kind::kOffsets + k], _mm512_set1_epi32(load_i32(bs + 2 * k)));
    const __m512 dx = _mm512_set1_ps(a.d[b * a.T + t0 + i]);
    f[i] = _mm512_fmadd_ps(fs[i], dx, f[i]);
    f[i] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(off), _mm512_mul_ps(factor, dx), f[i]);
  }
}

// Adapts a Q8_K-activation kind to row_lane_driver.h.
template <class Kind>
struct SuperBlocks {
  using Act = ActQ8_K;
  template <int NT>
  static FS_ALWAYS_INLINE void tokens(const __m512i* p, const Act& a, int64_t b, int64_t t0, __m512 (&f)[NT]) {
    super_tokens<Kind, NT>(p, a, b, t0, f);
  }
};

// Q4_K panel block: w[0..63] (sub-block s, quad j at 8s + j), d * sc[8] as floats, mins
// as int16 pairs (m_s, m_s) [8], then d and dmin as floats.
struct Q4_KKind : SuperBlocks<Q4_KKind> {
  using Block = BlockQ4_K;
  static constexpr int64_t kUnits = 82;
  static constexpr int64_t kPanelBlocks = 4;  // 21 KB
  // Its layout for super_tokens: 8 groups of 8 column quads, offsets at 72, factor at 81.
  static constexpr int kGroups = 8, kGroupQuads = 8, kOffsets = 72, kFactor = 81;
  static constexpr int kPrefetchSteps = 8;  // one per column chunk (see row_lane_driver.h)
  template <class Prefetch>
  static FS_ALWAYS_INLINE void prep(const TileRows& t, int64_t b, __m512i* out, Prefetch&& pf) {
    const int64_t o = b * int64_t(sizeof(Block));
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    for (int c = 0; c < 8; ++c) {
      pf();
      // qs bytes 16c..16c+15: dwords 4c..4c+3 of the 32-byte run of sub-blocks 2(c/2)
      // (low nibbles) and 2(c/2)+1 (high nibbles).
      __m512i z[4];
      rows_16x16(t, o + 16 + 16 * c, z);
      const int s = 2 * (c / 2), j0 = 4 * (c % 2);
      for (int j = 0; j < 4; ++j) {
        out[8 * s + j0 + j] = _mm512_and_si512(z[j], m4);
        out[8 * (s + 1) + j0 + j] = _mm512_and_si512(_mm512_srli_epi16(z[j], 4), m4);
      }
    }
    scales(t, o, out + 64);
  }

  // Units 64..81 of the panel block at byte o of every row: the 6-bit scales and mins as
  // kquant_scales.h unpacks them, 16 rows at once, and d, dmin.
  static FS_ALWAYS_INLINE void scales(const TileRows& t, int64_t o, __m512i* out) {
    const __m512i u0 = gather_rows(t, o + 4), u1 = gather_rows(t, o + 8), u2 = gather_rows(t, o + 12);
    const __m512i m6 = _mm512_set1_epi32(0x3f3f3f3f), lo4 = _mm512_set1_epi32(0x0f0f0f0f),
                  top2 = _mm512_set1_epi32(0x30303030);
    const __m512i sc[2] = {_mm512_and_si512(u0, m6),
                           _mm512_or_si512(_mm512_and_si512(u2, lo4), _mm512_and_si512(_mm512_srli_epi32(u0, 2), top2))};
    const __m512i mn[2] = {_mm512_and_si512(u1, m6),
                           _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(u2, 4), lo4),
                                           _mm512_and_si512(_mm512_srli_epi32(u1, 2), top2))};
    const __m512i lane4 = _mm512_broadcast_i32x4(_mm_setr_epi32(0, 0x04040404, 0x08080808, 0x0c0c0c0c));
    const __m512i dd = gather_rows(t, o);
    const __m512 d = fp16_lo(dd);
    for (int s = 0; s < 8; ++s) {
      const int e = s % 4;
      out[s] = _mm512_castps_si512(_mm512_mul_ps(
          d, _mm512_cvtepi32_ps(_mm512_and_si512(_mm512_srli_epi32(sc[s / 4], 8 * e), _mm512_set1_epi32(0xff)))));
      // (m_s, m_s) as int16: byte e to bytes 0 and 2 of the lane, zeros in 1 and 3.
      const __m512i ctl = _mm512_add_epi8(lane4, _mm512_set1_epi32(int32_t(0x80008000u | (e << 16) | e)));
      out[8 + s] = _mm512_shuffle_epi8(mn[s / 4], ctl);
    }
    out[16] = _mm512_castps_si512(d);
    out[17] = _mm512_castps_si512(fp16_hi(dd));
  }

  // A single token: the repack fused with the multiply per pair of column chunks, nothing
  // stored (Q4_K_M decode measured faster than through a stored block); the same integer sums
  // and floating-point operations as super_tokens<Q4_KKind, 1>, group after group.
  template <class Prefetch>
  static FS_ALWAYS_INLINE void single(const TileRows& t, const ActQ8_K& a, int64_t b, __m512& f, Prefetch&& pf) {
    const int64_t o = b * int64_t(sizeof(Block));
    const int8_t* x = a.qs + b * QK_K;
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    __m512i u[18];
    scales(t, o, u);
    __m512 fs = _mm512_setzero_ps();
    for (int s = 0; s < 8; s += 2) {  // chunks s and s + 1 hold sub-blocks s and s + 1
      __m512i lo = _mm512_setzero_si512(), hi = _mm512_setzero_si512();
      for (int h = 0; h < 2; ++h) {
        pf();
        __m512i z[4];
        rows_16x16(t, o + 16 + 16 * (s + h), z);
        for (int j = 0; j < 4; ++j) {
          const int quad = 4 * h + j;
          lo = _mm512_dpbusd_epi32(lo, _mm512_and_si512(z[j], m4), _mm512_set1_epi32(load_i32(x + 32 * s + 4 * quad)));
          hi = _mm512_dpbusd_epi32(hi, _mm512_and_si512(_mm512_srli_epi16(z[j], 4), m4),
                                   _mm512_set1_epi32(load_i32(x + 32 * (s + 1) + 4 * quad)));
        }
      }
      fs = _mm512_fmadd_ps(_mm512_cvtepi32_ps(lo), _mm512_castsi512_ps(u[s]), fs);
      fs = _mm512_fmadd_ps(_mm512_cvtepi32_ps(hi), _mm512_castsi512_ps(u[s + 1]), fs);
    }
    const int16_t* bs = a.bsums + b * 16;
    __m512i off = _mm512_setzero_si512();
    for (int k = 0; k < 8; ++k) off = _mm512_dpwssd_epi32(off, u[8 + k], _mm512_set1_epi32(load_i32(bs + 2 * k)));
    const __m512 dx = _mm512_set1_ps(a.d[b]);
    f = _mm512_fmadd_ps(fs, dx, f);
    f = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(off), _mm512_mul_ps(_mm512_castsi512_ps(u[17]), dx), f);
  }
};

// Q6_K panel block: w[0..63] (quad q: columns 4q..4q+3, sub-block q / 4) as q + 32 in
// 0..63, d * sc[16] as floats, scale pairs (sc_2k, sc_2k+1) as int16 [8], 32 * d as
// floats.
struct Q6_KKind : SuperBlocks<Q6_KKind> {
  using Block = BlockQ6_K;
  static constexpr int64_t kUnits = 89;
  static constexpr int64_t kPanelBlocks = 4;  // 22 KB
  // Its layout for super_tokens: 16 groups of 4 column quads, offsets at 80, factor at 88.
  static constexpr int kGroups = 16, kGroupQuads = 4, kOffsets = 80, kFactor = 88;
  static constexpr int kPrefetchSteps = 12;  // one per column chunk (see row_lane_driver.h)
  template <class Prefetch>
  static FS_ALWAYS_INLINE void prep(const TileRows& t, int64_t b, __m512i* out, Prefetch&& pf) {
    const int64_t o = b * int64_t(sizeof(Block));
    __m512i zl[32], zh[16];
    for (int c = 0; c < 8; ++c) {
      pf();
      __m512i z[4];
      rows_16x16(t, o + 16 * c, z);
      for (int j = 0; j < 4; ++j) zl[4 * c + j] = z[j];
    }
    for (int c = 0; c < 4; ++c) {
      pf();
      __m512i z[4];
      rows_16x16(t, o + 128 + 16 * c, z);
      for (int j = 0; j < 4; ++j) zh[4 * c + j] = z[j];
    }
    const __m512i m4 = _mm512_set1_epi8(0x0f), m30 = _mm512_set1_epi8(0x30);
    for (int q = 0; q < 64; ++q) {
      // Columns 4q..: half n, run i, position l of the run (see BlockQ6_K).
      const int n = q / 32, i = (q % 32) / 8, l4 = q % 8;
      const __m512i ql = zl[16 * n + 8 * (i % 2) + l4], qh = zh[8 * n + l4];
      const __m512i lo = i < 2 ? _mm512_and_si512(ql, m4) : _mm512_and_si512(_mm512_srli_epi16(ql, 4), m4);
      __m512i hi;
      switch (i) {
        case 0: hi = _mm512_slli_epi16(qh, 4); break;
        case 1: hi = _mm512_slli_epi16(qh, 2); break;
        case 2: hi = qh; break;
        default: hi = _mm512_srli_epi16(qh, 2); break;
      }
      out[q] = _mm512_or_si512(lo, _mm512_and_si512(hi, m30));
    }
    const __m512i lane4 = _mm512_broadcast_i32x4(_mm_setr_epi32(0, 0x04040404, 0x08080808, 0x0c0c0c0c));
    // d is the block's last two bytes: read the dword that ends there.
    const __m512 d = fp16_hi(gather_rows(t, o + 206));
    for (int k = 0; k < 4; ++k) {
      const __m512i sv = gather_rows(t, o + 192 + 4 * k);  // scales 4k..4k+3
      for (int e = 0; e < 4; ++e)
        out[64 + 4 * k + e] = _mm512_castps_si512(
            _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_srai_epi32(_mm512_slli_epi32(sv, 24 - 8 * e), 24))));
      for (int h = 0; h < 2; ++h) {
        // (sc_{4k+2h}, sc_{4k+2h+1}) as int16: each byte to the high byte of its word,
        // then an arithmetic shift.
        const __m512i ctl = _mm512_or_si512(
            _mm512_add_epi8(lane4, _mm512_set1_epi32(((2 * h + 1) << 24) | ((2 * h) << 8))),
            _mm512_set1_epi32(0x00800080));
        out[80 + 2 * k + h] = _mm512_srai_epi16(_mm512_shuffle_epi8(sv, ctl), 8);
      }
    }
    out[88] = _mm512_castps_si512(_mm512_mul_ps(d, _mm512_set1_ps(32.0f)));
  }
};

// Plain rows for every T; zp carries each type's zero point.
Q8_0Layout layout(GgmlType type) {
  switch (type) {
    case GgmlType::Q4_0: return {false, Q4_0Kind::kZero};
    case GgmlType::Q5_0: return {false, Q5_0Kind::kZero};
    case GgmlType::Q5_1: return {false, -1};  // zp = sum(x)
    case GgmlType::Q8_0: return {false, Q8_0Kind::kZero};
    case GgmlType::IQ4_NL: return {false, IQ4_NLKind::kZero};
    case GgmlType::MXFP4: return {false, MXFP4Kind::kZero};
    default: return {false, 8};
  }
}

}  // namespace

// The AVX2 table with the kernels above in place of its ones for these types; their
// activations come in plain rows with each type's zero point.
const IsaKernels& avx512vnni_kernels() {
  static const IsaKernels k = [] {
    IsaKernels t = avx2_kernels();
    t.name = "avx512vnni";
    t.quantize_q8_0_pairs = nullptr;
    t.q8_0_layout = layout;
    t.q4_0 = gemm_row_lanes<Lanes16, Blocks32<Q4_0Kind>>;
    t.q5_0 = gemm_row_lanes<Lanes16, Blocks32<Q5_0Kind>>;
    t.q5_1 = gemm_row_lanes<Lanes16, Blocks32<Q5_1Kind>>;
    t.q8_0 = gemm_row_lanes<Lanes16, Blocks32<Q8_0Kind>>;
    t.iq4_nl = gemm_row_lanes<Lanes16, Blocks32<IQ4_NLKind>>;
    t.mxfp4 = gemm_row_lanes<Lanes16, Blocks32<MXFP4Kind>>;
    t.q4_0_lanes16 = gemm_row_lanes<PackedLanes16, Q4_0Lanes16>;
    t.pack_q4_0_lanes16 = pack_q4_0;
    t.q4_k = gemm_row_lanes<Lanes16, Q4_KKind>;
    t.q6_k = gemm_row_lanes<Lanes16, Q6_KKind>;
    return t;
  }();
  return k;
}

}  // namespace flashspec::cpu

#else  // not x86: the dispatcher never selects AVX-512 VNNI; keep the symbol for the linker.

namespace flashspec::cpu {
const IsaKernels& avx512vnni_kernels() { return scalar_kernels(); }
}  // namespace flashspec::cpu

#endif
