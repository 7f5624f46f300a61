#pragma once
// The several-token tile over the token-pair activation layout, shared by the AVX2 and
// AVX-512 kernels (which differ in how one weight block is multiplied with one token pair).
// Include only from *_avx2.cpp / *_avx512.cpp; internal linkage so each ISA keeps its own
// copy (see tile_drivers.h).
#include <immintrin.h>

#include <cstdint>

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

// The fp16 scales of blocks b .. b+3 (0 past nvalid) as [4 floats | same 4 floats].
template <class Block>
FS_ALWAYS_INLINE inline __m256 group_scales(const Block* w, int nvalid) {
  uint64_t h = 0;
  for (int k = 0; k < 4; ++k)
    if (k < nvalid) h |= uint64_t(w[k].d) << (16 * k);
  return _mm256_cvtph_ps(_mm_set1_epi64x(int64_t(h)));
}

// Row w (nb blocks) times token pairs p0 .. p0+NP-1. prepare(block) unpacks a weight block
// once; dot(prepared, pair_block) gives its [t0 x4 | t1 x4] int32 sums with one pair.
template <int NP, bool kPrefetch, bool kZeroPoint, class Block, class Prepare, class Dot>
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
    const __m256 dw = group_scales(wb, nvalid);
    unroll<NP>([&](auto pc) FS_ALWAYS_INLINE {
      constexpr int p = decltype(pc)::value;
      const int64_t o = (p * groups + g) * 8;
      __m256i u = red[p].result();
      if constexpr (kZeroPoint) u = _mm256_add_epi32(u, loadu256(zp + o));
      const __m256 s = _mm256_mul_ps(dw, _mm256_loadu_ps(dx + o));
      acc[p] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(u), s, acc[p]);
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

}  // namespace
}  // namespace flashspec::cpu
