#pragma once
// The work items of CPU attention, included by one file per ISA (attention_scalar.cpp,
// attention_avx2.cpp, attention_avx512.cpp) so the compiler vectorizes them for that ISA;
// attention.cpp dispatches. Everything here has internal linkage: each file keeps its
// own copy, built with its own flags.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#if defined(__F16C__)
#include <immintrin.h>
#endif

#include "core/half.h"
#include "kernels/backend.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/matmul.h"

namespace flashspec::cpu {
namespace {

// Eight floats / int32 as one vector (GCC vector extensions): each including file gets
// them in its ISA's registers (two SSE registers in the scalar build), where the compiler
// left some of the loops below scalar on its own. Element by element they perform the same
// operations as the scalar code they replace, so results do not change.
// (GCC warns that passing them by value in the scalar build differs from AVX code's
// calling convention; nothing here is called across files, so it does not matter.)
#pragma GCC diagnostic ignored "-Wpsabi"
using F8 = float __attribute__((vector_size(32)));
// Sixteen floats: one AVX-512 register, two elsewhere. The loops over scores (a score per
// key and query vector) use them: half the instructions where the ISA has the width.
using F8x2 = float __attribute__((vector_size(64)));
using I8x2 = int32_t __attribute__((vector_size(64)));
using D8 = double __attribute__((vector_size(64)));

inline F8 load8(const float* p) {
  F8 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store8(float* p, F8 v) { std::memcpy(p, &v, sizeof v); }
inline F8x2 load16(const float* p) {
  F8x2 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store16(float* p, F8x2 v) { std::memcpy(p, &v, sizeof v); }
// The first n (<= 16) lanes of v to p, and from p with the others `fill`: a row's last
// few keys through the same vector code as the rest.
inline void store_upto(float* p, F8x2 v, int64_t n) {
  if (n == 16) return store16(p, v);
  for (int64_t l = 0; l < n; ++l) p[l] = v[l];
}
inline F8x2 load_upto(const float* p, int64_t n, float fill) {
  if (n == 16) return load16(p);
  F8x2 v = F8x2{} + fill;
  for (int64_t l = 0; l < n; ++l) v[l] = p[l];
  return v;
}
inline F8 low8(F8x2 v) { return __builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7); }
inline F8 high8(F8x2 v) { return __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15); }

// e^z for z <= 0 in each lane, within 3 ulp of the exact value (checked at
// every float in [-87, 0]; libm's expf was a call per value): z = k ln2 + r with
// |r| <= ln2 / 2, e^r by its Taylor polynomial to r^6, times 2^k built in the exponent
// bits. Below -87 it returns e^-87 (the clamp keeps 2^k a normal float; callers zero
// those scores, which are below 1e-37 of the largest).
inline F8x2 exp_nonpositive(F8x2 z) {
  z = z < -87.0f ? F8x2{} - 87.0f : z;
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const F8x2 k = (z * 1.44269504f + kRound) - kRound;
  const F8x2 r = (z - k * 0.693145752f) - k * 1.42860677e-6f;  // ln 2 in two parts
  F8x2 p = F8x2{} + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const I8x2 bits = (__builtin_convertvector(k, I8x2) + 127) << 23;
  F8x2 scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

// round_to_fp16 on eight values: F16C's conversion where the build has it (the same
// round-to-nearest-even for every value attention rounds, all below 65504 in magnitude).
inline F8 round8_to_fp16(F8 x) {
#if defined(__F16C__)
  return F8(_mm256_cvtph_ps(_mm256_cvtps_ph(__m256(x), _MM_FROUND_TO_NEAREST_INT)));
#else
  for (int i = 0; i < 8; ++i) x[i] = round_to_fp16(x[i]);
  return x;
#endif
}
inline F8x2 round16_to_fp16(F8x2 x) {
  const F8 lo = round8_to_fp16(low8(x)), hi = round8_to_fp16(high8(x));
  return __builtin_shufflevector(lo, hi, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
}

// Eight vectors of eight floats transposed in registers: r[i][k] becomes r[k][i].
inline void transpose8x8(F8 r[8]) {
  F8 t[8], u[8];
  for (int i = 0; i < 8; i += 2) {
    t[i] = __builtin_shufflevector(r[i], r[i + 1], 0, 8, 1, 9, 4, 12, 5, 13);
    t[i + 1] = __builtin_shufflevector(r[i], r[i + 1], 2, 10, 3, 11, 6, 14, 7, 15);
  }
  for (int i = 0; i < 8; i += 4)
    for (int h = 0; h < 2; ++h) {
      u[i + 2 * h] = __builtin_shufflevector(t[i + h], t[i + h + 2], 0, 1, 8, 9, 4, 5, 12, 13);
      u[i + 2 * h + 1] = __builtin_shufflevector(t[i + h], t[i + h + 2], 2, 3, 10, 11, 6, 7, 14, 15);
    }
  for (int c = 0; c < 4; ++c) {
    r[c] = __builtin_shufflevector(u[c], u[c + 4], 0, 1, 2, 3, 8, 9, 10, 11);
    r[c + 4] = __builtin_shufflevector(u[c], u[c + 4], 4, 5, 6, 7, 12, 13, 14, 15);
  }
}

// A block's keys or values of one KV head, eight dims of key j at a time as floats: rows
// converted to f32 into scratch (n x hd), or, for an f16 cache, the cache's own rows,
// converted as they are used (where the build has F16C). Copying them to scratch first
// cost as much as the products at 8-wide heads.
struct BlockRows {
  const float* block;
  int64_t hd;
  F8 load(int64_t j, int64_t d) const { return load8(block + j * hd + d); }
};
#if defined(__F16C__)
struct HalfRows {
  const uint16_t* const* row;  // key j's head, kBlock of them
  F8 load(int64_t j, int64_t d) const {
    return F8(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row[j] + d))));
  }
};
#endif

// Rows [0, n) of a block of keys into block_t (hd x kBlock), eight by eight in registers
// (hd a multiple of 8): one element at a time it took as long as the products it feeds.
// Rows n up to the next multiple of 8 repeat row n - 1; their columns are never used.
template <int64_t kBlock, class Rows>
void transpose_block(const Rows& rows, int64_t n, int64_t hd, float* block_t) {
  for (int64_t j = 0; j < n; j += 8)
    for (int64_t d = 0; d < hd; d += 8) {
      F8 r[8];
      for (int i = 0; i < 8; ++i) r[i] = rows.load(std::min(j + i, n - 1), d);
      transpose8x8(r);
      for (int i = 0; i < 8; ++i) store8(block_t + (d + i) * kBlock + j, r[i]);
    }
}

// Eight outputs of one query vector (a "lane") and what adds into them: the first of the
// lane's dims in the value rows, the block's keys [start, stop) that the vector sees and
// their probabilities (p[0] is key start's).
struct ValueLane {
  float* out;
  const float* p;
  int64_t d0;
  int64_t start, stop;
};

// out += p[j] * values[j] for each lane's keys in order: axpy's operations, NL lanes side
// by side in registers. One lane alone is a chain of dependent adds, a key per add's
// latency (at 128-wide heads, a large share of the attention's time).
// Keys before the lanes' common run (a window starts them at different keys) and after it
// go lane by lane, so each lane still adds its keys in order.
template <int NL, class Rows>
void add_values(const ValueLane* lane, const Rows& values) {
  F8 o[NL];
  int64_t first = lane[0].start, common = lane[0].stop;
  for (int i = 0; i < NL; ++i) {
    o[i] = load8(lane[i].out);
    first = std::max(first, lane[i].start);
    common = std::min(common, lane[i].stop);
  }
  for (int i = 0; i < NL; ++i)
    for (int64_t k = lane[i].start; k < std::min(first, lane[i].stop); ++k)
      o[i] += lane[i].p[k - lane[i].start] * values.load(k, lane[i].d0);
  int64_t j = first;
  for (; j < common; ++j)
#pragma GCC unroll 8
    for (int i = 0; i < NL; ++i) o[i] += lane[i].p[j - lane[i].start] * values.load(j, lane[i].d0);
  for (int i = 0; i < NL; ++i) {
    for (int64_t k = std::max(j, lane[i].start); k < lane[i].stop; ++k)
      o[i] += lane[i].p[k - lane[i].start] * values.load(k, lane[i].d0);
    store8(lane[i].out, o[i]);
  }
}

// add_values for 64 consecutive outputs of one vector (eight lanes sharing the
// probabilities and the value rows): fewer pointers, so all stay in registers.
template <class Rows>
void add_values_wide(float* out, const float* p, const Rows& values, int64_t d0, int64_t start, int64_t stop) {
  F8 o[8];
  for (int i = 0; i < 8; ++i) o[i] = load8(out + 8 * i);
  for (int64_t j = start; j < stop; ++j) {
    const float pj = p[j - start];
#pragma GCC unroll 8
    for (int i = 0; i < 8; ++i) o[i] += pj * values.load(j, d0 + 8 * i);
  }
  for (int i = 0; i < 8; ++i) store8(out + 8 * i, o[i]);
}

// attend_items and its pieces, in the order a work item runs them.
//
// Work items: one KV head and a tile of query rows (every query head of the group).
// Keys a whole tile sees -- the committed prefix, and for a causal batch the rows up to
// each query -- are converted to f32 block by block, once for every query of the tile.
// A token tree's queries see only their ancestors among the masked rows: those are
// listed per query and converted once per tile, so a tree of thousands of nodes costs
// its ancestors, not nodes squared.
//
// Per query vector the arithmetic is fixed whatever the tile, batch or tree (a row's
// result is bit-identical alone or in a batch): dot products in head-dim order, keys in
// cache order. Keys and values may have different types (-ctk/-ctv), each side decoded
// by its own. Rounding follows llama.cpp's CPU attention, where each product is a matmul
// against the cache side in that side's vec_dot type: the query is rounded to fp16 when
// the *keys* are fp16 (Q.K), the probabilities when the *values* are fp16 (P.V), so
// greedy outputs agree with it token for token even at near-ties. An f32 or q8_0 side
// rounds nothing (q8_0 rows are decoded to f32; llama.cpp would quantize the other
// operand to q8_0 instead).
constexpr int64_t kBlock = 64;  // keys converted at a time

inline float round_if(bool f16, float x) { return f16 ? round_to_fp16(x) : x; }

// One side of the cache (keys or values): its rows and their element type.
struct Side {
  const uint8_t* base;
  KvType type;
  size_t row_bytes;
};

// fn(row, i, run) for the runs of cache rows [j0, j0 + n) of one side that lie one after
// another (the rest of a paged cache's block or of a ring, or all of them): `row` holds
// position j0 + i. Row addresses are walked, not computed per row (a lookup divides).
template <class Fn>
void for_each_run(const AttentionArgs& a, const Side& side, int64_t j0, int64_t n, Fn fn) {
  for (int64_t j = j0; j < j0 + n;) {
    int64_t at = j, run = j0 + n - j;
    if (a.blocks) {
      at = int64_t(a.blocks[j / a.block_rows]) * a.block_rows + j % a.block_rows;
      run = std::min(run, a.block_rows - j % a.block_rows);
    } else if (a.ring_rows > 0) {
      at = j % a.ring_rows;
      run = std::min(run, a.ring_rows - at);
    }
    fn(side.base + size_t(at) * side.row_bytes, j - j0, run);
    j += run;
  }
}

// `run` consecutive cache rows of one side from `row`, KV head g, as run x hd floats.
inline void convert_run(const Side& side, const uint8_t* row, int64_t g, int64_t hd, int64_t run, float* out) {
  switch (side.type) {
    case KvType::F16:
      for (int64_t r = 0; r < run; ++r, row += side.row_bytes, out += hd) {
        const uint16_t* half = reinterpret_cast<const uint16_t*>(row) + g * hd;
#if defined(__F16C__)
        if (hd % 8 == 0) {  // inline: a call per head row costs more than its 8 conversions
          for (int64_t d = 0; d < hd; d += 8)
            _mm256_storeu_ps(out + d, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(half + d))));
          continue;
        }
#endif
        dequantize_row(GgmlType::F16, half, out, hd);
      }
      break;
    case KvType::F32:
      for (int64_t r = 0; r < run; ++r, row += side.row_bytes, out += hd)
        std::memcpy(out, reinterpret_cast<const float*>(row) + g * hd, size_t(hd) * sizeof(float));
      break;
    case KvType::Q8_0: {  // the 32-value blocks that cover the head (a block may span heads)
      const int64_t b0 = g * hd / 32, b1 = (g * hd + hd + 31) / 32;
      for (int64_t r = 0; r < run; ++r, row += side.row_bytes, out += hd) {
        float tmp[512];
        for (int64_t b = b0; b < b1; b += 16) {
          const int64_t nb = std::min<int64_t>(16, b1 - b);
          dequantize_row(GgmlType::Q8_0, row + b * 34, tmp, nb * 32);
          const int64_t lo = std::max(g * hd, b * 32), hi = std::min(g * hd + hd, (b + nb) * 32);
          std::memcpy(out + (lo - g * hd), tmp + (lo - b * 32), size_t(hi - lo) * sizeof(float));
        }
      }
      break;
    }
  }
}

// Cache rows [j0, j0 + n) of KV head g of one side as n x hd floats, the type switched
// on once per run.
inline void load_rows(const AttentionArgs& a, const Side& side, int64_t g, int64_t j0, int64_t n, float* dst) {
  const int64_t hd = a.head_dim;
  for_each_run(a, side, j0, n, [&](const uint8_t* row, int64_t i, int64_t run) {
    convert_run(side, row, g, hd, run, dst + i * hd);
  });
}

// fn(rows) with the rows [j0, j0 + n) of KV head g of one side (n <= kBlock, hd a
// multiple of 8): the cache's own where it is f16, else converted into `dst`.
template <class Fn>
void with_rows(const AttentionArgs& a, const Side& side, int64_t g, int64_t j0, int64_t n, float* dst, Fn fn) {
  const int64_t hd = a.head_dim;
#if defined(__F16C__)
  if (side.type == KvType::F16) {
    const uint16_t* half_rows[kBlock];
    for_each_run(a, side, j0, n, [&](const uint8_t* row, int64_t i, int64_t run) {
      for (int64_t r = 0; r < run; ++r, row += side.row_bytes)
        half_rows[i + r] = reinterpret_cast<const uint16_t*>(row) + g * hd;
    });
    fn(HalfRows{half_rows});
    return;
  }
#endif
  load_rows(a, side, g, j0, n, dst);
  fn(BlockRows{dst, hd});
}

inline float dot(const float* q, const float* k, int64_t hd) {
  float s = 0.0f;
  for (int64_t d = 0; d < hd; ++d) s += q[d] * k[d];
  return s;
}
inline void axpy(float p, const float* v, float* acc, int64_t hd) {
  for (int64_t d = 0; d < hd; ++d) acc[d] += p * v[d];
}

// One work item: KV head g and the query rows [t0, t0 + rows), every query head of the
// group: nv query vectors, vector v = (row t0 + v / group, head g * group + v % group).
struct Tile {
  const AttentionArgs& a;
  const TreeKeys& tree;
  Side keys, values;
  int64_t group, hd, q_stride;
  int64_t g, t0, rows, nv;
  int64_t row_of(int64_t v) const { return t0 + v / group; }
  // Where vector v's head starts in q and out.
  int64_t head_at(int64_t v) const { return row_of(v) * q_stride + (g * group + v % group) * hd; }
};

// The tile's query vectors into qr (rounded to fp16 where the keys are f16), acc zeroed.
inline void load_queries(const Tile& t, AttendScratch& s) {
  const int64_t hd = t.hd, nv = t.nv;
  const bool round_q = t.a.k_type == KvType::F16;
  s.qr.resize(size_t(nv * hd));
  s.acc.assign(size_t(nv * hd), 0.0f);
  for (int64_t v = 0; v < nv; ++v) {
    const float* q = t.a.q + t.head_at(v);
    int64_t d = 0;
    if (round_q)
      for (; d + 8 <= hd; d += 8) store8(s.qr.data() + v * hd + d, round8_to_fp16(load8(q + d)));
    for (; d < hd; ++d) s.qr[size_t(v * hd + d)] = round_if(round_q, q[d]);
  }
}

// The blocks of keys that the tile's dense runs cover: from `first` (a multiple of
// kBlock, the block of the first key any vector sees) up to `end`.
struct DenseSpan {
  int64_t first, end;
};

// Which keys each vector sees (TreeKeys): a dense run [dense_begin, dense_end), then for
// a tree its listed masked rows. Its scores are score[score_at[v]...], the dense run's
// first.
inline DenseSpan plan_scores(const Tile& t, AttendScratch& s) {
  const int64_t nv = t.nv;
  s.dense_begin.resize(size_t(nv));
  s.dense_end.resize(size_t(nv));
  s.score_at.assign(size_t(nv) + 1, 0);
  for (int64_t v = 0; v < nv; ++v) {
    s.dense_begin[size_t(v)] = t.tree.dense_begin(t.row_of(v));
    s.dense_end[size_t(v)] = t.tree.dense_end(t.row_of(v));
    s.score_at[size_t(v + 1)] =
        s.score_at[size_t(v)] + s.dense_end[size_t(v)] - s.dense_begin[size_t(v)] + t.tree.count(t.row_of(v));
  }
  s.score.resize(size_t(s.score_at[size_t(nv)]));
  const int64_t end = *std::max_element(s.dense_end.begin(), s.dense_end.end());
  const int64_t first = *std::min_element(s.dense_begin.begin(), s.dense_begin.end()) / kBlock * kBlock;
  return {first, end};
}

// Keys [j0, j0 + n) of the tile's KV head into block_t, transposed (hd x kBlock).
inline void transpose_keys(const Tile& t, AttendScratch& s, int64_t j0, int64_t n) {
  const int64_t hd = t.hd;
  if (hd % 8 == 0) {
    with_rows(t.a, t.keys, t.g, j0, n, s.block.data(),
              [&](const auto& rows) { transpose_block<kBlock>(rows, n, hd, s.block_t.data()); });
    return;
  }
  load_rows(t.a, t.keys, t.g, j0, n, s.block.data());
  for (int64_t j = 0; j < n; ++j)
    for (int64_t d = 0; d < hd; ++d) s.block_t[size_t(d * kBlock + j)] = s.block[size_t(j * hd + d)];
}

// Query q's scores against a transposed block's keys [lo, stop), times `scale`, into sv
// (sv[0] is key lo's). Thirty-two keys at a time, their sums held in two vectors over the
// head dims (keys past `stop` are computed from stale block entries and not stored).
// Written as vectors, not left to the compiler: GCC 12 made this loop much slower at -O3
// than at -O2 for 128-wide heads, and faster for 8-wide ones. (Copying the sums out
// through a buffer of 32 was a `rep movs`, a visible share of the time at 8-wide heads.)
inline void block_scores(const float* q, const float* block_t, int64_t hd, int64_t lo, int64_t stop, float scale,
                         float* sv) {
  for (int64_t j1 = lo / 32 * 32; j1 < stop; j1 += 32) {
    F8x2 s[2] = {};
    for (int64_t d = 0; d < hd; ++d) {
      const F8x2 qd = F8x2{} + q[d];
      const float* kd = block_t + d * kBlock + j1;
      for (int i = 0; i < 2; ++i) s[i] += qd * load16(kd + 16 * i);
    }
    const int64_t m = std::min<int64_t>(32, stop - j1);
    if (j1 < lo) {  // a window's first keys of the vector: only those from lo on
      for (int64_t l = lo - j1; l < m; ++l) sv[j1 + l - lo] = s[l / 16][l % 16] * scale;
      continue;
    }
    for (int i = 0; i < 2 && 16 * i < m; ++i) {  // whole vectors stored here: faster at 8-wide heads
      if (16 * i + 16 <= m) store16(sv + (j1 - lo) + 16 * i, s[i] * scale);
      else store_upto(sv + (j1 - lo) + 16 * i, s[i] * scale, m - 16 * i);
    }
  }
}

// Scores of the dense runs, block by block. A block's keys are transposed (hd x kBlock)
// so that one query's scores against them are independent sums side by side, which
// vectorize across keys: each key still gets its products added in head-dim order, the
// arithmetic of dot().
inline void dense_scores(const Tile& t, AttendScratch& s, DenseSpan span) {
  for (int64_t j0 = span.first; j0 < span.end; j0 += kBlock) {
    const int64_t n = std::min(kBlock, span.end - j0);
    transpose_keys(t, s, j0, n);
    for (int64_t v = 0; v < t.nv; ++v) {
      // The block's keys [lo, stop) this vector sees; sv[j - lo] is key j0 + j's score.
      const int64_t lo = std::max<int64_t>(0, s.dense_begin[size_t(v)] - j0);
      const int64_t stop = std::min(n, s.dense_end[size_t(v)] - j0);
      if (lo >= stop) continue;
      float* sv = s.score.data() + s.score_at[size_t(v)] + (j0 + lo - s.dense_begin[size_t(v)]);
      block_scores(s.qr.data() + v * t.hd, s.block_t.data(), t.hd, lo, stop, t.a.scale, sv);
    }
  }
}

// Each masked row the tile's rows see, keys and values, converted once.
inline void load_tree_rows(const Tile& t, AttendScratch& s) {
  const int64_t hd = t.hd;
  s.tree_k.resize(size_t(t.a.n_masked * hd));
  s.tree_v.resize(size_t(t.a.n_masked * hd));
  s.loaded.assign(size_t(t.a.n_masked), 0);
  for (int64_t r = 0; r < t.rows; ++r)
    for (int32_t m : t.tree.of(t.t0 + r))
      if (!s.loaded[size_t(m)]) {
        load_rows(t.a, t.keys, t.g, t.a.n_past + m, 1, s.tree_k.data() + m * hd);
        load_rows(t.a, t.values, t.g, t.a.n_past + m, 1, s.tree_v.data() + m * hd);
        s.loaded[size_t(m)] = 1;
      }
}

// Each vector's scores against its listed masked rows, after its dense run's.
inline void tree_scores(const Tile& t, AttendScratch& s) {
  for (int64_t v = 0; v < t.nv; ++v) {
    float* sv = s.score.data() + s.score_at[size_t(v)] + s.dense_end[size_t(v)] - s.dense_begin[size_t(v)];
    for (int32_t m : t.tree.of(t.row_of(v))) *sv++ = dot(s.qr.data() + v * t.hd, s.tree_k.data() + m * t.hd, t.hd) * t.a.scale;
  }
}

// The largest of the n scores at sv and the sink, over sixteen running maxima (max is
// exact in any order).
inline float max_score(const float* sv, int64_t n, float sink) {
  F8x2 top = F8x2{} - INFINITY;
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    const F8x2 x = load16(sv + j);
    top = x > top ? x : top;
  }
  float mx = sink;
  for (; j < n; ++j) mx = sv[j] > mx ? sv[j] : mx;
  for (int l = 0; l < 16; ++l) mx = top[l] > mx ? top[l] : mx;
  return mx;
}

// The n scores at sv replaced by the weights e^(s - mx) (a score below -87 from the top,
// or a fully masked row's -inf, weighs 0); returns their sum over sixteen partial sums
// (key j into sum j % 16) added in a fixed order: the same for a row whatever its batch.
// The last few keys go through the same vector code, the lanes past them -inf (weight 0,
// which adds nothing to a sum).
inline double exp_scores(float* sv, int64_t n, float mx) {
  D8 part_lo = {}, part_hi = {};  // the sums of keys j % 16 < 8, and of the others
  for (int64_t j = 0; j < n; j += 16) {
    const int64_t m = std::min<int64_t>(16, n - j);
    const F8x2 z = load_upto(sv + j, m, -INFINITY) - mx;
    const F8x2 e = z >= -87.0f ? exp_nonpositive(z) : F8x2{};
    store_upto(sv + j, e, m);
    part_lo += __builtin_convertvector(low8(e), D8);
    part_hi += __builtin_convertvector(high8(e), D8);
  }
  double sum = 0.0;
  for (int l = 0; l < 8; ++l) sum += part_lo[l];
  for (int l = 0; l < 8; ++l) sum += part_hi[l];
  return sum;
}

// The softmax of one vector's n scores at sv, in place, rounded to fp16 if round_p. A
// sink joins the max and the sum as one more score (with no value); -inf: none.
inline void softmax_vector(float* sv, int64_t n, float sink, bool round_p) {
  const float mx = max_score(sv, n, sink);
  double sum = exp_scores(sv, n, mx);
  if (sink - mx >= -87.0f) sum += double(exp_nonpositive(F8x2{} + (sink - mx))[0]);
  const float inv = sum > 0.0 ? float(1.0 / sum) : 0.0f;  // a fully masked row attends to nothing
  for (int64_t j = 0; j < n; j += 16) {
    const int64_t m = std::min<int64_t>(16, n - j);
    const F8x2 x = load_upto(sv + j, m, 0.0f) * inv;
    store_upto(sv + j, round_p ? round16_to_fp16(x) : x, m);
  }
}

// Every vector's scores to probabilities (rounded to fp16 where the values are f16).
inline void softmax_scores(const Tile& t, AttendScratch& s) {
  const bool round_p = t.a.v_type == KvType::F16;
  for (int64_t v = 0; v < t.nv; ++v) {
    float* sv = s.score.data() + s.score_at[size_t(v)];
    const int64_t n = s.score_at[size_t(v + 1)] - s.score_at[size_t(v)];
    const float sink = t.a.sinks ? t.a.sinks[t.g * t.group + v % t.group] : -INFINITY;
    softmax_vector(sv, n, sink, round_p);
  }
}

// A vector's lane over a block of n keys at j0: the keys [start, stop) of the block it
// sees, p at key start's probability.
struct LaneKeys {
  const float* p;
  int64_t start, stop;
};
inline LaneKeys lane_keys(const AttendScratch& s, int64_t v, int64_t j0, int64_t n) {
  const int64_t start = std::max<int64_t>(0, s.dense_begin[size_t(v)] - j0);
  const int64_t stop = std::max(start, std::min(n, s.dense_end[size_t(v)] - j0));
  const float* p = s.score.data() + s.score_at[size_t(v)] + (start < stop ? j0 + start - s.dense_begin[size_t(v)] : 0);
  return {p, start, stop};
}

// The values of a block of n keys at j0 (hd a multiple of 8) added into acc. Lanes of 8
// outputs (a vector's dims d0..d0+7), up to eight side by side: 64 dims of one vector
// where a vector has them, else the lanes of several vectors.
template <class Rows>
void block_values(const Tile& t, AttendScratch& s, const Rows& rows, int64_t j0, int64_t n) {
  const int64_t hd = t.hd, per_v = hd / 8, lanes = t.nv * per_v;
  for (int64_t l0 = 0; l0 < lanes;) {
    if (per_v - l0 % per_v >= 8) {  // 64 dims of one vector: one probability per key
      const int64_t v = l0 / per_v, d0 = l0 % per_v * 8;
      const auto [p, start, stop] = lane_keys(s, v, j0, n);
      add_values_wide(s.acc.data() + v * hd + d0, p, rows, d0, start, stop);
      l0 += 8;
      continue;
    }
    // Lanes to group: all that are left, or (at 64 dims and more) the rest of this vector.
    const int64_t left = per_v < 8 ? lanes - l0 : per_v - l0 % per_v;
    const int nl = left >= 8 ? 8 : left >= 4 ? 4 : left >= 2 ? 2 : 1;
    ValueLane lane[8];
    for (int i = 0; i < nl; ++i) {
      const int64_t v = (l0 + i) / per_v, d0 = (l0 + i) % per_v * 8;
      const auto [p, start, stop] = lane_keys(s, v, j0, n);
      lane[i] = {s.acc.data() + v * hd + d0, p, d0, start, stop};
    }
    switch (nl) {
      case 8: add_values<8>(lane, rows); break;
      case 4: add_values<4>(lane, rows); break;
      case 2: add_values<2>(lane, rows); break;
      default: add_values<1>(lane, rows); break;
    }
    l0 += nl;
  }
}

// The dense runs' values into acc, block by block in the scores' key order.
inline void dense_values(const Tile& t, AttendScratch& s, DenseSpan span) {
  const int64_t hd = t.hd;
  for (int64_t j0 = span.first; j0 < span.end; j0 += kBlock) {
    const int64_t n = std::min(kBlock, span.end - j0);
    if (hd % 8 == 0) {
      with_rows(t.a, t.values, t.g, j0, n, s.block.data(),
                [&](const auto& rows) { block_values(t, s, rows, j0, n); });
      continue;
    }
    load_rows(t.a, t.values, t.g, j0, n, s.block.data());
    for (int64_t v = 0; v < t.nv; ++v) {
      const auto [pv, start, stop] = lane_keys(s, v, j0, n);
      for (int64_t j = start; j < stop; ++j) axpy(pv[j - start], s.block.data() + j * hd, s.acc.data() + v * hd, hd);
    }
  }
}

// Each vector's listed masked rows' values into acc, after its dense run's.
inline void tree_values(const Tile& t, AttendScratch& s) {
  for (int64_t v = 0; v < t.nv; ++v) {
    const float* pv = s.score.data() + s.score_at[size_t(v)] + s.dense_end[size_t(v)] - s.dense_begin[size_t(v)];
    for (int32_t m : t.tree.of(t.row_of(v))) axpy(*pv++, s.tree_v.data() + m * t.hd, s.acc.data() + v * t.hd, t.hd);
  }
}

void attend_items(const AttentionArgs& a, const TreeKeys& tree, std::atomic<int64_t>& next, int64_t items,
                  AttendScratch& scratch) {
  const int64_t group = a.n_heads / a.n_kv_heads, hd = a.head_dim;
  const int64_t tile_rows = attention_tile_rows(a);
  const int64_t tiles = (a.T + tile_rows - 1) / tile_rows;
  const Side keys{static_cast<const uint8_t*>(a.k), a.k_type, kv_bytes(a.k_type, a.n_kv_heads * hd)};
  const Side values{static_cast<const uint8_t*>(a.v), a.v_type, kv_bytes(a.v_type, a.n_kv_heads * hd)};
  // Items are taken one at a time (the tiles of a causal batch differ in cost); the
  // scratch is this thread's for all of them, and for the job's other calls.
  scratch.block.resize(size_t(kBlock * hd));
  scratch.block_t.resize(scratch.block.size());
  for (int64_t item; (item = next.fetch_add(1, std::memory_order_relaxed)) < items;) {
    const int64_t g = item / tiles, t0 = (item % tiles) * tile_rows;
    const int64_t rows = std::min(tile_rows, a.T - t0);
    const Tile t{a, tree, keys, values, group, hd, a.n_heads * hd, g, t0, rows, rows * group};
    load_queries(t, scratch);
    const DenseSpan span = plan_scores(t, scratch);
    dense_scores(t, scratch, span);  // scores: the dense runs, then the tree's rows
    if (a.mask) {
      load_tree_rows(t, scratch);
      tree_scores(t, scratch);
    }
    softmax_scores(t, scratch);
    dense_values(t, scratch, span);  // values, in the same key order
    if (a.mask) tree_values(t, scratch);
    for (int64_t v = 0; v < t.nv; ++v) std::copy_n(scratch.acc.data() + v * hd, hd, a.out + t.head_at(v));
  }
}

}  // namespace
}  // namespace flashspec::cpu
