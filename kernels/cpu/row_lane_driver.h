#pragma once
// The tile driver of the row-lane kernels, whose registers hold one weight row per 32-bit
// lane (row_lanes_avx2.cpp: 8 rows; matmul_avx512vnni.cpp: 16): it decides which rows form
// a tile, which blocks are repacked into a panel, which tokens are multiplied against it
// and when the next tile's weights are prefetched. The ISA files supply the arithmetic:
//
// Lanes, one per ISA file (a tile has one row per 32-bit lane of a register):
//   kMaxTok            tokens multiplied per pass over a panel (their sums stay in registers)
//   Reg, FReg          a register of weight bytes / of one float per row
//   tile_rows(base, row_stride, r, nvalid)   the tile's rows (past the matrix: the last one)
//   load(p), store(p, f), zero()             aligned FReg loads and stores
//   keep(nvalid), store_rows(y, keep, f)     stores the tile's valid outputs of one token
// Kind, one per weight type:
//   Block, Act         the weight block and the activations it multiplies (ActQ8_0, ActQ8_K)
//   kUnits             registers per repacked block
//   kPanelBlocks       blocks per panel (the panel stays in L1)
//   kPrefetchSteps     calls to pf() per repacked block
//   prep(rows, b, out, pf)        repacks block b of the tile's rows into out[kUnits]
//   tokens<NT>(p, a, b, t0, f)    adds repacked block p (block b) times tokens t0 .. t0+NT-1
//                                 to f[NT]: the operations every output goes through
//   single(rows, a, b, f, pf)     optional: one token's block with the repack fused into
//                                 the multiply, nothing stored; the operations of tokens<1>
//
// Whatever the path (panel or none, fused or not, NT), a token's output goes through the
// same operations in the same order, so it does not depend on its batch. Include only
// from *_avx2.cpp / *_avx512vnni.cpp: internal linkage on purpose (see tile_drivers.h).
#include <immintrin.h>

#include <cstdint>
#include <memory>
#include <type_traits>

#include "kernels/cpu/matmul_internal.h"
#include "kernels/cpu/simd_avx2.h"

namespace flashspec::cpu {
namespace {

// Weights per block of the activations a kind multiplies.
template <class Act>
constexpr int64_t kActBlock = std::is_same_v<Act, ActQ8_0> ? QK8_0 : QK_K;

// Rows per tile: one per 32-bit lane of a register.
template <class Lanes>
constexpr int kTileRows = int(sizeof(typename Lanes::Reg) / sizeof(int32_t));

// One token's outputs of a tile, kept in memory between panels: a register's worth.
template <class Lanes>
struct alignas(sizeof(typename Lanes::Reg)) TileOutputs {
  float v[kTileRows<Lanes>];
};

// Blocks [b0, b0 + n) of a panel times tokens t0 .. t0 + NT - 1, into acc[t].
template <class Lanes, class Kind, int NT>
void panel_tokens(const typename Lanes::Reg* panel, int64_t n, const typename Kind::Act& a, int64_t b0,
                  int64_t t0, TileOutputs<Lanes>* acc) {
  typename Lanes::FReg f[NT];
  for (int i = 0; i < NT; ++i) f[i] = Lanes::load(acc[t0 + i].v);
  for (int64_t k = 0; k < n; ++k) Kind::template tokens<NT>(panel + k * Kind::kUnits, a, b0 + k, t0, f);
  for (int i = 0; i < NT; ++i) Lanes::store(acc[t0 + i].v, f[i]);
}

// panel_tokens for nt = 1 .. NT tokens.
template <class Lanes, class Kind, int NT>
void tokens_upto(int nt, const typename Lanes::Reg* panel, int64_t n, const typename Kind::Act& a, int64_t b0,
                 int64_t t0, TileOutputs<Lanes>* acc) {
  if constexpr (NT > 1)
    if (nt < NT) return tokens_upto<Lanes, Kind, NT - 1>(nt, panel, n, a, b0, t0, acc);
  panel_tokens<Lanes, Kind, NT>(panel, n, a, b0, t0, acc);
}

// Blocks [b0, b0 + n) of a tile times all NT tokens of the call (NT <= kMaxTok), each block
// straight from the repack to the multiply: no panel to store and reload when one pass
// over the blocks serves every token. The repack calls pf() Kind::kPrefetchSteps times.
template <class Lanes, class Kind, int NT, class Rows, class Prefetch>
void direct_tokens(const Rows& tr, int64_t n, const typename Kind::Act& a, int64_t b0, TileOutputs<Lanes>* acc,
                   Prefetch&& pf) {
  typename Lanes::FReg f[NT];
  for (int i = 0; i < NT; ++i) f[i] = Lanes::load(acc[i].v);
  for (int64_t k = 0; k < n; ++k) {
    if constexpr (NT == 1 && requires { Kind::single(tr, a, b0, f[0], pf); }) {
      Kind::single(tr, a, b0 + k, f[0], pf);
    } else {
      typename Lanes::Reg p[Kind::kUnits];
      Kind::prep(tr, b0 + k, p, pf);
      Kind::template tokens<NT>(p, a, b0 + k, 0, f);
    }
  }
  for (int i = 0; i < NT; ++i) Lanes::store(acc[i].v, f[i]);
}

// direct_tokens for nt = 1 .. NT tokens.
template <class Lanes, class Kind, int NT, class Rows, class Prefetch>
void direct_upto(int nt, const Rows& tr, int64_t n, const typename Kind::Act& a, int64_t b0,
                 TileOutputs<Lanes>* acc, Prefetch&& pf) {
  if constexpr (NT > 1)
    if (nt < NT) return direct_upto<Lanes, Kind, NT - 1>(nt, tr, n, a, b0, acc, pf);
  direct_tokens<Lanes, Kind, NT>(tr, n, a, b0, acc, pf);
}

// Rows [r0, r1) for every token: tiles of kRows rows; per tile, panels of kPanelBlocks
// blocks repacked once and multiplied by every token.
template <class Lanes, class Kind>
void gemm_row_lanes(const WeightMatrix& w, const typename Kind::Act& a, int64_t r0, int64_t r1, float* y) {
  using Reg = typename Lanes::Reg;
  using Acc = TileOutputs<Lanes>;
  constexpr int kRows = kTileRows<Lanes>, kMaxTok = Lanes::kMaxTok;
  constexpr int64_t U = Kind::kUnits, PB = Kind::kPanelBlocks, BS = int64_t(sizeof(typename Kind::Block));
  const int64_t nb = w.cols / kActBlock<typename Kind::Act>, T = a.T, rs = nb * BS;
  const auto* base = static_cast<const uint8_t*>(w.data);
  // The token accumulators, and beyond one group of tokens the panel after them, in one
  // heap block (units of a register): the panel's 10-20 KB would otherwise be fresh stack
  // pages in every pool thread. One group's accumulators (at most 512 bytes) stay on the
  // stack: a heap block per call made allocator time a visible share of a small model's
  // decode.
  Acc one_group[kMaxTok];
  const std::unique_ptr<Acc[]> buf(T > kMaxTok ? new Acc[size_t(T + PB * U)] : nullptr);
  Acc* const acc = T > kMaxTok ? buf.get() : one_group;
  auto* const panel = reinterpret_cast<Reg*>(acc + T);
  for (int64_t r = r0; r < r1; r += kRows) {
    const int nvalid = r1 - r < kRows ? int(r1 - r) : kRows;
    const auto tr = Lanes::tile_rows(base, rs, r, nvalid);
    // The rows of a tile are one contiguous stretch of memory, read as kRows streams. The
    // next tile's stretch is prefetched while this one is multiplied: one linear stream, a
    // tile (9-50 KB) ahead, its lines spread evenly over this tile's blocks (counters, no
    // division per line), as DRAM likes it best. prefetch(share, per) issues a line each
    // time the shares reach per. Into L2, not L1: the L1 hint held decode below the rate
    // the cores read memory at, where the L2 hint reached it (and no prefetch at all fell
    // between the two).
    const int64_t next_end = r + 2 * kRows < r1 ? r + 2 * kRows : r1;
    const int64_t next_lines = next_end > r + kRows ? ((next_end - r - kRows) * rs + 63) / 64 : 0;
    const uint8_t* pf = base + (r + kRows) * rs;
    int64_t due = 0;
    auto prefetch = [&](int64_t share, int64_t per) FS_ALWAYS_INLINE {
      for (due += share; due >= per; due -= per) {
        _mm_prefetch(reinterpret_cast<const char*>(pf), _MM_HINT_T1);
        pf += 64;
      }
    };
    for (int64_t t = 0; t < T; ++t) Lanes::store(acc[t].v, Lanes::zero());
    for (int64_t c0 = 0; c0 < nb; c0 += PB) {
      const int64_t n = nb - c0 < PB ? nb - c0 : PB;
      // One group of tokens: no panel (the same operations). A block's share of the next
      // tile's lines goes out in Kind::kPrefetchSteps steps during its repack: a
      // super-block's lines all at once filled the line-fill buffers and stalled the
      // repack (Q4_K_M decode read its weights well below the machine's bandwidth).
      if (T <= kMaxTok) {
        direct_upto<Lanes, Kind, kMaxTok>(int(T), tr, n, a, c0, acc, [&] FS_ALWAYS_INLINE {
          prefetch(next_lines, nb * Kind::kPrefetchSteps);
        });
        continue;
      }
      // Several groups: the panel, and the prefetch spread over the groups (with many
      // groups the repack is short beside the multiplies, and lines issued during it alone
      // would queue up and stall it).
      const int64_t groups = (T + kMaxTok - 1) / kMaxTok;
      for (int64_t k = 0; k < n; ++k) Kind::prep(tr, c0 + k, panel + k * U, [] {});
      for (int64_t t0 = 0; t0 < T;) {
        const int64_t nt = T - t0 < kMaxTok ? T - t0 : kMaxTok;
        tokens_upto<Lanes, Kind, kMaxTok>(int(nt), panel, n, a, c0, t0, acc);
        t0 += nt;
        prefetch(next_lines * n, nb * groups);
      }
    }
    const auto keep = Lanes::keep(nvalid);
    for (int64_t t = 0; t < T; ++t) Lanes::store_rows(y + t * w.rows + r, keep, Lanes::load(acc[t].v));
  }
}

}  // namespace
}  // namespace flashspec::cpu
