// AVX2 + FMA + F16C kernels for Q8_0 weights (Q8_0 activations); the table of all AVX2
// kernels, the others' being in row_lanes_avx2.cpp, blocks32_avx2.cpp, kquants*_avx2.cpp,
// float_avx2.cpp and quantize_avx2.cpp.
//
// On Zen 3 the multiply-class instructions (maddubs, madd, fma) share two pipes and the
// loops run at about 4 instructions per cycle, so the kernels are shaped to minimize
// instructions per multiply-accumulate: each maddubs multiplies 32 int8 pairs of two rows
// (single token) or two tokens (several tokens) packed into the two 128-bit halves of a
// register, and the int32 sums of 4 blocks are reduced before one conversion and one
// scaling (pair_tiles.h).
#include "kernels/cpu/matmul_avx2.h"

#if defined(__x86_64__) || defined(__i386__)

#include "kernels/cpu/pair_tiles.h"
#include "kernels/cpu/simd_avx2.h"
#include "kernels/cpu/tile_drivers.h"

namespace flashspec::cpu {

namespace {

using namespace simd;

// Q8_0: signed weights, multiplied as pair_tiles.h's signed_dot.
//  - single token (row_pairs_decode): rows 2i and 2i+1 in the two halves of a register, a
//    tile of 2 row pairs sharing the activation loads;
//  - several tokens (pairs_tile, token-pair layout): 16 columns of one row broadcast to
//    both halves against the same columns of the two tokens of a pair, loaded straight
//    from memory as the maddubs operand; a tile is one row by up to 4 token pairs, each
//    weight block unpacked once for all of them.
void q8_0_decode(const BlockQ8_0* w0, int64_t nb, int nrows, const ActQ8_0& a, float* y, int64_t r) {
  const __m256i ones = _mm256_set1_epi16(1);
  row_pairs_decode<Offset::None>(
      w0, nb, nrows, a, y, r, [&](const BlockQ8_0& b0, const BlockQ8_0& b1, __m256i xl, __m256i xh) FS_ALWAYS_INLINE {
        const __m256i wl = load2x128(b0.qs, b1.qs);
        const __m256i wh = load2x128(b0.qs + 16, b1.qs + 16);
        return signed_dot(wl, wh, xl, xh, ones);
      });
}

template <int NP, bool kPrefetch>
void q8_0_pairs(const BlockQ8_0* w, const ActQ8_0& a, int64_t nb, int64_t p0, float* y, int64_t rows, int64_t r,
                bool) {
  const __m256i ones = _mm256_set1_epi16(1);
  pairs_tile<NP, kPrefetch, Offset::None>(
      w, a, nb, p0, y, rows, r,
      [&](const BlockQ8_0& blk) FS_ALWAYS_INLINE {
        const __m256i wl = bcast128(blk.qs), wh = bcast128(blk.qs + 16);
        return signed_halves(wl, wh);
      },
      [&](const SignedHalves& q, const int8_t* xp) FS_ALWAYS_INLINE {
        return signed_dot(q, xp, ones);
      });
}

struct Q8_0Tiles {
  using Block = BlockQ8_0;
  static constexpr auto decode = q8_0_decode;
  template <int NP, bool kPrefetch>
  static constexpr auto pairs = q8_0_pairs<NP, kPrefetch>;
};

// A function of its own rather than the driver's instantiation in the table: GCC inlines
// the tiles differently into a function whose address is taken.
void gemm_q8_0(const WeightMatrix& w, const ActQ8_0& a, int64_t r0, int64_t r1, float* y) {
  drive_q8_0<kAvx2PairTiles, Q8_0Tiles>(w, a, r0, r1, y);
}

}  // namespace

const IsaKernels& avx2_kernels() {
  static constexpr IsaKernels k{.name = "avx2",
                                .quantize_q8_0 = avx2::quantize_q8_0,
                                .quantize_q8_0_pairs = avx2::quantize_q8_0_pairs,
                                .quantize_q8_k = avx2::quantize_q8_k,
                                .round_f16 = avx2::round_f16,
                                .round_bf16 = avx2::round_bf16,
                                .q8_0_layout = [](GgmlType type) {
                                  // Q4_0 runs the row-lane kernel (row_lanes_avx2.cpp).
                                  return Q8_0Layout{type != GgmlType::Q4_0, 8};
                                },
                                .q4_0 = avx2::gemm_q4_0,
                                .q5_0 = avx2::gemm_q5_0,
                                .q5_1 = avx2::gemm_q5_1,
                                .q8_0 = gemm_q8_0,
                                .iq4_nl = avx2::gemm_iq4_nl,
                                .mxfp4 = avx2::gemm_mxfp4,
                                .q4_0_lanes16 = nullptr,
                                .pack_q4_0_lanes16 = nullptr,
                                .q2_k = avx2::gemm_q2_k,
                                .q3_k = avx2::gemm_q3_k,
                                .q4_k = avx2::gemm_q4_k,
                                .q5_k = avx2::gemm_q5_k,
                                .q6_k = avx2::gemm_q6_k,
                                .f32 = avx2::gemm_f32,
                                .f16 = avx2::gemm_f16,
                                .bf16 = avx2::gemm_bf16};
  return k;
}

}  // namespace flashspec::cpu

#else  // not x86: the dispatcher never selects AVX2; keep the symbol for the linker.

namespace flashspec::cpu {
const IsaKernels& avx2_kernels() { return scalar_kernels(); }
}  // namespace flashspec::cpu

#endif
