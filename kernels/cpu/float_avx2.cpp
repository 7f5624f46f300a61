// AVX2 kernels for float weights (F32, F16 via F16C, BF16) times f32 activations (for F16
// and BF16 weights, activations already rounded to the weight type by round_f16 /
// round_bf16 below, as llama.cpp does). A tile is two rows by up to four tokens: eight
// weights of each row are converted once and fed to every token of the tile.
#include <utility>

#include "kernels/cpu/matmul_avx2.h"

#if defined(__x86_64__) || defined(__i386__)

#include "kernels/cpu/simd_avx2.h"

namespace flashspec::cpu::avx2 {

namespace {

using namespace simd;

struct F32Fmt {
  static constexpr int64_t kBytes = 4;
  static __m256 load8(const char* row, int64_t c) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + c);
  }
  static float load1(const char* row, int64_t c) {
    float v;
    std::memcpy(&v, row + 4 * c, 4);
    return v;
  }
};
struct F16Fmt {
  static constexpr int64_t kBytes = 2;
  static __m256 load8(const char* row, int64_t c) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * c)));
  }
  static float load1(const char* row, int64_t c) { return _cvtsh_ss(load_u16(row + 2 * c)); }
};
struct BF16Fmt {
  static constexpr int64_t kBytes = 2;
  static __m256 load8(const char* row, int64_t c) {
    const __m256i h = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * c)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(h, 16));
  }
  static float load1(const char* row, int64_t c) {
    const uint32_t u = uint32_t(load_u16(row + 2 * c)) << 16;
    float v;
    std::memcpy(&v, &u, 4);
    return v;
  }
};

template <int NT, class Fmt>
void float_tile(const char* w0, const char* w1, const float* x, int64_t cols, int64_t t0, float* y,
                int64_t rows, int64_t r, bool two) {
  __m256 acc0[NT], acc1[NT];
  const float* xt[NT];
  for (int t = 0; t < NT; ++t) {
    acc0[t] = acc1[t] = _mm256_setzero_ps();
    xt[t] = x + (t0 + t) * cols;
  }
  // Single token: the two rows are consecutive, so prefetch the next pair of rows as one
  // linear stream at twice the pace (see matmul_avx2.cpp's decode_tile).
  const char* pf = w0 + 2 * (w1 - w0);
  int64_t c = 0;
  for (; c + 8 <= cols; c += 8) {
    if constexpr (NT == 1) _mm_prefetch(pf + 2 * c * Fmt::kBytes, _MM_HINT_T0);
    const __m256 v0 = Fmt::load8(w0, c), v1 = Fmt::load8(w1, c);
    unroll<NT>([&](auto tc) FS_ALWAYS_INLINE {
      constexpr int t = decltype(tc)::value;
      const __m256 xv = _mm256_loadu_ps(xt[t] + c);
      acc0[t] = _mm256_fmadd_ps(v0, xv, acc0[t]);
      acc1[t] = _mm256_fmadd_ps(v1, xv, acc1[t]);
    });
  }
  for (int t = 0; t < NT; ++t) {
    float s0 = hsum256(acc0[t]), s1 = hsum256(acc1[t]);
    for (int64_t i = c; i < cols; ++i) {
      s0 += Fmt::load1(w0, i) * xt[t][i];
      s1 += Fmt::load1(w1, i) * xt[t][i];
    }
    y[(t0 + t) * rows + r] = s0;
    if (two) y[(t0 + t) * rows + r + 1] = s1;
  }
}

template <class Fmt>
void gemm_float(const WeightMatrix& w, const float* x, int64_t T, int64_t r0, int64_t r1, float* y) {
  const int64_t stride = row_bytes(w.type, w.cols);
  const auto* base = static_cast<const char*>(w.data);
  int64_t tg = (int64_t(256) << 10) / (4 * w.cols) / 4 * 4;  // f32 activations held in L2
  if (tg < 4) tg = 4;
  for (int64_t g0 = 0; g0 < T; g0 += tg) {
    const int64_t g1 = g0 + tg < T ? g0 + tg : T;
    for (int64_t r = r0; r < r1; r += 2) {
      const char* w0 = base + r * stride;
      const bool two = r + 1 < r1;
      const char* w1 = two ? w0 + stride : w0;
      int64_t t = g0;
      for (; t + 4 <= g1; t += 4) float_tile<4, Fmt>(w0, w1, x, w.cols, t, y, w.rows, r, two);
      switch (g1 - t) {
        case 3: float_tile<3, Fmt>(w0, w1, x, w.cols, t, y, w.rows, r, two); break;
        case 2: float_tile<2, Fmt>(w0, w1, x, w.cols, t, y, w.rows, r, two); break;
        case 1: float_tile<1, Fmt>(w0, w1, x, w.cols, t, y, w.rows, r, two); break;
        default: break;
      }
    }
  }
}

// x rounded to bf16 and widened: round to nearest even on the bit pattern, NaN kept and
// made quiet; bit for bit quantize_activations.cpp's round_row_bf16.
static inline __m256 round8_bf16(__m256 x) {
  const __m256i u = _mm256_castps_si256(x);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  const __m256i rounded = _mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff)));
  const __m256i quiet = _mm256_or_si256(u, _mm256_set1_epi32(0x00400000));
  const __m256 nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
  const __m256i r = _mm256_castps_si256(
      _mm256_blendv_ps(_mm256_castsi256_ps(rounded), _mm256_castsi256_ps(quiet), nan));
  return _mm256_castsi256_ps(_mm256_and_si256(r, _mm256_set1_epi32(int(0xffff0000u))));
}

static inline __m256 round8_f16(__m256 x) {
  return _mm256_cvtph_ps(_mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

template <class Round8>
void round_row(const float* x, float* out, int64_t n, Round8 round8) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, round8(_mm256_loadu_ps(x + i)));
  if (i < n) {  // the tail through a zero-padded vector
    alignas(32) float buf[8] = {};
    std::memcpy(buf, x + i, size_t(n - i) * sizeof(float));
    _mm256_store_ps(buf, round8(_mm256_load_ps(buf)));
    std::memcpy(out + i, buf, size_t(n - i) * sizeof(float));
  }
}

}  // namespace

void round_f16(const float* x, float* out, int64_t n) { round_row(x, out, n, round8_f16); }
void round_bf16(const float* x, float* out, int64_t n) { round_row(x, out, n, round8_bf16); }

void gemm_f32(const WeightMatrix& w, const float* x, int64_t T, int64_t r0, int64_t r1, float* y) {
  gemm_float<F32Fmt>(w, x, T, r0, r1, y);
}
void gemm_f16(const WeightMatrix& w, const float* x, int64_t T, int64_t r0, int64_t r1, float* y) {
  gemm_float<F16Fmt>(w, x, T, r0, r1, y);
}
void gemm_bf16(const WeightMatrix& w, const float* x, int64_t T, int64_t r0, int64_t r1, float* y) {
  gemm_float<BF16Fmt>(w, x, T, r0, r1, y);
}

}  // namespace flashspec::cpu::avx2

#endif
