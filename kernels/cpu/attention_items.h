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
using I8 = int32_t __attribute__((vector_size(32)));

inline F8 load8(const float* p) {
  F8 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store8(float* p, F8 v) { std::memcpy(p, &v, sizeof v); }

// e^z for z <= 0 in each of eight lanes, within 3 ulp of the exact value (checked at
// every float in [-87, 0]; libm's expf was a call per value): z = k ln2 + r with
// |r| <= ln2 / 2, e^r by its Taylor polynomial to r^6, times 2^k built in the exponent
// bits. Below -87 it returns e^-87 (the clamp keeps 2^k a normal float; callers zero
// those scores, which are below 1e-37 of the largest).
inline F8 exp_nonpositive8(F8 z) {
  z = z < -87.0f ? F8{} - 87.0f : z;
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const F8 k = (z * 1.44269504f + kRound) - kRound;
  const F8 r = (z - k * 0.693145752f) - k * 1.42860677e-6f;  // ln 2 in two parts
  F8 p = F8{} + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const I8 bits = (__builtin_convertvector(k, I8) + 127) << 23;
  F8 scale;
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

// Rows [0, n) of a block of keys (n x hd floats) into block_t (hd x kBlock), eight by
// eight in registers where hd allows: one element at a time it took as long as the
// products it feeds. Rows n up to the next multiple of 8 read stale block entries; their
// columns are never used.
template <int64_t kBlock>
void transpose_block(const float* block, int64_t n, int64_t hd, float* block_t) {
  if (hd % 8 != 0) {
    for (int64_t j = 0; j < n; ++j)
      for (int64_t d = 0; d < hd; ++d) block_t[d * kBlock + j] = block[j * hd + d];
    return;
  }
  for (int64_t j = 0; j < n; j += 8)
    for (int64_t d = 0; d < hd; d += 8) {
      F8 r[8];
      for (int i = 0; i < 8; ++i) r[i] = load8(block + (j + i) * hd + d);
      transpose8x8(r);
      for (int i = 0; i < 8; ++i) store8(block_t + (d + i) * kBlock + j, r[i]);
    }
}

// Eight outputs of one query vector (a "lane") and what adds into them: the probabilities
// of a block's keys, those keys' values at the lane's dims (rows hd apart), and how many of
// the keys the vector sees.
struct ValueLane {
  float* out;
  const float* p;
  const float* values;
  int64_t stop;
};

// out += p[j] * values[j] for each lane's keys in order: axpy's operations, NL lanes side
// by side in registers. One lane alone is a chain of dependent adds, a key per add's
// latency (at 128-wide heads that was a third of the attention's time).
template <int NL>
void add_values(const ValueLane* lane, int64_t hd) {
  F8 o[NL];
  int64_t common = lane[0].stop;
  for (int i = 0; i < NL; ++i) {
    o[i] = load8(lane[i].out);
    common = std::min(common, lane[i].stop);
  }
  int64_t j = 0;
  for (; j < common; ++j)
#pragma GCC unroll 8
    for (int i = 0; i < NL; ++i) o[i] += lane[i].p[j] * load8(lane[i].values + j * hd);
  for (int i = 0; i < NL; ++i) {
    for (int64_t k = j; k < lane[i].stop; ++k) o[i] += lane[i].p[k] * load8(lane[i].values + k * hd);
    store8(lane[i].out, o[i]);
  }
}

// add_values for 64 consecutive outputs of one vector (eight lanes sharing the
// probabilities and the value rows): fewer pointers, so all stay in registers.
inline void add_values_wide(float* out, const float* p, const float* values, int64_t stop, int64_t hd) {
  F8 o[8];
  for (int i = 0; i < 8; ++i) o[i] = load8(out + 8 * i);
  for (int64_t j = 0; j < stop; ++j) {
    const float pj = p[j];
    const float* row = values + j * hd;
#pragma GCC unroll 8
    for (int i = 0; i < 8; ++i) o[i] += pj * load8(row + 8 * i);
  }
  for (int i = 0; i < 8; ++i) store8(out + 8 * i, o[i]);
}

void attend_items(const AttentionArgs& a, const TreeKeys& tree, std::atomic<int64_t>& next, int64_t items,
                  AttendScratch& scratch) {
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
  constexpr int64_t kBlock = 64;        // keys converted at a time
  auto round_if = [](bool f16, float x) { return f16 ? round_to_fp16(x) : x; };
  const bool round_q = a.k_type == KvType::F16, round_p = a.v_type == KvType::F16;
  const int64_t group = a.n_heads / a.n_kv_heads;
  const int64_t hd = a.head_dim;
  const int64_t q_stride = a.n_heads * hd;
  const int64_t tile_rows = attention_tile_rows(a);
  const int64_t tiles = (a.T + tile_rows - 1) / tile_rows;
  // One side of the cache (keys or values): its rows and their element type.
  struct Side {
    const uint8_t* base;
    KvType type;
    size_t row_bytes;
  };
  const Side keys{static_cast<const uint8_t*>(a.k), a.k_type, kv_bytes(a.k_type, a.n_kv_heads * hd)};
  const Side values{static_cast<const uint8_t*>(a.v), a.v_type, kv_bytes(a.v_type, a.n_kv_heads * hd)};
  // Cache rows [j0, j0 + n) of KV head g of one side as n x hd floats. Row addresses are
  // walked, not computed per row (a paged cache's block lookup divides), and the type is
  // switched on once per run.
  auto load_rows = [hd, &a](const Side& side, int64_t g, int64_t j0, int64_t n, float* dst) {
    int64_t j = j0;
    while (j < j0 + n) {
      // The run of rows that lie one after another: the rest of j's block, or all of them.
      int64_t at = j, run = j0 + n - j;
      if (a.blocks) {
        at = int64_t(a.blocks[j / a.block_rows]) * a.block_rows + j % a.block_rows;
        run = std::min(run, a.block_rows - j % a.block_rows);
      }
      const uint8_t* row = side.base + size_t(at) * side.row_bytes;
      float* out = dst + (j - j0) * hd;
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
      j += run;
    }
  };
  auto dot = [hd](const float* q, const float* k) {
    float s = 0.0f;
    for (int64_t d = 0; d < hd; ++d) s += q[d] * k[d];
    return s;
  };
  auto axpy = [hd](float p, const float* v, float* acc) {
    for (int64_t d = 0; d < hd; ++d) acc[d] += p * v[d];
  };

  // Items are taken one at a time (the tiles of a causal batch differ in cost); the
  // scratch is this thread's for all of them, and for the job's other calls.
  auto& [block, block_t, qr, score, acc, tree_k, tree_v, dense_end, score_at, loaded] = scratch;
  block.resize(size_t(kBlock * hd));
  block_t.resize(block.size());
  for (int64_t item; (item = next.fetch_add(1, std::memory_order_relaxed)) < items;) {
    const int64_t g = item / tiles, t0 = (item % tiles) * tile_rows;
    const int64_t rows = std::min(tile_rows, a.T - t0), nv = rows * group;
    // Query vector v = (row t0 + v / group, head g * group + v % group).
    auto row_of = [&](int64_t v) { return t0 + v / group; };
    qr.resize(size_t(nv * hd));
    acc.assign(size_t(nv * hd), 0.0f);
    for (int64_t v = 0; v < nv; ++v) {
      const float* q = a.q + row_of(v) * q_stride + (g * group + v % group) * hd;
      int64_t d = 0;
      if (round_q)
        for (; d + 8 <= hd; d += 8) store8(qr.data() + v * hd + d, round8_to_fp16(load8(q + d)));
      for (; d < hd; ++d) qr[size_t(v * hd + d)] = round_if(round_q, q[d]);
    }
    // Which keys each vector sees: a dense run [0, dense_end) (the committed prefix; for a
    // causal batch also the masked rows up to the query), then for a tree its listed
    // ancestors among the masked rows.
    dense_end.resize(size_t(nv));
    score_at.assign(size_t(nv) + 1, 0);
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t t = t0 + r;
      int64_t end = a.n_past;
      if (!a.mask) end += a.n_masked - a.T + t + 1;
      for (int64_t h = 0; h < group; ++h) dense_end[size_t(r * group + h)] = end;
    }
    for (int64_t v = 0; v < nv; ++v)
      score_at[size_t(v + 1)] = score_at[size_t(v)] + dense_end[size_t(v)] + tree.count(row_of(v));
    score.resize(size_t(score_at[size_t(nv)]));
    const int64_t dense_max = *std::max_element(dense_end.begin(), dense_end.end());

    // Scores: the dense run block by block, then the tree ancestors. A block's keys are
    // transposed (hd x kBlock) so that one query's scores against them are independent
    // sums side by side, which the compiler vectorizes across keys: each key still gets
    // its products added in head-dim order, the arithmetic of dot().
    for (int64_t j0 = 0; j0 < dense_max; j0 += kBlock) {
      const int64_t n = std::min(kBlock, dense_max - j0);
      load_rows(keys, g, j0, n, block.data());
      transpose_block<kBlock>(block.data(), n, hd, block_t.data());
      for (int64_t v = 0; v < nv; ++v) {
        const int64_t stop = std::min(n, dense_end[size_t(v)] - j0);
        float* sv = score.data() + score_at[size_t(v)] + j0;
        const float* q = qr.data() + v * hd;
        // Thirty-two keys at a time, their sums held in four vectors over the head dims
        // (keys past `stop` are computed from stale block entries and not stored). Written
        // as vectors, not left to the compiler: GCC 12 made this loop 3.5x slower at -O3
        // than at -O2 for 128-wide heads, and 2x faster for 8-wide ones.
        for (int64_t j1 = 0; j1 < stop; j1 += 32) {
          F8 s[4] = {};
          for (int64_t d = 0; d < hd; ++d) {
            const F8 qd = F8{} + q[d];
            const float* kd = block_t.data() + d * kBlock + j1;
            for (int i = 0; i < 4; ++i) s[i] += qd * load8(kd + 8 * i);
          }
          float s32[32];
          for (int i = 0; i < 4; ++i) store8(s32 + 8 * i, s[i] * a.scale);
          std::copy_n(s32, std::min<int64_t>(32, stop - j1), sv + j1);
        }
      }
    }
    if (a.mask) {  // each masked row the tile needs, converted once
      tree_k.resize(size_t(a.n_masked * hd));
      tree_v.resize(size_t(a.n_masked * hd));
      loaded.assign(size_t(a.n_masked), 0);
      for (int64_t r = 0; r < rows; ++r)
        for (int32_t m : tree.of(t0 + r))
          if (!loaded[size_t(m)]) {
            load_rows(keys, g, a.n_past + m, 1, tree_k.data() + m * hd);
            load_rows(values, g, a.n_past + m, 1, tree_v.data() + m * hd);
            loaded[size_t(m)] = 1;
          }
      for (int64_t v = 0; v < nv; ++v) {
        float* sv = score.data() + score_at[size_t(v)] + dense_end[size_t(v)];
        for (int32_t m : tree.of(row_of(v)))
          *sv++ = dot(qr.data() + v * hd, tree_k.data() + m * hd) * a.scale;
      }
    }
    for (int64_t v = 0; v < nv; ++v) {
      float* sv = score.data() + score_at[size_t(v)];
      const int64_t n = score_at[size_t(v + 1)] - score_at[size_t(v)];
      // The largest score, over eight running maxima (max is exact in any order).
      F8 top = F8{} - INFINITY;
      int64_t j = 0;
      for (; j + 8 <= n; j += 8) {
        const F8 x = load8(sv + j);
        top = x > top ? x : top;
      }
      float mx = -INFINITY;
      for (; j < n; ++j) mx = sv[j] > mx ? sv[j] : mx;
      for (int l = 0; l < 8; ++l) mx = top[l] > mx ? top[l] : mx;
      // (A score below -87 from the top, or a fully masked row's -inf, weighs 0.) The last
      // few scores one at a time, through the same vector code.
      for (j = 0; j + 8 <= n; j += 8) {
        const F8 z = load8(sv + j) - mx;
        store8(sv + j, z >= -87.0f ? exp_nonpositive8(z) : F8{});
      }
      for (; j < n; ++j) {
        const float z = sv[j] - mx;
        sv[j] = z >= -87.0f ? exp_nonpositive8(F8{} + z)[0] : 0.0f;
      }
      // Sixteen partial sums (key j into sum j % 16), added in a fixed order: the same for a
      // row whatever its batch, and independent adds a compiler vectorizes.
      double part[16] = {};
      j = 0;
      for (; j + 16 <= n; j += 16)
        for (int l = 0; l < 16; ++l) part[l] += sv[j + l];
      for (int l = 0; j < n; ++j, ++l) part[l] += sv[j];
      double sum = 0.0;
      for (double x : part) sum += x;
      const float inv = sum > 0.0 ? float(1.0 / sum) : 0.0f;  // a fully masked row attends to nothing
      j = 0;
      if (round_p)
        for (; j + 8 <= n; j += 8) store8(sv + j, round8_to_fp16(load8(sv + j) * inv));
      for (; j < n; ++j) sv[j] = round_if(round_p, sv[j] * inv);
    }
    // Values, in the same key order.
    for (int64_t j0 = 0; j0 < dense_max; j0 += kBlock) {
      const int64_t n = std::min(kBlock, dense_max - j0);
      load_rows(values, g, j0, n, block.data());
      if (hd % 8 == 0) {
        // Lanes of 8 outputs (a vector's dims d0..d0+7), up to eight side by side: 64 dims
        // of one vector where a vector has them, else the lanes of several vectors.
        const int64_t per_v = hd / 8, lanes = nv * per_v;
        for (int64_t l0 = 0; l0 < lanes;) {
          if (per_v - l0 % per_v >= 8) {  // 64 dims of one vector: one probability per key
            const int64_t v = l0 / per_v, d0 = l0 % per_v * 8;
            add_values_wide(acc.data() + v * hd + d0, score.data() + score_at[size_t(v)] + j0,
                            block.data() + d0, std::min(n, dense_end[size_t(v)] - j0), hd);
            l0 += 8;
            continue;
          }
          // Lanes to group: all that are left, or (at 64 dims and more) the rest of this vector.
          const int64_t left = per_v < 8 ? lanes - l0 : per_v - l0 % per_v;
          const int nl = left >= 8 ? 8 : left >= 4 ? 4 : left >= 2 ? 2 : 1;
          ValueLane lane[8];
          for (int i = 0; i < nl; ++i) {
            const int64_t v = (l0 + i) / per_v, d0 = (l0 + i) % per_v * 8;
            lane[i] = {acc.data() + v * hd + d0, score.data() + score_at[size_t(v)] + j0, block.data() + d0,
                       std::min(n, dense_end[size_t(v)] - j0)};
          }
          switch (nl) {
            case 8: add_values<8>(lane, hd); break;
            case 4: add_values<4>(lane, hd); break;
            case 2: add_values<2>(lane, hd); break;
            default: add_values<1>(lane, hd); break;
          }
          l0 += nl;
        }
      } else {
        for (int64_t v = 0; v < nv; ++v) {
          const int64_t stop = std::min(n, dense_end[size_t(v)] - j0);
          const float* pv = score.data() + score_at[size_t(v)] + j0;
          for (int64_t j = 0; j < stop; ++j) axpy(pv[j], block.data() + j * hd, acc.data() + v * hd);
        }
      }
    }
    if (a.mask)
      for (int64_t v = 0; v < nv; ++v) {
        const float* pv = score.data() + score_at[size_t(v)] + dense_end[size_t(v)];
        for (int32_t m : tree.of(row_of(v))) axpy(*pv++, tree_v.data() + m * hd, acc.data() + v * hd);
      }
    for (int64_t v = 0; v < nv; ++v)
      std::copy_n(acc.data() + v * hd, hd, a.out + row_of(v) * q_stride + (g * group + v % group) * hd);
  }
}

}  // namespace
}  // namespace flashspec::cpu
