// Q4_0 times many tokens on AMX tiles (Sapphire Rapids and later, where the kernel grants
// tile data): one TDPBSSD multiplies 16 tokens by 16 rows over a block of 32 weights, 8192
// int8 products, where the VNNI kernel issues 128 vpdpbusd for the same. Weights come
// packed (WeightLayout::Lanes16, resident) or as rows (streamed layers, transposed 16 rows
// at a time as the VNNI row kernel does). Passes of 16 tokens and more only, their last
// 8-15 tokens on a tile padded with zeros: decode, smaller passes and a last 1-7 tokens
// keep the VNNI kernels, since a tile costs the same however few tokens it holds.
//
// Each block's int32 sums are exact, as the VNNI kernel's are (its unsigned nibbles and the
// zero point's term give the same integer), and they go through its float operations in
// the same order -- f = fma(float(sum), d_w * d_x, f), block after block -- so a token's
// outputs are bit-identical whichever kernel computed them, alone or in a batch.
#include "kernels/cpu/matmul_internal.h"

#if defined(__x86_64__)

#include <immintrin.h>

#include <cstring>
#include <vector>

#include "core/ggml_type.h"
#include "kernels/cpu/simd_avx512.h"

namespace flashspec::cpu {

namespace {

constexpr int kRows = 16;       // weight rows per tile (the packed layout's)
constexpr int kTokens = 16;     // tokens per tile of activations
constexpr int64_t kPanel = 32;  // blocks whose weight tiles are unpacked at a time (16 KB)

// Tiles 0-1 hold activations (16 tokens x 32 bytes), 2-3 weights in the VNNI order AMX
// wants (8 rows of 4 weights x 16 rows), 4-7 the int32 sums (16 tokens x 16 rows): two
// pairs of blocks in flight, so that one pair's sums are read while the next multiplies.
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// Tile configuration is per thread: set on entry, released on exit (a thread that holds
// tile state saves 8 KB more on every context switch).
class TilesInUse {
 public:
  TilesInUse() {
    TileConfig c;
    for (int t : {0, 1}) c.colsb[t] = 32, c.rows[t] = kTokens;
    for (int t : {2, 3}) c.colsb[t] = 64, c.rows[t] = 8;
    for (int t : {4, 5, 6, 7}) c.colsb[t] = 64, c.rows[t] = kTokens;
    _tile_loadconfig(&c);
  }
  ~TilesInUse() { _tile_release(); }
  TilesInUse(const TilesInUse&) = delete;
  TilesInUse& operator=(const TilesInUse&) = delete;
};

// A block of 16 rows as an AMX weight tile: row k of 64 bytes holds weights 4k..4k+3 of
// each of the 16 rows, signed (nibble - 8). z[j] holds bytes 4j..4j+3 of every row's
// nibbles (the packed layout's registers): low nibbles are weights 4j.., high 16 + 4j...
inline void unpack_block(const __m512i (&z)[4], int8_t* out) {
  const __m512i m4 = _mm512_set1_epi8(0x0f), eight = _mm512_set1_epi8(8);
  for (int j = 0; j < 4; ++j) {
    _mm512_store_si512(out + 64 * j, _mm512_sub_epi8(_mm512_and_si512(z[j], m4), eight));
    _mm512_store_si512(out + 64 * (4 + j), _mm512_sub_epi8(_mm512_and_si512(_mm512_srli_epi16(z[j], 4), m4), eight));
  }
}

// Where a tile of 16 rows comes from: fill(b, out, slot) writes block b's weight tile
// (and what scale() needs into slot); scale(b, slot) gives its 16 row scales as floats.
struct PackedSource {  // WeightLayout::Lanes16: the tile's quants, then its scales
  const uint8_t* quants;
  const uint8_t* scales;
  void fill(int64_t b, int8_t* out, float*) const {
    __m512i z[4];
    for (int j = 0; j < 4; ++j) z[j] = _mm512_loadu_si512(quants + b * 256 + 64 * j);
    unpack_block(z, out);
  }
  __m512 scale(int64_t b, const float*) const {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(scales + b * 32)));
  }
};
struct RowSource {  // WeightLayout::Rows: 16 rows (past the matrix, the last one again)
  const uint8_t* row[kRows];
  void fill(int64_t b, int8_t* out, float* slot) const {
    const int64_t o = b * int64_t(sizeof(BlockQ4_0));
    __m512i z[4];
    simd::rows_16x16(row, o + 2, z);
    unpack_block(z, out);
    _mm512_store_ps(slot, simd::row_halves(row, o));  // gathered once per panel
  }
  __m512 scale(int64_t, const float* slot) const { return _mm512_load_ps(slot); }
};

// f[i] += sums of token i (16 rows) times d_w * d_x, for the 16 tokens of a tile.
inline void add_block(const int32_t* sums, __m512 dw, const float* dx, __m512 (&f)[kTokens]) {
  for (int i = 0; i < kTokens; ++i)
    f[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(sums + kRows * i)),
                           _mm512_mul_ps(dw, _mm512_set1_ps(dx[i])), f[i]);
}

// Blocks [0, n) of a panel times one tile of 16 tokens (x: their activations, row stride
// cols; d + b * T: their 16 scales of block b), added to f. Pairs of blocks alternate between
// two pairs of sum tiles: a pair is multiplied, then the pair before it is read out and
// scaled, so the float work waits for no multiply. Blocks still go into f in order.
template <class Source>
inline void tile_tokens(const Source& src, const int8_t (*panel)[8 * 64], const float (*slots)[kRows], int64_t n,
                        const int8_t* x, int64_t cols, int64_t c0, const float* d, int64_t T, __m512 (&f)[kTokens]) {
  alignas(64) int32_t sums[2][kTokens * kRows];
  auto dw = [&](int64_t b) { return src.scale(b, slots[b - c0]); };
  auto dx = [&](int64_t b) { return d + b * T; };
  // Multiplies blocks k, k + 1 into sum tiles S0, S1 / reads them out and scales them.
  // Macros: GCC's tile intrinsics paste the tile number into the assembly text, so it must
  // be a literal.
#define FS_MULTIPLY_PAIR(S0, S1, k)                 \
  do {                                             \
    _tile_zero(S0);                                \
    _tile_zero(S1);                                \
    _tile_loadd(0, x + (c0 + (k)) * 32, cols);     \
    _tile_loadd(2, panel[k], 64);                  \
    _tile_dpbssd(S0, 0, 2);                        \
    _tile_loadd(1, x + (c0 + (k) + 1) * 32, cols); \
    _tile_loadd(3, panel[(k) + 1], 64);            \
    _tile_dpbssd(S1, 1, 3);                        \
  } while (0)
#define FS_ADD_PAIR(S0, S1, k)                                 \
  do {                                                        \
    _tile_stored(S0, sums[0], 64);                            \
    _tile_stored(S1, sums[1], 64);                            \
    add_block(sums[0], dw(c0 + (k)), dx(c0 + (k)), f);         \
    add_block(sums[1], dw(c0 + (k) + 1), dx(c0 + (k) + 1), f); \
  } while (0)
  const int64_t pairs = n / 2;
  for (int64_t p = 0; p < pairs; ++p) {
    if (p % 2 == 0) {
      FS_MULTIPLY_PAIR(4, 5, 2 * p);
      if (p > 0) FS_ADD_PAIR(6, 7, 2 * p - 2);
    } else {
      FS_MULTIPLY_PAIR(6, 7, 2 * p);
      FS_ADD_PAIR(4, 5, 2 * p - 2);
    }
  }
  if (pairs % 2 == 1) FS_ADD_PAIR(4, 5, 2 * pairs - 2);
  else if (pairs > 0) FS_ADD_PAIR(6, 7, 2 * pairs - 2);
#undef FS_MULTIPLY_PAIR
#undef FS_ADD_PAIR
  if (n % 2 == 1) {
    const int64_t k = n - 1;
    _tile_zero(4);
    _tile_loadd(0, x + (c0 + k) * 32, cols);
    _tile_loadd(2, panel[k], 64);
    _tile_dpbssd(4, 0, 2);
    _tile_stored(4, sums[0], 64);
    add_block(sums[0], dw(c0 + k), dx(c0 + k), f);
  }
}

// Tokens [first, first + count) of a block-major array of T tokens per block (the
// activations' scales and zero-point terms), `stride` apart per block, the rest zero.
template <class V>
std::vector<V> gather_tokens(const V* src, int64_t T, int64_t first, int64_t count, int64_t nb, int64_t stride) {
  std::vector<V> out(size_t(nb * stride), V(0));
  for (int64_t b = 0; b < nb; ++b)
    std::memcpy(&out[size_t(b * stride)], src + b * T + first, size_t(count) * sizeof(V));
  return out;
}

// The last tokens of a pass (fewer than 16) as a tile of their own: their activations
// and scales copied into a tile of 16 tokens whose other tokens are zero.
struct TailTile {
  int64_t count;          // tokens of the pass in it
  std::vector<int8_t> qs;  // [16][cols]
  std::vector<float> d;    // [block][16]

  TailTile(const ActQ8_0& a, int64_t first, int64_t nb)
      : count(a.T - first), qs(size_t(kTokens * a.cols), 0), d(gather_tokens(a.d, a.T, first, count, nb, kTokens)) {
    std::memcpy(qs.data(), a.qs + first * a.cols, size_t(count * a.cols));
  }
};

// Rows [r0, r1) for the first `tokens` tokens (a multiple of 16) and, when `tail` is given,
// the tokens after them in it: tiles of 16 rows; per tile, panels of kPanel blocks
// unpacked once and multiplied by every tile of 16 tokens. Either layout keeps a tile's
// rows in one stretch of rs bytes per row (Lanes16 rearranges within it).
template <class Source, class SourceAt>
void gemm_tiles(const WeightMatrix& w, const ActQ8_0& a, int64_t tokens, const TailTile* tail, int64_t r0, int64_t r1,
                float* y, SourceAt source_at) {
  const int64_t nb = w.cols / 32, T = a.T, cols = a.cols, rs = nb * int64_t(sizeof(BlockQ4_0));
  const auto* base = static_cast<const uint8_t*>(w.data);
  TilesInUse tiles;
  // Outputs of every token for the current 16 rows, kept between panels.
  struct alignas(64) Outputs {
    float v[kRows];
  };
  const int64_t tiled = tokens + (tail ? kTokens : 0), stored = tokens + (tail ? tail->count : 0);
  std::vector<Outputs> acc = std::vector<Outputs>(size_t(tiled));
  alignas(64) int8_t panel[kPanel][8 * 64];
  alignas(64) float slots[kPanel][kRows];
  for (int64_t r = r0; r < r1; r += kRows) {
    const Source src = source_at(r);
    // The next tile's stretch is prefetched as this one's blocks are unpacked, a block's
    // share at a time: streamed weights come from DRAM, not from any cache.
    const int64_t next_end = r1 < r + 2 * kRows ? r1 : r + 2 * kRows;
    const uint8_t* pf = base + (r + kRows) * rs;
    const uint8_t* const pf_end = base + next_end * rs;
    const int64_t pf_share = (next_end - r - kRows) * rs / nb + 1;
    for (int64_t c0 = 0; c0 < nb; c0 += kPanel) {
      const int64_t n = nb - c0 < kPanel ? nb - c0 : kPanel;
      for (int64_t k = 0; k < n; ++k) {
        src.fill(c0 + k, panel[k], slots[k]);
        for (const uint8_t* stop = pf + pf_share; pf < stop && pf < pf_end; pf += 64)
          _mm_prefetch(reinterpret_cast<const char*>(pf), _MM_HINT_T0);
      }
      for (int64_t t0 = 0; t0 < tiled; t0 += kTokens) {
        const bool last = t0 == tokens;  // the tail's tile
        __m512 f[kTokens];
        for (int i = 0; i < kTokens; ++i) f[i] = c0 > 0 ? _mm512_load_ps(acc[size_t(t0 + i)].v) : _mm512_setzero_ps();
        if (last) tile_tokens(src, panel, slots, n, tail->qs.data(), cols, c0, tail->d.data(), kTokens, f);
        else tile_tokens(src, panel, slots, n, a.qs + t0 * cols, cols, c0, a.d + t0, T, f);
        for (int i = 0; i < kTokens; ++i) _mm512_store_ps(acc[size_t(t0 + i)].v, f[i]);
      }
    }
    const __mmask16 keep = r1 - r < kRows ? __mmask16((1u << (r1 - r)) - 1) : __mmask16(0xffff);
    for (int64_t t = 0; t < stored; ++t)
      _mm512_mask_storeu_ps(y + t * w.rows + r, keep, _mm512_load_ps(acc[size_t(t)].v));
  }
}

// Q4_0 packed (Lanes16) / as rows times the first `tokens` tokens, a multiple of 16, and
// those of `tail`.
void gemm_q4_0_lanes16_amx(const WeightMatrix& w, const ActQ8_0& a, int64_t tokens, const TailTile* tail, int64_t r0,
                           int64_t r1, float* y) {
  const int64_t nb = w.cols / 32, rs = nb * int64_t(sizeof(BlockQ4_0));
  const auto* base = static_cast<const uint8_t*>(w.data);
  gemm_tiles<PackedSource>(w, a, tokens, tail, r0, r1, y, [&](int64_t r) {
    const uint8_t* quants = base + r * rs;
    return PackedSource{quants, quants + nb * 256};
  });
}

void gemm_q4_0_amx(const WeightMatrix& w, const ActQ8_0& a, int64_t tokens, const TailTile* tail, int64_t r0,
                   int64_t r1, float* y) {
  const int64_t rs = w.cols / 32 * int64_t(sizeof(BlockQ4_0));
  const auto* base = static_cast<const uint8_t*>(w.data);
  gemm_tiles<RowSource>(w, a, tokens, tail, r0, r1, y, [&](int64_t r) {
    RowSource s;
    for (int i = 0; i < kRows; ++i) s.row[i] = base + (r + i < r1 ? r + i : r1 - 1) * rs;
    return s;
  });
}

// Whole tiles of 16 tokens on tiles. The last T % 16 tokens (and passes of fewer than
// 16): from 8 of them on, a tile of their own padded with zeros, while the weights are
// unpacked anyway; fewer, or alone, the VNNI kernel on their activations. Its second read
// of the weights costs about a tile, so from 8 tail tokens on the padded tile is the
// cheaper; and a padded tile alone (no whole tiles to share the unpacking with) costs
// more than the VNNI kernel on 8-15 tokens.
constexpr int64_t kTailTileFrom = 8;
using TilesFn = void (*)(const WeightMatrix&, const ActQ8_0&, int64_t, const TailTile*, int64_t, int64_t, float*);
void split_tokens(const WeightMatrix& w, const ActQ8_0& a, int64_t r0, int64_t r1, float* y, TilesFn tiles,
                  GemmQ8_0Fn vnni) {
  const int64_t full = a.T / kTokens * kTokens, rest = a.T - full, nb = w.cols / 32;
  if (full == 0) return vnni(w, a, r0, r1, y);
  if (rest >= kTailTileFrom) {
    const TailTile tail(a, full, nb);
    return tiles(w, a, full, &tail, r0, r1, y);
  }
  tiles(w, a, full, nullptr, r0, r1, y);
  if (rest == 0) return;
  // The last tokens' activations as a pass of their own: scales and zero-point terms are
  // stored block-major ([block][token]), so theirs are gathered.
  const std::vector<float> d = gather_tokens(a.d, a.T, full, rest, nb, rest);
  const std::vector<int32_t> zp = gather_tokens(a.zp, a.T, full, rest, nb, rest);
  ActQ8_0 last = a;
  last.qs = a.qs + full * a.cols;
  last.d = d.data();
  last.zp = zp.data();
  last.T = rest;
  vnni(w, last, r0, r1, y + full * w.rows);
}
void q4_0_lanes16(const WeightMatrix& w, const ActQ8_0& a, int64_t r0, int64_t r1, float* y) {
  split_tokens(w, a, r0, r1, y, gemm_q4_0_lanes16_amx, avx512vnni_kernels().q4_0_lanes16);
}
void q4_0_rows(const WeightMatrix& w, const ActQ8_0& a, int64_t r0, int64_t r1, float* y) {
  split_tokens(w, a, r0, r1, y, gemm_q4_0_amx, avx512vnni_kernels().q4_0);
}

}  // namespace

// The AVX-512 VNNI table, with Q4_0 passes of many tokens on tiles.
const IsaKernels& amx_kernels() {
  static const IsaKernels k = [] {
    IsaKernels t = avx512vnni_kernels();
    t.name = "amx";
    t.q4_0_lanes16 = q4_0_lanes16;
    t.q4_0 = q4_0_rows;
    return t;
  }();
  return k;
}

}  // namespace flashspec::cpu

#else  // not x86-64: the dispatcher never selects AMX; keep the symbol for the linker.

namespace flashspec::cpu {
const IsaKernels& amx_kernels() { return scalar_kernels(); }
}  // namespace flashspec::cpu

#endif
