#pragma once
// The frame of the AVX2 K-quant tiles (kquants_avx2.cpp, kquants_low_avx2.cpp): one weight
// row times up to four tokens, super-block after super-block, each token's products summed
// in one float accumulator of 8 lanes, reduced once at the end; and the scale broadcast
// the 16-sub-block types share. Include only from *_avx2.cpp: internal linkage on purpose
// (see tile_drivers.h).
#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/matmul_internal.h"
#include "kernels/cpu/simd_avx2.h"

namespace flashspec::cpu {
namespace {

// Prefetch distance for the weight stream: one linear stream, each line once.
constexpr int kPrefetchBytes = 8192;

// The scales of a run of 32 weights (run i of half n of a Q2_K, Q3_K or Q6_K super-block,
// which covers 16-weight sub-blocks g = 8n + 2i and g + 1) as int16, from the super-block's
// 16 int8 sub-block scales: sub-block g's in the low 128 bits, g + 1's in the high ones.
FS_ALWAYS_INLINE inline __m256i run_scales(__m128i sc8, int g) {
  const __m128i idx = _mm_or_si128(_mm_set1_epi8(char(g)), _mm_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1));
  return _mm256_cvtepi8_epi16(_mm_shuffle_epi8(sc8, idx));
}

// acc + float(isum) * (d * dx) - float(mins) * (dmin * dx): a super-block with mins (Q2_K,
// Q5_K) of one token, in llama.cpp's order of operations.
FS_ALWAYS_INLINE inline __m256 add_block_with_mins(__m256 acc, __m256i isum, __m256i mins, float d, float dmin, float dx) {
  acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(d * dx), acc);
  return _mm256_fmadd_ps(_mm256_cvtepi32_ps(mins), _mm256_set1_ps(-dmin * dx), acc);
}

// Row r (nb super-blocks at wr) times tokens t0 .. t0 + NT - 1 of a, into y[t][r].
// block(blk, b, xq, bs, acc) adds super-block b's products into acc[t], where xq[t] and
// bs[t] are the rows of codes and 16-sums of token t0 + t. With kPrefetch (the first
// sweep over a panel) each super-block prefetches the one kPrefetchBytes ahead.
template <int NT, bool kPrefetch, class Block, class BlockFn>
FS_ALWAYS_INLINE inline void k_row_tile(const Block* wr, const ActQ8_K& a, int64_t nb, int64_t t0, float* y,
                                        int64_t rows, int64_t r, BlockFn block) {
  const int8_t* xq[NT];
  const int16_t* bs[NT];
  __m256 acc[NT];
  for (int t = 0; t < NT; ++t) {
    xq[t] = a.qs + (t0 + t) * a.cols;
    bs[t] = a.bsums + (t0 + t) * (a.cols / 16);
    acc[t] = _mm256_setzero_ps();
  }
  for (int64_t b = 0; b < nb; ++b) {
    const Block& blk = wr[b];
    if constexpr (kPrefetch) {
      const char* p = reinterpret_cast<const char*>(&blk) + kPrefetchBytes;
      for (int64_t o = 0; o < int64_t(sizeof(Block)); o += 64) _mm_prefetch(p + o, _MM_HINT_T0);
    }
    block(blk, b, xq, bs, acc);
  }
  for (int t = 0; t < NT; ++t) y[(t0 + t) * rows + r] = simd::hsum256(acc[t]);
}

}  // namespace
}  // namespace flashspec::cpu
