// fp16 -> f32 rows with F16C: the attention converts the whole fp16 KV block it reads on
// every call, which the scalar bit-twiddling version made a tenth of decode time.
#include <immintrin.h>

#include <cstdint>


namespace flashspec::cpu {

void f16_to_f32_avx2(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
  // F16C for the tail too: core/half.h's inline fp16_to_float compiled here with AVX2
  // flags could be the copy the linker keeps for every caller (see simd_avx2.h).
  for (; i < n; ++i) dst[i] = _cvtsh_ss(src[i]);
}

}  // namespace flashspec::cpu
