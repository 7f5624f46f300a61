#pragma once
// GELU as llama.cpp's CPU backend computes it for Gemma's GeGLU FFN (ggml's GELU_FP16
// path): the tanh approximation, evaluated at the input rounded to fp16 and rounded to
// fp16 itself (ggml reads it from a 64k-entry table built that way), with inputs at or
// below -10 giving 0 and at or above 10 giving the input. Matching that, not the exact
// GELU, keeps greedy tokens equal to llama.cpp's at near-ties.
#include <cmath>
#include <cstdint>

#include "core/half.h"

namespace flashspec {

inline float gelu_ggml(float x) {
  if (x <= -10.0f) return 0.0f;
  if (x >= 10.0f) return x;
  constexpr float kSqrt2OverPi = 0.79788456080286535587989211986876f, kCoef = 0.044715f;
  const float h = round_to_fp16(x);
  return round_to_fp16(0.5f * h * (1.0f + std::tanh(kSqrt2OverPi * h * (1.0f + kCoef * h * h))));
}

// gate[i] = gelu(gate[i]) * up[i] for i in [0, n).
inline void gelu_mul_host(float* gate, const float* up, int64_t n) {
  for (int64_t i = 0; i < n; ++i) gate[i] = gelu_ggml(gate[i]) * up[i];
}

}  // namespace flashspec
