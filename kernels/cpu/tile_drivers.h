#pragma once
// Loop nests shared by the SIMD kernel files: they decide which tile kernel runs on which
// rows and tokens, the tile kernels do the arithmetic. (The row-lane kernels, one weight
// row per register lane, have theirs in row_lane_driver.h.) Include only from *_avx2.cpp /
// *_avx512.cpp. Everything here has internal linkage on purpose: each ISA's file gets its
// own copy compiled for its ISA, and the linker must never swap an AVX-512 copy in for the
// AVX2 one.
#include <cstdint>
#include <type_traits>

#include "kernels/cpu/matmul_internal.h"

namespace flashspec::cpu {
namespace {

// Rows are processed in panels of about this many weight bytes: a panel stays in L2 while
// every token tile sweeps over it, and a tile's activations stay in L1 while it sweeps
// over the panel's rows, so L2 traffic is the weights (the smaller operand per tile step)
// rather than the activations. Only the first sweep over a panel streams from memory;
// tile kernels get `prefetch` true for it.
constexpr int64_t kPanelBytes = 160 << 10;

// The tile shape of a Q8_0-activation kernel: a single token runs tiles of decode_rows
// rows; several tokens, tiles of tile_rows rows by up to max_pairs token pairs.
struct PairTileShape {
  int decode_rows, tile_rows, max_pairs;
};

// The AVX2 kernels' (matmul_avx2.cpp, blocks32_avx2.cpp): single token 4 rows; several
// tokens 1 row by up to 4 token pairs (4 and 5 measured alike on Zen 3, 3 slower).
constexpr PairTileShape kAvx2PairTiles{4, 1, 4};

// Q8_0-activation types (Q4_0, Q5_0, Q5_1, Q8_0, IQ4_NL, MXFP4 weights). Tiles names the weight
// block and the tile kernels (as static constexpr pointers to free functions: GCC inlines a
// function defined inside a class by other rules, which changed the kernels' code):
//  Block: the weight block;
//  decode(w_first_row, nb, nrows, act, y, r): single token, rows r .. r + nrows - 1, nrows
//    = decode_rows but for a last partial tile;
//  pairs<np, prefetch>(w_first_row, act, nb, first_pair, y, rows, r, all_rows): several
//    tokens, tile_rows rows by np = 1..max_pairs token pairs; a partial last tile runs row
//    by row with all_rows = false.
template <PairTileShape kShape, class Tiles>
void drive_q8_0(const WeightMatrix& w, const ActQ8_0& a, int64_t r0, int64_t r1, float* y) {
  using Block = typename Tiles::Block;
  constexpr int kDecodeRows = kShape.decode_rows, kTileRows = kShape.tile_rows, kMaxPairs = kShape.max_pairs;
  static_assert(kMaxPairs >= 1 && kMaxPairs <= 4);
  const int64_t nb = w.cols / 32;
  const auto* base = static_cast<const Block*>(w.data);
  if (a.pair_qs == nullptr) {
    for (int64_t r = r0; r < r1; r += kDecodeRows)
      Tiles::decode(base + r * nb, nb, r1 - r < kDecodeRows ? int(r1 - r) : kDecodeRows, a, y, r);
    return;
  }
  const int64_t pairs = (a.T + 1) / 2;
  int64_t panel = kPanelBytes / (nb * int64_t(sizeof(Block))) / kTileRows * kTileRows;
  if (panel < kTileRows) panel = kTileRows;
  for (int64_t q0 = r0; q0 < r1; q0 += panel) {
    const int64_t q1 = q0 + panel < r1 ? q0 + panel : r1;
    auto sweep = [&](int64_t p, auto np, auto prefetch) {
      const auto kernel = Tiles::template pairs<decltype(np)::value, decltype(prefetch)::value>;
      for (int64_t r = q0; r < q1; r += kTileRows) {
        if (r + kTileRows <= q1) {
          kernel(base + r * nb, a, nb, p, y, w.rows, r, true);
        } else {
          for (int64_t i = r; i < q1; ++i) kernel(base + i * nb, a, nb, p, y, w.rows, i, false);
        }
      }
    };
    for (int64_t p = 0; p < pairs;) {
      const int64_t np = pairs - p < kMaxPairs ? pairs - p : kMaxPairs;
      auto go = [&](auto prefetch) {
        if constexpr (kMaxPairs >= 4)
          if (np == 4) return sweep(p, std::integral_constant<int, 4>{}, prefetch);
        if constexpr (kMaxPairs >= 3)
          if (np == 3) return sweep(p, std::integral_constant<int, 3>{}, prefetch);
        if constexpr (kMaxPairs >= 2)
          if (np == 2) return sweep(p, std::integral_constant<int, 2>{}, prefetch);
        sweep(p, std::integral_constant<int, 1>{}, prefetch);
      };
      if (p == 0)
        go(std::true_type{});
      else
        go(std::false_type{});
      p += np;
    }
  }
}

// Q8_K-activation types (Q2_K .. Q6_K weights). Tile names (as Tiles above) Block and
// tile<nt, prefetch>(w_row, act, nb, t0, y, rows, r), which computes one row for tokens
// t0 .. t0 + nt - 1, nt = 1..4.
template <class Tile>
void drive_q8_k(const WeightMatrix& w, const ActQ8_K& a, int64_t r0, int64_t r1, float* y) {
  using Block = typename Tile::Block;
  const int64_t nb = w.cols / QK_K;
  const auto* base = static_cast<const Block*>(w.data);
  const int64_t T = a.T;
  int64_t panel = kPanelBytes / (nb * int64_t(sizeof(Block)));
  if (panel < 1) panel = 1;
  for (int64_t q0 = r0; q0 < r1; q0 += panel) {
    const int64_t q1 = q0 + panel < r1 ? q0 + panel : r1;
    auto sweep = [&](auto nt, auto prefetch, int64_t t) {
      const auto kernel = Tile::template tile<decltype(nt)::value, decltype(prefetch)::value>;
      for (int64_t r = q0; r < q1; ++r) kernel(base + r * nb, a, nb, t, y, w.rows, r);
    };
    for (int64_t t = 0; t < T;) {
      const int64_t nt = T - t < 4 ? T - t : 4;
      auto go = [&](auto prefetch) {
        switch (nt) {
          case 4: return sweep(std::integral_constant<int, 4>{}, prefetch, t);
          case 3: return sweep(std::integral_constant<int, 3>{}, prefetch, t);
          case 2: return sweep(std::integral_constant<int, 2>{}, prefetch, t);
          default: return sweep(std::integral_constant<int, 1>{}, prefetch, t);
        }
      };
      if (t == 0)
        go(std::true_type{});
      else
        go(std::false_type{});
      t += nt;
    }
  }
}

}  // namespace
}  // namespace flashspec::cpu
