#pragma once
// gpt-oss's experts' activation, as ggml's swiglu_oai computes it: the gate clamped from
// above and the up projection on both sides at `limit`, then gate * sigmoid(alpha * gate)
// * (up + 1). The constants are llama.cpp b8967's for gpt-oss (they are not in the file).
#include <cmath>
#include <cstdint>

#include "kernels/host_device.h"

namespace flashspec {

inline constexpr float kSwigluOaiAlpha = 1.702f;
inline constexpr float kSwigluOaiLimit = 7.0f;

FS_HD float swiglu_oai(float gate, float up) {
  const float x = fminf(gate, kSwigluOaiLimit);
  const float y = fminf(fmaxf(up, -kSwigluOaiLimit), kSwigluOaiLimit);
  return x / (1.0f + expf(kSwigluOaiAlpha * -x)) * (y + 1.0f);
}

// gate[i] = swiglu_oai(gate[i], up[i]) for i in [0, n).
inline void swiglu_oai_host(float* gate, const float* up, int64_t n) {
  for (int64_t i = 0; i < n; ++i) gate[i] = swiglu_oai(gate[i], up[i]);
}

}  // namespace flashspec
